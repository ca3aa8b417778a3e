package sidekiq

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubytest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// slowHandler blocks until its job's context is cancelled (hard shutdown)
// and returns the context's error, as a well-behaved Go handler does.
func slowHandler(started chan<- string) HandlerFunc {
	return func(ctx context.Context, job *wire.Job) error {
		started <- job.JID()
		<-ctx.Done()
		return ctx.Err()
	}
}

func slowPayload(jid string, retry string) string {
	return `{"retry":` + retry + `,"queue":"default","class":"Slow","args":[],"jid":"` + jid + `","created_at":1795296573.1,"enqueued_at":1795296573.2}`
}

func TestStopRequeuesUnfinishedJobs(t *testing.T) {
	t.Parallel()
	for _, mode := range fetchModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := newTestServer(t, ServerConfig{Concurrency: 1, ShutdownTimeout: 100 * time.Millisecond, Fetch: mode})
			started := make(chan struct{})
			b.srv.Handle("Slow", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
				close(started)
				<-ctx.Done()
				return ctx.Err()
			}), nil)
			require.NoError(t, b.srv.Start(context.Background()))
			raw := `{"retry":true,"queue":"default","class":"Slow","args":[],"jid":"slow1","enqueued_at":1.5}`
			b.push(t, "default", raw)
			<-started
			require.NoError(t, b.srv.Stop(context.Background()))
			vals, _ := redis.Strings(b.conn.Do("LRANGE", "queue:default", 0, -1))
			require.Equal(t, []string{raw}, vals)
			require.Zero(t, zcard(t, b.conn, contract.KeyRetry))
			isMember, _ := redis.Bool(b.conn.Do("SISMEMBER", contract.KeyProcesses, b.srv.Identity()))
			require.False(t, isMember)
			b.requireNothingInProgress(t)
		})
	}
}

func TestStopWithSpentContextStillRequeues(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 1, ShutdownTimeout: time.Minute})
	started := make(chan struct{})
	b.srv.Handle("Slow", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}), nil)
	require.NoError(t, b.srv.Start(context.Background()))
	raw := `{"retry":true,"queue":"default","class":"Slow","args":[],"jid":"slow2"}`
	b.push(t, "default", raw)
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, b.srv.Stop(ctx))
	vals, _ := redis.Strings(b.conn.Do("LRANGE", "queue:default", 0, -1))
	require.Equal(t, []string{raw}, vals)
}

// A handler that returns as soon as the hard shutdown cancels its context
// must not have its job treated as failed: Ruby raises Sidekiq::Shutdown in
// the thread and never retries or drops the job; it is requeued. gojob used
// to cancel the contexts before marking the jobs abandoned, so such jobs
// could race into the retry set, or vanish when retry was false.
func TestHardShutdownRequeuesContextAwareJobs(t *testing.T) {
	t.Parallel()
	// The race is between the cancellation waking the handlers and the
	// shutdown collecting the running jobs: 64 jobs and 5 rounds made the
	// old order fail in nearly every run.
	for round := 0; round < 2*len(fetchModes); round++ {
		const n = 64
		var died atomic.Int32
		mode := fetchModes[round%len(fetchModes)]
		b := newTestServer(t, ServerConfig{Concurrency: n, ShutdownTimeout: 20 * time.Millisecond, Fetch: mode,
			DeathHandlers: []DeathHandler{func(ctx context.Context, job *wire.Job, err error) { died.Add(1) }}})
		started := make(chan string, n)
		b.srv.Handle("Slow", slowHandler(started), nil)
		var want []string
		for i := 0; i < n; i++ {
			p := slowPayload(fmt.Sprintf("ctx%02d", i), "false")
			want = append(want, p)
			b.push(t, "default", p)
		}
		require.NoError(t, b.srv.Start(context.Background()))
		for i := 0; i < n; i++ {
			<-started
		}
		require.NoError(t, b.srv.Stop(context.Background()))
		vals, err := redis.Strings(b.conn.Do("LRANGE", "queue:default", 0, -1))
		require.NoError(t, err)
		require.ElementsMatch(t, want, vals, "round %d (%s): every running job is back in its queue", round, mode)
		require.Zero(t, died.Load(), "round %d: no job died", round)
		require.Zero(t, zcard(t, b.conn, contract.KeyRetry))
		require.Zero(t, zcard(t, b.conn, contract.KeyDead))
		b.requireNothingInProgress(t)
	}
}

