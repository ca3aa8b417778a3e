package web_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/cron"
	"github.com/gojob/gojob/durable"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/orderedstore"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubytest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/ordered"
	"github.com/gojob/gojob/sidejob"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gojob/gojob/web"
)

// world is a small cluster for the dashboard: a private redis-server, a
// gojob server in this process (Sidekiq 7 format, so it writes metrics),
// a real Ruby Sidekiq 6.4.1 process, and jobs in every state.
type world struct {
	redis *redistest.Server
	pool  *redis.Pool
	api   *api.API
	srv   *sidekiq.Server
	// srvDone is closed when the gojob server's Run returns.
	srvDone chan struct{}
	ruby    *exec.Cmd
	// rubyDone is closed when the Ruby process exits.
	rubyDone chan struct{}
	web      *httptest.Server
	sjParent *sidejob.Job
}

const rubyWorker = `
require "sidekiq"
Sidekiq.configure_server { |c| c.redis = { url: ENV.fetch("REDIS_URL") } }
Sidekiq.logger.level = Logger::WARN
class RubySlowJob
  include Sidekiq::Worker
  def perform(*) = sleep(30)
end
`

// startRuby runs the real `sidekiq` command (Debian's ruby-sidekiq) on
// queue "ruby", tagged ruby-web.
func startRuby(t *testing.T, w *world) {
	rubytest.Require(t)
	dir := t.TempDir()
	f := filepath.Join(dir, "worker.rb")
	require.NoError(t, os.WriteFile(f, []byte(rubyWorker), 0o644))
	cmd := exec.Command("sidekiq", "-r", f, "-q", "ruby", "-c", "2", "-t", "1", "-g", "ruby-web")
	cmd.Env = append(os.Environ(), "REDIS_URL="+w.redis.URL())
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = testLog{t}, testLog{t}
	require.NoError(t, cmd.Start())
	w.ruby, w.rubyDone = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(w.rubyDone) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-w.rubyDone:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-w.rubyDone
		}
	})
}

func newWorld(t *testing.T, cfg *web.Config) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{redis: redistest.Start(t)}
	w.pool = w.redis.Pool(t)
	var err error
	w.api, err = api.New(&api.Config{Pool: w.pool, Version: wire.Version{Major: 7, Minor: 3, Patch: 10}})
	require.NoError(t, err)

	// The gojob process.
	w.srv, err = sidekiq.NewServer(&sidekiq.ServerConfig{
		Pool: w.pool, Queues: []wire.QueueWeight{{Name: "go", Weight: 1}, {Name: "default", Weight: 1}},
		Concurrency: 3, Version: wire.Version{Major: 7, Minor: 3, Patch: 10}, Tag: "gojob-web",
		HeartbeatInterval: time.Second, ShutdownTimeout: time.Second,
	})
	require.NoError(t, err)
	w.srv.Handle("GoOkJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		time.Sleep(25 * time.Millisecond)
		return nil
	}), nil)
	w.srv.Handle("GoFailJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		return errors.New("GoFailJob failed: the payment gateway said no")
	}), nil)
	w.srv.Handle("GoSlowJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		<-ctx.Done()
		return ctx.Err()
	}), nil)
	runCtx, stop := context.WithCancel(ctx)
	w.srvDone = make(chan struct{})
	go func() { w.srv.Run(runCtx); close(w.srvDone) }()
	t.Cleanup(func() { stop(); <-w.srvDone })

	startRuby(t, w)

	// Jobs in every state.
	cl := w.api.Client()
	for i := range 5 {
		_, err := cl.Enqueue(ctx, "default", "GoOkJob", i, "hello")
		require.NoError(t, err)
	}
	for i := range 3 {
		_, err := cl.Enqueue(ctx, "default", "GoFailJob", i, map[string]any{"order": 1000 + i})
		require.NoError(t, err)
	}
	_, err = cl.Enqueue(ctx, "go", "GoSlowJob", "busy")
	require.NoError(t, err)
	_, err = cl.Enqueue(ctx, "ruby", "RubySlowJob", "busy in ruby")
	require.NoError(t, err)
	for i := range 4 {
		_, err = cl.Enqueue(ctx, "waiting", "WaitingJob", i)
		require.NoError(t, err)
	}
	later, err := wire.NewJob("LaterJob", "tomorrow")
	require.NoError(t, err)
	_, err = cl.Push(ctx, later, &sidekiq.PushOpts{In: time.Hour})
	require.NoError(t, err)
	dead, err := wire.NewJob("DeadJob", 42)
	require.NoError(t, err)
	dead.SetQueue("default")
	dead.Set("jid", rubyjson.StringValue(contract.NewJID()))
	dead.Set("error_class", rubyjson.StringValue("RuntimeError"))
	dead.Set("error_message", rubyjson.StringValue("out of retries"))
	contract.SetErrorBacktrace(dead, []string{"app/jobs/dead_job.rb:12:in `perform'", "sidekiq/processor.rb:196:in `execute_job'"}, wire.Version{Major: 7, Minor: 3, Patch: 10})
	require.NoError(t, w.api.DeadSet().Kill(ctx, dead.Bytes(), &api.KillOpts{SkipDeathHandlers: true}))
	// Retries nobody processes (queue "parked"), for Retry now and Kill.
	for i, class := range []string{"ParkedRetryJob", "ParkedKillJob"} {
		j, err := wire.NewJob(class, i)
		require.NoError(t, err)
		j.SetQueue("parked")
		j.Set("jid", rubyjson.StringValue(contract.NewJID()))
		contract.SetRetryCount(j, 2)
		j.Set("error_class", rubyjson.StringValue("Net::ReadTimeout"))
		j.Set("error_message", rubyjson.StringValue("read timeout"))
		require.NoError(t, w.api.RetrySet().Schedule(ctx, time.Now().Add(time.Duration(10+i)*time.Minute), j))
	}

	// A SideJob tree.
	sj, err := sidejob.NewClient(&sidejob.Config{Pool: w.pool})
	require.NoError(t, err)
	// The worker class as its serving process registers it (ServerSetup).
	conn := w.pool.Get()
	_, err = conn.Do("HSET", "workers:sj", "Pipeline", `{"inports":{"in":{}},"outports":{"out":{"channels":["/results"]}}}`)
	conn.Close()
	require.NoError(t, err)
	w.sjParent, err = sj.Queue(ctx, "sj", "Pipeline", &sidejob.QueueOpts{Args: []any{"root"}})
	require.NoError(t, err)
	child, err := sj.Queue(ctx, "sj", "Pipeline", &sidejob.QueueOpts{Parent: w.sjParent, Name: "step1"})
	require.NoError(t, err)
	in, err := child.Input(ctx, "in")
	require.NoError(t, err)
	require.NoError(t, in.Write(ctx, map[string]any{"rows": 3}))

	// A periodic job.
	store := &cron.Store{Client: cl, Layout: cron.Layout{}}
	cj, err := cron.NewJob("nightly-report", "0 3 * * *", "ReportJob", "default")
	require.NoError(t, err)
	require.NoError(t, store.Save(ctx, cj))

	// A durable database with one row.
	d, err := durable.New(&durable.Config{URLs: []string{"sqlite:" + filepath.Join(t.TempDir(), "durable.db")},
		Classes: map[string]time.Duration{"DurableJob": 0}})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	_, err = d.Migrate(ctx)
	require.NoError(t, err)
	dj, err := wire.NewJob("DurableJob", 1)
	require.NoError(t, err)
	dj.Set("jid", rubyjson.StringValue(contract.NewJID()))
	dj.SetQueue("default")
	require.NoError(t, d.BeforePush(ctx, []*wire.Job{dj}))

	// An ordered queue with a live worker owning its shards, a key in the
	// morgue and a key waiting.
	startOrdered(t, w)

	if cfg == nil {
		cfg = &web.Config{}
	}
	cfg.Pool, cfg.API, cfg.SideJob, cfg.Cron, cfg.Durable = w.pool, w.api, sj, store, d
	h, err := web.New(cfg)
	require.NoError(t, err)
	w.web = httptest.NewServer(h)
	t.Cleanup(w.web.Close)

	// Settled: both processes beat, the failing jobs are in the retry set,
	// both slow jobs run.
	wait.Within(t, 20*time.Second, "both processes busy and 3 retries", func() bool {
		procs, err := w.api.Processes(ctx)
		if err != nil || len(procs) != 2 {
			return false
		}
		for _, p := range procs {
			if p.Busy != 1 {
				return false
			}
		}
		n, _ := w.api.RetrySet().Size(ctx)
		return n == 5
	})
	return w
}

