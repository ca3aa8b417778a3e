package compat_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/rubytest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// svNewServer builds a gojob server on the env's Redis with test timings: a
// 300 ms heartbeat and a ~200 ms scheduled poll, unless cfg sets them.
// setup registers handlers before the caller starts it.
func svNewServer(t *testing.T, e *env, cfg sidekiq.ServerConfig, setup func(*sidekiq.Server)) *sidekiq.Server {
	t.Helper()
	cfg.Pool = e.pool
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 300 * time.Millisecond
	}
	if cfg.PollIntervalAverage == 0 {
		cfg.PollIntervalAverage = 200 * time.Millisecond
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	s, err := sidekiq.NewServer(&cfg)
	require.NoError(t, err)
	if setup != nil {
		setup(s)
	}
	return s
}

// svServer is svNewServer, started, and stopped at the end of the test.
func svServer(t *testing.T, e *env, cfg sidekiq.ServerConfig, setup func(*sidekiq.Server)) *sidekiq.Server {
	t.Helper()
	s := svNewServer(t, e, cfg, setup)
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() { svStop(t, s) })
	return s
}

// svStop stops a server within 15 s.
func svStop(t *testing.T, s *sidekiq.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	require.NoError(t, s.Stop(ctx))
}

// svInt reads an integer reply.
func svInt(t *testing.T, e *env, cmd string, args ...any) int {
	t.Helper()
	n, err := redis.Int(e.do(t, cmd, args...), nil)
	if err == redis.ErrNil {
		return 0
	}
	require.NoError(t, err)
	return n
}

// svRuby is a Ruby Sidekiq 6.4.1 process started with Sidekiq::CLI.
type svRuby struct {
	identity string
	pid      int
	stop     func()
}

// svCLIScript runs Sidekiq::CLI with the JSON argv in $SV_SIDEKIQ_ARGS. The
// Prelude configures Redis before Sidekiq knows it is a server, so the pool
// is configured again with room for the concurrency.
const svCLIScript = `
require "sidekiq/cli"
Redis.silence_deprecations = true
Sidekiq.configure_server { |c| c.redis = { url: ENV.fetch("REDIS_URL"), size: 20 } }
cli = Sidekiq::CLI.instance
cli.parse(JSON.parse(ENV.fetch("SV_SIDEKIQ_ARGS")))
cli.run
`

// svRubySidekiq starts `sidekiq -r <worker file> -t 1 args...` and waits
// for its first heartbeat (its identity in `processes`).
func svRubySidekiq(t *testing.T, e *env, worker string, args ...string) *svRuby {
	t.Helper()
	f := filepath.Join(t.TempDir(), "sv_worker.rb")
	require.NoError(t, os.WriteFile(f, []byte(worker), 0o644))
	argv, err := json.Marshal(append([]string{"-r", f, "-t", "1"}, args...))
	require.NoError(t, err)
	cmd := rubytest.Start(t, e.srv.URL(), svCLIScript, "SV_SIDEKIQ_ARGS="+string(argv))
	r := &svRuby{pid: cmd.Process.Pid, stop: func() { cmd.Process.Signal(syscall.SIGTERM) }}
	wait.Within(t, 30*time.Second, "the Ruby Sidekiq process's first heartbeat", func() bool {
		r.identity = svProcessByPID(t, e, r.pid)
		return r.identity != ""
	})
	return r
}

// svProcessByPID returns the identity in `processes` whose info has pid.
func svProcessByPID(t *testing.T, e *env, pid int) string {
	t.Helper()
	ids, err := redis.Strings(e.do(t, "SMEMBERS", contract.KeyProcesses), nil)
	require.NoError(t, err)
	for _, id := range ids {
		info, err := redis.Bytes(e.do(t, "HGET", id, "info"), nil)
		if err != nil {
			continue
		}
		var v struct {
			PID int `json:"pid"`
		}
		if json.Unmarshal(info, &v) == nil && v.PID == pid {
			return id
		}
	}
	return ""
}

// svJIDs parses a JSON array of jids printed by Ruby.
func svJIDs(t *testing.T, out string) []string {
	t.Helper()
	var jids []string
	require.NoError(t, json.Unmarshal([]byte(out), &jids), out)
	return jids
}