// Ruby 6.4.1 counts a job killed at hard shutdown as processed and failed
// (Processor#stats' ensure and rescue run when Sidekiq::Shutdown is raised
// in the thread) and flushes both at exit. Checked against real Ruby in
// TestHardShutdownMatchesRuby.
func TestHardShutdownCountsAbandonedJobs(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 1, ShutdownTimeout: 20 * time.Millisecond})
	started := make(chan string, 1)
	b.srv.Handle("Slow", slowHandler(started), nil)
	raw := slowPayload("abandon1", "true")
	b.push(t, "default", raw)
	require.NoError(t, b.srv.Start(context.Background()))
	<-started
	require.NoError(t, b.srv.Stop(context.Background()))
	st, err := redis.Strings(b.conn.Do("MGET", "stat:processed", "stat:failed"))
	require.NoError(t, err)
	require.Equal(t, []string{"1", "1"}, st)
	vals, _ := redis.Strings(b.conn.Do("LRANGE", "queue:default", 0, -1))
	require.Equal(t, []string{raw}, vals)
}

// After a hard shutdown, Stop must not return while a fetcher may still pop
// a job: an idle fetcher's BRPOP (2 s) can receive the job just pushed back,
// and it has to push it back again before the process exits (Ruby's
// hard_shutdown waits up to 3 s for its threads). gojob returned at once,
// leaving fetchers blocked in BRPOP behind a stopped server.
func TestStopWaitsForFetchersAfterHardShutdown(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 3, ShutdownTimeout: 20 * time.Millisecond})
	started := make(chan string, 1)
	b.srv.Handle("Slow", slowHandler(started), nil)
	raw := slowPayload("idlefetch", "true")
	b.push(t, "default", raw)
	require.NoError(t, b.srv.Start(context.Background()))
	<-started
	require.NoError(t, b.srv.Stop(context.Background()))
	clients, err := redis.String(b.conn.Do("CLIENT", "LIST"))
	require.NoError(t, err)
	require.NotContains(t, clients, "cmd=brpop", "a fetcher is still blocked after Stop returned")
	vals, _ := redis.Strings(b.conn.Do("LRANGE", "queue:default", 0, -1))
	require.Equal(t, []string{raw}, vals)
}

// A failure whose retry entry is written while the hard shutdown happens
// must still be written: gojob used the hard-shutdown context for the
// retry ZADD, so once it was cancelled a pool without an idle connection
// could not even dial, and the job was lost.
func TestRetryWrittenDuringHardShutdown(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	// No idle connections: every command dials, as after a Redis restart.
	pool := &redis.Pool{MaxIdle: 0, DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialContext(ctx, "unix", rs.Socket)
	}}
	t.Cleanup(func() { pool.Close() })
	srv, err := NewServer(&ServerConfig{Pool: pool, Concurrency: 2, ShutdownTimeout: 20 * time.Millisecond,
		DisablePoller: true, HeartbeatInterval: time.Hour, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	require.NoError(t, err)
	hard := make(chan struct{})
	started := make(chan string, 1)
	srv.Handle("Slow", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		started <- job.JID()
		<-ctx.Done()
		close(hard)
		return ctx.Err()
	}), nil)
	inHook := make(chan struct{})
	srv.Handle("Fails", HandlerFunc(func(ctx context.Context, job *wire.Job) error { return errors.New("boom") }),
		&HandlerOptions{RetryIn: func(count int, err error, job *wire.Job) error {
			close(inHook)
			<-hard // the retry is decided while the server hard-stops
			return nil
		}})
	conn, err := rs.Dial()
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Do("LPUSH", "queue:default", slowPayload("slow", "true"))
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	<-started
	_, err = conn.Do("LPUSH", "queue:default", `{"retry":true,"queue":"default","class":"Fails","args":[],"jid":"fails1"}`)
	require.NoError(t, err)
	<-inHook
	require.NoError(t, srv.Stop(context.Background()))
	n, err := redis.Int(conn.Do("ZCARD", contract.KeyRetry))
	require.NoError(t, err)
	require.Equal(t, 1, n, "the retry entry of the job that failed during the shutdown")
	vals, _ := redis.Strings(conn.Do("LRANGE", "queue:default", 0, -1))
	require.Equal(t, []string{slowPayload("slow", "true")}, vals)
}