// orderedWorker names the world's ordered worker in its shard leases.
const orderedWorker = "ordered-web-worker"

// startOrdered runs an ordered worker on queue "orders" (4 shards) whose
// handler fails FailOrder, so key order-13 goes to the morgue after its
// one retry, and leaves key order-99 waiting an hour.
func startOrdered(t *testing.T, w *world) {
	t.Helper()
	ctx := context.Background()
	ow, err := ordered.NewWorker(&ordered.Config{
		Pool: w.pool, Queue: "orders", Shards: 4, Concurrency: 2, Identity: orderedWorker,
		MaxRetryCount: 1, RetryIn: func(int) time.Duration { return 0 }, PollInterval: 20 * time.Millisecond,
		Handler: ordered.HandlerFunc(func(ctx context.Context, b *ordered.Batch) error {
			if b.Jobs[0].Class() == "FailOrder" {
				return errors.New("FailOrder: the warehouse refused order 13")
			}
			return nil
		}),
	})
	require.NoError(t, err)
	require.NoError(t, ow.Start(ctx))
	t.Cleanup(func() { ow.Stop(context.Background()) })
	oc, err := ordered.NewClient(&ordered.ClientConfig{Pool: w.pool})
	require.NoError(t, err)
	bad, err := wire.NewJob("FailOrder", 13)
	require.NoError(t, err)
	bad.SetQueue("orders")
	_, err = oc.Push(ctx, bad, &ordered.PushOpts{Key: "order-13"})
	require.NoError(t, err)
	later, err := wire.NewJob("SyncOrder", 99)
	require.NoError(t, err)
	later.SetQueue("orders")
	_, err = oc.Push(ctx, later, &ordered.PushOpts{Key: "order-99", At: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	wait.Within(t, 10*time.Second, "order-13 in the morgue", func() bool {
		st, err := orderedstore.Status(ctx, w.pool, "orders", time.Now())
		return err == nil && st.MorgueKeys == 1
	})
}

// process returns the live process tagged tag.
func (w *world) process(t *testing.T, tag string) *api.Process {
	t.Helper()
	procs, err := w.api.Processes(context.Background())
	require.NoError(t, err)
	for _, p := range procs {
		if p.Tag == tag {
			return p
		}
	}
	return nil
}

// testLog writes a process's output to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Logf("ruby: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