// Ruby pushes 1000 jobs (push_bulk and single pushes) while a gojob server
// with 10 fetchers runs them: every jid runs exactly once, every arg is
// seen once, nothing is left in the queue, and the stats add up.
func TestServerCompatRubyPushedJobsRunExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 1000
	var (
		mu   sync.Mutex
		runs = map[string]int{}
		args = map[int64]int{}
		all  = make(chan struct{})
	)
	srv := svServer(t, e, sidekiq.ServerConfig{
		Queues: []wire.QueueWeight{{Name: "svbulk"}}, Concurrency: 10, DisablePoller: true,
	}, func(s *sidekiq.Server) {
		s.Handle("SvBulkJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
			a, ok := job.Args()[0].Int()
			require.True(t, ok)
			mu.Lock()
			defer mu.Unlock()
			runs[job.JID()]++
			args[a]++
			if len(runs) == n {
				close(all)
			}
			return nil
		}), nil)
	})

	out := e.ruby(t, `
jids = Sidekiq::Client.push_bulk("class" => "SvBulkJob", "queue" => "svbulk", "args" => (0...600).map { |i| [i] })
(600...1000).each { |i| jids << Sidekiq::Client.push("class" => "SvBulkJob", "queue" => "svbulk", "args" => [i]) }
puts JSON.generate(jids)
`)
	want := svJIDs(t, out)
	require.Len(t, want, n)

	select {
	case <-all:
	case <-time.After(30 * time.Second):
		mu.Lock()
		t.Fatalf("only %d of %d jobs ran", len(runs), n)
	}
	svStop(t, srv) // waits for running jobs, so a late duplicate would be counted

	mu.Lock()
	defer mu.Unlock()
	got := make([]string, 0, len(runs))
	for jid, c := range runs {
		require.Equal(t, 1, c, "jid %s ran %d times", jid, c)
		got = append(got, jid)
	}
	slices.Sort(got)
	slices.Sort(want)
	require.Equal(t, want, got)
	for i := int64(0); i < n; i++ {
		require.Equal(t, 1, args[i], "arg %d", i)
	}
	require.Zero(t, svInt(t, e, "LLEN", contract.QueueKey("svbulk")))
	require.Equal(t, n, svInt(t, e, "GET", contract.KeyStatProcessed))
	require.Zero(t, svInt(t, e, "GET", contract.KeyStatFailed))
	require.Zero(t, svInt(t, e, "SISMEMBER", contract.KeyProcesses, srv.Identity()))
}

// svSchedWorker is the Ruby side of the poller race: its client middleware
// marks what its poller enqueues, and a server middleware records each run
// (jid and marker) in the Redis list sv:ruby-ran. Its poller starts at once
// and polls every ~0.2 s.
const svSchedWorker = `
class SvTag
  def call(worker_class, job, queue, redis_pool)
    job["sv_pushed_by"] = "ruby"
    yield
  end
end

class SvRecord
  def call(worker, job, queue)
    Sidekiq.redis { |c| c.rpush("sv:ruby-ran", Sidekiq.dump_json([job["jid"], job["sv_pushed_by"]])) }
    yield
  end
end

Sidekiq.configure_server do |c|
  c.client_middleware { |chain| chain.add SvTag }
  c.server_middleware { |chain| chain.add SvRecord }
end
Sidekiq.options[:poll_interval_average] = 0.2

class Sidekiq::Scheduled::Poller
  def initial_wait
    @sleeper.pop(0.05)
  rescue Timeout::Error
  end
end

class SvSchedJob
  include Sidekiq::Worker
  def perform(i); end
end
`