// Sidekiq's bulk_requeue sends one `RPUSH queue:<q> job…` per queue in a
// pipeline; gojob sent one RPUSH per job.
func TestBulkRequeueOneRPUSHPerQueue(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 2, ShutdownTimeout: 20 * time.Millisecond})
	started := make(chan string, 2)
	b.srv.Handle("Slow", slowHandler(started), nil)
	p1, p2 := slowPayload("bulk1", "true"), slowPayload("bulk2", "true")
	b.push(t, "default", p1)
	b.push(t, "default", p2)
	require.NoError(t, b.srv.Start(context.Background()))
	<-started
	<-started
	mon := b.redis.StartMonitor(t)
	require.NoError(t, b.srv.Stop(context.Background()))
	var rpush []string
	for _, l := range mon.Lines(t) {
		if strings.HasPrefix(l, `"rpush"`) || strings.HasPrefix(l, `"RPUSH"`) {
			rpush = append(rpush, l)
		}
	}
	require.Len(t, rpush, 1, "%v", rpush)
	require.True(t, strings.HasPrefix(strings.ToLower(rpush[0]), `"rpush" "queue:default" "{`), rpush[0])
	require.Equal(t, 2, strings.Count(rpush[0], `\"class\":\"Slow\"`))
	vals, _ := redis.Strings(b.conn.Do("LRANGE", "queue:default", 0, -1))
	require.ElementsMatch(t, []string{p1, p2}, vals)
}

// hardShutdownState is what a hard shutdown leaves in Redis.
type hardShutdownState struct {
	Processed, Failed string
	Queue             []string
	Processes         int
}

func readHardShutdownState(t *testing.T, c redis.Conn) hardShutdownState {
	t.Helper()
	st, err := redis.Strings(c.Do("MGET", "stat:processed", "stat:failed"))
	require.NoError(t, err)
	q, err := redis.Strings(c.Do("LRANGE", "queue:default", 0, -1))
	require.NoError(t, err)
	n, err := redis.Int(c.Do("SCARD", contract.KeyProcesses))
	require.NoError(t, err)
	return hardShutdownState{Processed: st[0], Failed: st[1], Queue: q, Processes: n}
}