// A Ruby Sidekiq process and a gojob server poll the same schedule and
// retry sets and work the same queue: each of 200 scheduled jobs (100
// overdue, 100 due over the next 2 s) and 50 retries (due over the same
// window) runs exactly once across both, and both pollers took part.
func TestServerCompatPollersNeverDoubleRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 250
	type run struct{ jid, by string }
	var (
		mu     sync.Mutex
		goRuns []run
	)
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: e.pool, Version: wire.Version6, Middleware: []sidekiq.Middleware{
		func(ctx context.Context, job *wire.Job, next func(context.Context) error) error {
			job.Set("sv_pushed_by", rubyjson.StringValue("go"))
			return next(ctx)
		},
	}})
	require.NoError(t, err)

	// gojob's poller, like Ruby's, first waits rand*5 s. A probe job
	// scheduled before Ruby starts can only be enqueued by gojob's poller:
	// once it ran, that poller is in its loop (Ruby's initial wait is cut to
	// 0.05 s above).
	probed := make(chan struct{})
	srv := svServer(t, e, sidekiq.ServerConfig{
		Queues: []wire.QueueWeight{{Name: "svsched"}}, Concurrency: 5, Client: client,
		PollIntervalAverage: 200 * time.Millisecond,
	}, func(s *sidekiq.Server) {
		s.Handle("SvSchedJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
			by, _ := job.Get("sv_pushed_by")
			s, _ := by.Str()
			mu.Lock()
			goRuns = append(goRuns, run{job.JID(), s})
			mu.Unlock()
			return nil
		}), nil)
		s.Handle("SvProbeJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
			close(probed)
			return nil
		}), nil)
	})
	probe, err := wire.NewJob("SvProbeJob")
	require.NoError(t, err)
	probe.SetQueue("svsched")
	_, err = e.client.Push(context.Background(), probe, &sidekiq.PushOpts{In: time.Millisecond})
	require.NoError(t, err)
	select {
	case <-probed:
	case <-time.After(10 * time.Second):
		t.Fatal("gojob's poller did not enqueue the probe job")
	}
	ruby := svRubySidekiq(t, e, svSchedWorker, "-q", "svsched", "-c", "5")

	out := e.ruby(t, `
now = Time.now.to_f
at = (0...100).map { now - 1 } + (0...100).map { |i| now + i * 0.02 }
jids = Sidekiq::Client.push_bulk("class" => "SvSchedJob", "queue" => "svsched", "args" => (0...200).map { |i| [i] }, "at" => at)
# 50 failed jobs as JobRetry leaves them, due over the same window.
retries = (0...50).map do |i|
  jid = SecureRandom.hex(12)
  jids << jid
  msg = {"retry" => true, "queue" => "svsched", "class" => "SvSchedJob", "args" => [200 + i], "jid" => jid,
         "created_at" => now - 60, "enqueued_at" => now - 60, "error_message" => "boom", "error_class" => "RuntimeError",
         "failed_at" => now - 30, "retry_count" => 0}
  [(now + i * 0.04 - 0.5).to_s, Sidekiq.dump_json(msg)]
end
Sidekiq.redis { |c| c.zadd("retry", retries) }
puts JSON.generate(jids)
`)
	want := svJIDs(t, out)
	require.Len(t, want, n)

	rubyRuns := func() []run {
		items, err := redis.ByteSlices(e.do(t, "LRANGE", "sv:ruby-ran", 0, -1), nil)
		require.NoError(t, err)
		var out []run
		for _, it := range items {
			var pair [2]string
			require.NoError(t, json.Unmarshal(it, &pair))
			out = append(out, run{pair[0], pair[1]})
		}
		return out
	}
	wait.Within(t, 30*time.Second, "all scheduled jobs to run", func() bool {
		mu.Lock()
		g := len(goRuns)
		mu.Unlock()
		return g+svInt(t, e, "LLEN", "sv:ruby-ran") >= n &&
			svInt(t, e, "ZCARD", contract.KeySchedule) == 0 &&
			svInt(t, e, "ZCARD", contract.KeyRetry) == 0 &&
			svInt(t, e, "LLEN", contract.QueueKey("svsched")) == 0
	})
	// Stop both; each finishes what it has fetched, so any duplicate still
	// in flight is recorded before counting.
	ruby.stop()
	wait.Within(t, 15*time.Second, "the Ruby process to unregister", func() bool {
		return svInt(t, e, "SISMEMBER", contract.KeyProcesses, ruby.identity) == 0
	})
	svStop(t, srv)

	mu.Lock()
	all := append(slices.Clone(goRuns), rubyRuns()...)
	mu.Unlock()
	count := map[string]int{}
	by := map[string]int{}
	for _, r := range all {
		count[r.jid]++
		by[r.by]++
	}
	for jid, c := range count {
		require.Equal(t, 1, c, "jid %s ran %d times", jid, c)
	}
	got := make([]string, 0, len(count))
	for jid := range count {
		got = append(got, jid)
	}
	slices.Sort(got)
	slices.Sort(want)
	require.Equal(t, want, got)
	t.Logf("runs: %d in gojob, %d in Ruby; enqueued by poller: %v", len(goRuns), len(all)-len(goRuns), by)
	require.Equal(t, n, by["go"]+by["ruby"], "every job was enqueued by one of the pollers")
	require.Positive(t, by["go"], "gojob's poller enqueued nothing: the race was not exercised")
	require.Positive(t, by["ruby"], "Ruby's poller enqueued nothing: the race was not exercised")
	require.Zero(t, svInt(t, e, "LLEN", contract.QueueKey("svsched")))
	// Ruby flushes its counters at exit, after it left `processes`; the
	// probe counts too.
	wait.Within(t, 10*time.Second, "stat:processed to count every run", func() bool {
		return svInt(t, e, "GET", contract.KeyStatProcessed) == n+1
	})
}