// Real Ruby Sidekiq 6.4.1 (`sidekiq -c 1 -t 1`) and gojob, each stopped
// with TERM while a job outlives the timeout, leave the same state: the job
// back in its queue with its original bytes, processed 1 and failed 1, the
// process unregistered. (-c 1: with an idle processor, Ruby 6.4.1 itself
// sometimes loses the job: the idle thread's BRPOP receives the requeued
// job just as hard_shutdown kills it. gojob's Stop waits for its fetchers;
// see TestStopWaitsForFetchersAfterHardShutdown.)
func TestHardShutdownMatchesRuby(t *testing.T) {
	t.Parallel()
	rubytest.Require(t)
	payload := `{"retry":true,"queue":"default","args":[],"class":"AuditSleepy","jid":"0123456789abcdef01234567","created_at":1795296573.1664987,"enqueued_at":1795296573.1665046}`

	// Ruby.
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	rc, err := rs.Dial()
	require.NoError(t, err)
	defer rc.Close()
	_, err = rc.Do("LPUSH", "queue:default", payload)
	require.NoError(t, err)
	dir := t.TempDir()
	jobFile := filepath.Join(dir, "job.rb")
	require.NoError(t, os.WriteFile(jobFile, []byte(rubytest.Prelude+`
class AuditSleepy
  include Sidekiq::Worker
  def perform
    Sidekiq.redis { |c| c.set("audit:started", "1") }
    sleep 30
  end
end
`), 0o644))
	cmd := exec.Command("sidekiq", "-r", jobFile, "-c", "1", "-t", "1")
	cmd.Env = append(os.Environ(), "REDIS_URL="+rs.URL())
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	cmd.Stdout = nil
	require.NoError(t, cmd.Start())
	var logMu sync.Mutex
	var rubyLog strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			rubyLog.WriteString(sc.Text() + "\n")
			logMu.Unlock()
		}
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	wait.For(t, "the Ruby job to start", func() bool {
		v, _ := redis.String(rc.Do("GET", "audit:started"))
		return v == "1"
	})
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())
	ruby := readHardShutdownState(t, rc)

	// gojob.
	gs := redistest.Start(t)
	pool := gs.Pool(t)
	srv, err := NewServer(&ServerConfig{Pool: pool, Concurrency: 1, ShutdownTimeout: time.Second,
		DisablePoller: true, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	require.NoError(t, err)
	started := make(chan string, 1)
	srv.Handle("AuditSleepy", slowHandler(started), nil)
	gc := pool.Get()
	defer gc.Close()
	_, err = gc.Do("LPUSH", "queue:default", payload)
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	<-started
	srv.Signal("TERM")
	<-srv.life.stopCh
	require.NoError(t, srv.Stop(context.Background()))
	gojob := readHardShutdownState(t, gc)

	logMu.Lock()
	defer logMu.Unlock()
	require.Equal(t, hardShutdownState{Processed: "1", Failed: "1", Queue: []string{payload}}, ruby, rubyLog.String())
	require.Equal(t, ruby, gojob)
}

// A stop in the middle of a busy drain loses and duplicates nothing: every
// job either ran once or is back in the queue, whatever the pipelines had
// in flight when quiet came.
func TestStopUnderLoadLosesAndDuplicatesNothing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode  string
		depth int
	}{{"basic", 1}, {"basic", 8}, {"reliable", 0}} {
		t.Run(fmt.Sprint(c.mode, " pipeline ", c.depth), func(t *testing.T) {
			t.Parallel()
			b := newTestServer(t, ServerConfig{Concurrency: 25, FetchPipeline: c.depth, Fetch: c.mode})
			const n = 20000
			var mu sync.Mutex
			ran := map[string]int{}
			b.srv.Handle("Job", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
				mu.Lock()
				ran[job.JID()]++
				mu.Unlock()
				return nil
			}), nil)
			for i := 0; i < n; i++ {
				b.conn.Send("LPUSH", "queue:default", fmt.Sprintf(`{"class":"Job","args":[],"jid":"j%d","queue":"default"}`, i))
			}
			_, err := b.conn.Do("")
			require.NoError(t, err)
			require.NoError(t, b.srv.Start(context.Background()))
			wait.For(t, "a few thousand jobs run", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(ran) >= 3000
			})
			require.NoError(t, b.srv.Stop(context.Background()))
			left, err := redis.Strings(b.conn.Do("LRANGE", "queue:default", 0, -1))
			require.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			require.Less(t, len(ran), n, "stopped before the queue was drained")
			for jid, c := range ran {
				require.Equal(t, 1, c, jid)
			}
			for _, raw := range left {
				job, err := wire.ParseJob([]byte(raw))
				require.NoError(t, err)
				require.Zero(t, ran[job.JID()], "%s ran and is still queued", job.JID())
			}
			require.Equal(t, n, len(ran)+len(left))
			pending, _ := b.srv.proc.counters.Pending()
			require.EqualValues(t, len(ran), pending+flushedProcessed(t, b.conn))
			b.requireNothingInProgress(t)
		})
	}
}

func flushedProcessed(t *testing.T, c redis.Conn) int64 {
	n, err := redis.Int64(c.Do("GET", contract.KeyStatProcessed))
	if err == redis.ErrNil {
		return 0
	}
	require.NoError(t, err)
	return n
}
