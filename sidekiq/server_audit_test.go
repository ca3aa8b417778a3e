package sidekiq

// Audit tests of the server runtime against Ruby Sidekiq (spec §4-§8): each
// one pins a behaviour that once differed from Ruby or could lose a job.

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubytest"
)

// monitor reads MONITOR output from a test Redis. Commands are read up to a
// sentinel ECHO sent on another connection, so no sleep is needed to know
// that every earlier command has been seen.
type monitor struct {
	conn redis.Conn
	rs   *redistest.Server
	n    int
}

func startMonitor(t *testing.T, rs *redistest.Server) *monitor {
	t.Helper()
	c, err := rs.Dial()
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ok, err := redis.String(c.Do("MONITOR"))
	require.NoError(t, err)
	require.Equal(t, "OK", ok)
	return &monitor{conn: c, rs: rs}
}

// lines returns the commands seen since the last call, each as the quoted
// argument list MONITOR prints (`"rpush" "queue:default" "..."`), leaving
// out the fetchers' BRPOP/BLMPOP polls and their CLIENT ID/UNBLOCK.
func (m *monitor) lines(t *testing.T) []string {
	t.Helper()
	m.n++
	sentinel := fmt.Sprintf("audit-sentinel-%d", m.n)
	c, err := m.rs.Dial()
	require.NoError(t, err)
	_, err = c.Do("ECHO", sentinel)
	c.Close()
	require.NoError(t, err)
	var out []string
	for {
		line, err := redis.String(m.conn.Receive())
		require.NoError(t, err)
		i := strings.Index(line, `] "`)
		if i < 0 {
			continue
		}
		cmd := line[i+2:]
		if strings.Contains(cmd, sentinel) {
			return out
		}
		lc := strings.ToLower(cmd)
		if strings.HasPrefix(lc, `"brpop"`) || strings.HasPrefix(lc, `"blmpop"`) ||
			strings.HasPrefix(lc, `"client" "id"`) || strings.HasPrefix(lc, `"client" "unblock"`) {
			continue
		}
		out = append(out, cmd)
	}
}

// slowHandler blocks until its job's context is cancelled (hard shutdown)
// and returns the context's error, as a well-behaved Go handler does.
func slowHandler(started chan<- string) HandlerFunc {
	return func(ctx context.Context, job *Job) error {
		started <- job.JID()
		<-ctx.Done()
		return ctx.Err()
	}
}

func slowPayload(jid string, retry string) string {
	return `{"retry":` + retry + `,"queue":"default","class":"Slow","args":[],"jid":"` + jid + `","created_at":1795296573.1,"enqueued_at":1795296573.2}`
}

// A handler that returns as soon as the hard shutdown cancels its context
// must not have its job treated as failed: Ruby raises Sidekiq::Shutdown in
// the thread and never retries or drops the job; it is requeued. gojob used
// to cancel the contexts before marking the jobs abandoned, so such jobs
// could race into the retry set, or vanish when retry was false.
func TestAuditHardShutdownRequeuesContextAwareJobs(t *testing.T) {
	t.Parallel()
	// The race is between the cancellation waking the handlers and the
	// shutdown collecting the running jobs: 64 jobs and 5 rounds made the
	// old order fail in nearly every run.
	for round := 0; round < 5; round++ {
		const n = 64
		var died atomic.Int32
		b := newTestServer(t, ServerConfig{Concurrency: n, ShutdownTimeout: 20 * time.Millisecond,
			DeathHandlers: []DeathHandler{func(ctx context.Context, job *Job, err error) { died.Add(1) }}})
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
		require.ElementsMatch(t, want, vals, "round %d: every running job is back in its queue", round)
		require.Zero(t, died.Load(), "round %d: no job died", round)
		require.Zero(t, zcard(t, b.conn, KeyRetry))
		require.Zero(t, zcard(t, b.conn, KeyDead))
	}
}

// Ruby 6.4.1 counts a job killed at hard shutdown as processed and failed
// (Processor#stats' ensure and rescue run when Sidekiq::Shutdown is raised
// in the thread) and flushes both at exit. Checked against real Ruby in
// TestAuditHardShutdownMatchesRuby.
func TestAuditHardShutdownCountsAbandonedJobs(t *testing.T) {
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
func TestAuditStopWaitsForFetchersAfterHardShutdown(t *testing.T) {
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
func TestAuditRetryWrittenDuringHardShutdown(t *testing.T) {
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
	srv.HandleFunc("Slow", func(ctx context.Context, job *Job) error {
		started <- job.JID()
		<-ctx.Done()
		close(hard)
		return ctx.Err()
	})
	inHook := make(chan struct{})
	srv.Handle("Fails", HandlerFunc(func(ctx context.Context, job *Job) error { return errors.New("boom") }),
		&HandlerOptions{RetryIn: func(count int, err error, job *Job) (time.Duration, RetryDecision) {
			close(inHook)
			<-hard // the retry is decided while the server hard-stops
			return 0, RetryDefault
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
	n, err := redis.Int(conn.Do("ZCARD", KeyRetry))
	require.NoError(t, err)
	require.Equal(t, 1, n, "the retry entry of the job that failed during the shutdown")
	vals, _ := redis.Strings(conn.Do("LRANGE", "queue:default", 0, -1))
	require.Equal(t, []string{slowPayload("slow", "true")}, vals)
}

// Sidekiq's bulk_requeue sends one `RPUSH queue:<q> job…` per queue in a
// pipeline; gojob sent one RPUSH per job.
func TestAuditBulkRequeueOneRPUSHPerQueue(t *testing.T) {
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
	mon := startMonitor(t, b.redis)
	require.NoError(t, b.srv.Stop(context.Background()))
	var rpush []string
	for _, l := range mon.lines(t) {
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

// The poller's Lua script must be byte-identical to Ruby's
// LUA_ZPOPBYSCORE, so that both share one SHA (EVALSHA and the script
// cache cannot tell gojob apart). gojob's files carried a comment header.
func TestAuditPollerScriptIsRubys(t *testing.T) {
	t.Parallel()
	rubytest.Require(t)
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	out := rubytest.Run(t, rs.URL(), `
require "sidekiq/scheduled"
require "digest"
print Digest::SHA1.hexdigest(Sidekiq::Scheduled::Enq::LUA_ZPOPBYSCORE)
`)
	require.Equal(t, strings.TrimSpace(out), zpopByScore(Version6).Hash())

	// 7.1+ (lib/sidekiq/scheduled.rb): the same script with ZRANGE … BYSCORE.
	want7 := "local key, now = KEYS[1], ARGV[1]\n" +
		"local jobs = redis.call(\"zrange\", key, \"-inf\", now, \"byscore\", \"limit\", 0, 1)\n" +
		"if jobs[1] then\n  redis.call(\"zrem\", key, jobs[1])\n  return jobs[1]\nend\n"
	sum := sha1.Sum([]byte(want7))
	require.Equal(t, hex.EncodeToString(sum[:]), zpopByScore(Version7).Hash())

	// And the poller loads exactly that script.
	b := newTestServer(t, ServerConfig{})
	_, err := b.srv.pollOnce(context.Background())
	require.NoError(t, err)
	ex, err := redis.Ints(b.conn.Do("SCRIPT", "EXISTS", strings.TrimSpace(out)))
	require.NoError(t, err)
	require.Equal(t, []int{1}, ex)
}

// stackErr is an error with a fixed three-line backtrace.
type stackErr struct{}

func (stackErr) Error() string        { return "boom" }
func (stackErr) StackTrace() []string { return []string{"a.go:1", "b.go:2", "c.go:3"} }

// JobRetry stores `exception.backtrace[0...msg["backtrace"].to_i]` for any
// truthy value but true: 0 gives an empty array (still stored), a string or
// float is converted with to_i, a negative count drops lines from the end.
func TestAuditBacktraceLimit(t *testing.T) {
	t.Parallel()
	now := time.Unix(1795296600, 0)
	cases := []struct {
		bt   string
		want []string // nil = no error_backtrace
	}{
		{`true`, []string{"a.go:1", "b.go:2", "c.go:3"}},
		{`2`, []string{"a.go:1", "b.go:2"}},
		{`0`, []string{}},
		{`"2"`, []string{"a.go:1", "b.go:2"}},
		{`"x"`, []string{}},
		{`1.9`, []string{"a.go:1"}},
		{`-1`, []string{"a.go:1", "b.go:2"}},
		{`-5`, []string{}},
		{`10`, []string{"a.go:1", "b.go:2", "c.go:3"}},
		{`false`, nil},
		{`null`, nil},
	}
	for _, c := range cases {
		t.Run(c.bt, func(t *testing.T) {
			s := &Server{cfg: (&ServerConfig{Version: Version6}).withDefaults(), hardCtx: context.Background()}
			p := s.planRetry("default", []byte(`{"retry":true,"queue":"default","backtrace":`+c.bt+`,"class":"X","args":[],"jid":"j"}`),
				&registration{}, stackErr{}, now, func(int) int { return 0 })
			require.NotNil(t, p.job)
			if c.want == nil {
				require.False(t, p.job.Has("error_backtrace"))
				return
			}
			lines, err := p.job.ErrorBacktrace()
			require.NoError(t, err)
			require.Equal(t, c.want, append([]string{}, lines...))
		})
	}
}

// error_message is `m.force_encoding("utf-8"); m.scrub!`: Ruby replaces each
// maximal invalid subsequence with U+FFFD (expected values printed by Ruby
// 3.1); Go's strings.ToValidUTF8 collapsed whole runs into one.
func TestAuditErrorMessageScrub(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"a\xff\xfeb":     "a\uFFFD\uFFFDb",
		"a\xe3\x81b":     "a\uFFFDb",
		"a\xe3\x81\xffb": "a\uFFFD\uFFFDb",
		"\xf0\x9f\x98":   "\uFFFD",
		"\xc0\xafx":      "\uFFFD\uFFFDx",
		"\xed\xa0\x80x":  "\uFFFD\uFFFD\uFFFDx",
		"ok é 😀":         "ok é 😀",
	}
	for in, want := range cases {
		require.Equal(t, want, errorMessage(errors.New(in)), "%q", in)
	}
}

// 6.4's Poller#poll_interval_average is `options[:poll_interval_average] ||=
// scaled_poll_interval`: the scaled interval is computed at the first poll
// and kept, while the process count is re-read for the <10 branch. 6.5+
// recomputes it every time.
func TestAuditPollIntervalCachedIn64(t *testing.T) {
	t.Parallel()
	for _, v := range []Version{Version6, Version7} {
		t.Run(v.String(), func(t *testing.T) {
			b := newTestServer(t, ServerConfig{Version: v})
			_, err := b.conn.Do("SADD", KeyProcesses, "p1")
			require.NoError(t, err)
			first := b.srv.pollSleep()
			require.True(t, first >= 2500*time.Millisecond && first < 7500*time.Millisecond, "%v", first)
			_, err = b.conn.Do("SADD", KeyProcesses, "p2", "p3")
			require.NoError(t, err)
			for i := 0; i < 20; i++ {
				d := b.srv.pollSleep()
				if v.AtLeast(6, 5, 0) {
					// 3 processes: interval 15 s, sleep 7.5-22.5 s.
					require.True(t, d >= 7500*time.Millisecond && d < 22500*time.Millisecond, "%v", d)
				} else {
					// interval kept at 5 s, sleep 2.5-7.5 s.
					require.True(t, d >= 2500*time.Millisecond && d < 7500*time.Millisecond, "%v", d)
				}
			}
		})
	}
}

// The info JSON per version (spec §7.3): 8.1.2+ moved concurrency out of
// info into its own hash field; 7.0.2 wrote weights as a tally of the
// weighted queue list.
func TestAuditInfoPerVersion(t *testing.T) {
	t.Parallel()
	cases := []struct {
		v        Version
		keys     []string
		weights  string
		hasField bool
	}{
		{Version6, []string{"hostname", "started_at", "pid", "tag", "concurrency", "queues", "labels", "identity"}, "", true},
		{Version{7, 0, 2}, []string{"hostname", "started_at", "pid", "tag", "concurrency", "queues", "weights", "labels", "identity", "version"}, `{"a":3,"b":1}`, true},
		{Version7, []string{"hostname", "started_at", "pid", "tag", "concurrency", "queues", "weights", "labels", "identity", "version", "embedded"}, `[{"a":3,"b":0}]`, true},
		{Version{8, 1, 1}, []string{"hostname", "started_at", "pid", "tag", "concurrency", "capsules", "queues", "weights", "labels", "identity", "version", "embedded"}, `[{"a":3,"b":0}]`, true},
		{Version8, []string{"hostname", "started_at", "pid", "tag", "capsules", "queues", "weights", "labels", "identity", "version", "embedded"}, `[{"a":3,"b":0}]`, true},
	}
	for _, c := range cases {
		t.Run(c.v.String(), func(t *testing.T) {
			b := newTestServer(t, ServerConfig{Version: c.v, Concurrency: 4, Queues: []QueueWeight{{"a", 3}, {"b", 0}}})
			require.NoError(t, b.srv.heartbeat(context.Background()))
			h, err := redis.StringMap(b.conn.Do("HGETALL", b.srv.Identity()))
			require.NoError(t, err)
			info, err := ParseJob([]byte(h["info"]))
			require.NoError(t, err)
			require.Equal(t, c.keys, info.Map().Keys())
			if c.weights != "" {
				w, _ := info.Get("weights")
				require.Equal(t, c.weights, string(w.Encode()))
			}
			require.Equal(t, "4", h["concurrency"])
		})
	}
}

// The heartbeat's Redis traffic per version (spec §7.2): 6.4.1 one MULTI
// with the stats and the work hash (EXPIRE even when idle), HMSET;
// 7.0.0-7.2.2 the work hash in a pipeline, one HSET per thread and always
// an EXPIRE, HMSET in 7.0.x; 7.2.3+ a MULTI without EXPIRE when idle, HSET.
func TestAuditHeartbeatTrafficPerVersion(t *testing.T) {
	t.Parallel()
	type want struct {
		v    Version
		cmds []string // command names of an idle beat after one processed job
	}
	cases := []want{
		{Version6, []string{"multi", "incrby", "incrby", "expire", "incrby", "incrby", "expire", "unlink", "expire", "exec",
			"ping", "multi", "sadd", "exists", "hmset", "expire", "rpop", "exec"}},
		{Version{7, 0, 0}, []string{"incrby", "incrby", "expire", "incrby", "incrby", "expire", "unlink", "expire",
			"ping", "multi", "sadd", "exists", "hmset", "expire", "rpop", "exec"}},
		{Version{7, 2, 2}, []string{"incrby", "incrby", "expire", "incrby", "incrby", "expire", "unlink", "expire",
			"ping", "multi", "sadd", "exists", "hset", "expire", "rpop", "exec"}},
		{Version7, []string{"incrby", "incrby", "expire", "incrby", "incrby", "expire", "multi", "unlink", "exec",
			"ping", "multi", "sadd", "exists", "hset", "expire", "rpop", "exec"}},
	}
	for _, c := range cases {
		t.Run(c.v.String(), func(t *testing.T) {
			b := newTestServer(t, ServerConfig{Version: c.v})
			b.srv.processed.Add(1)
			mon := startMonitor(t, b.redis)
			require.NoError(t, b.srv.heartbeat(context.Background()))
			var names []string
			for _, l := range mon.lines(t) {
				name, _, _ := strings.Cut(l, " ")
				names = append(names, strings.ToLower(strings.Trim(name, `"`)))
			}
			require.Equal(t, c.cmds, names)
		})
	}
}

// Busy work hash with two running jobs: 7.0.0-7.2.2 send one HSET per
// thread, 7.2.3+ one HSET with every pair.
func TestAuditHeartbeatBusyWorkHash(t *testing.T) {
	t.Parallel()
	for _, v := range []Version{{7, 1, 0}, Version7} {
		t.Run(v.String(), func(t *testing.T) {
			b := newTestServer(t, ServerConfig{Version: v})
			b.srv.work.Store("t1", &workItem{queue: "default", raw: []byte(`{"a":1}`), runAt: time.Unix(1795296573, 0)})
			b.srv.work.Store("t2", &workItem{queue: "default", raw: []byte(`{"a":2}`), runAt: time.Unix(1795296573, 0)})
			mon := startMonitor(t, b.redis)
			require.NoError(t, b.srv.heartbeat(context.Background()))
			var hsets []string
			for _, l := range mon.lines(t) {
				if strings.HasPrefix(strings.ToLower(l), `"hset" "`+strings.ToLower(WorkKey(b.srv.Identity(), v))) {
					hsets = append(hsets, l)
				}
			}
			if v.AtLeast(7, 2, 3) {
				require.Len(t, hsets, 1)
			} else {
				require.Len(t, hsets, 2)
			}
			work, err := redis.StringMap(b.conn.Do("HGETALL", WorkKey(b.srv.Identity(), v)))
			require.NoError(t, err)
			require.Len(t, work, 2)
		})
	}
}

// 7.0.0-7.0.2 fetch strictly when the weighted list has no duplicates (so
// `-q a,1 -q b,1` is strict there); 6.4 and 7.0.3+ only when no weight is
// given.
func TestAuditFetchOrderPerVersion(t *testing.T) {
	t.Parallel()
	ones := []QueueWeight{{"a", 1}, {"b", 1}}
	require.True(t, newFetchOrder(ones, Version{7, 0, 1}).strict)
	require.False(t, newFetchOrder(ones, Version6).strict)
	require.False(t, newFetchOrder(ones, Version7).strict)
	require.False(t, newFetchOrder([]QueueWeight{{"a", 2}, {"b", 1}}, Version{7, 0, 1}).strict)
	require.True(t, newFetchOrder([]QueueWeight{{"a", 0}, {"b", 0}}, Version8).strict)
}

// 8.0.8+ sets discarded_at when sidekiq_retry_in returns :discard (8.0.7+
// runs the death handlers with that payload).
func TestAuditDiscardFromRetryInSetsDiscardedAt(t *testing.T) {
	t.Parallel()
	now := time.Unix(1795296600, 0)
	reg := &registration{opts: HandlerOptions{RetryIn: func(int, error, *Job) (time.Duration, RetryDecision) {
		return 0, RetryDiscard
	}}}
	for _, c := range []struct {
		v    Version
		want bool
	}{{Version{8, 0, 7}, false}, {Version{8, 0, 8}, true}, {Version7, false}} {
		s := &Server{cfg: (&ServerConfig{Version: c.v}).withDefaults(), hardCtx: context.Background()}
		p := s.planRetry("default", []byte(`{"retry":true,"queue":"default","class":"X","args":[],"jid":"j"}`), reg, errors.New("x"), now, func(int) int { return 0 })
		require.True(t, p.retryAt.IsZero())
		require.False(t, p.toDead)
		require.Equal(t, c.v.AtLeast(8, 0, 7), p.died, c.v.String())
		v, ok := p.job.Get("discarded_at")
		require.Equal(t, c.want, ok, c.v.String())
		if ok {
			require.Equal(t, strconv.FormatInt(now.UnixMilli(), 10), v.NumberText())
		}
	}
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
	n, err := redis.Int(c.Do("SCARD", KeyProcesses))
	require.NoError(t, err)
	return hardShutdownState{Processed: st[0], Failed: st[1], Queue: q, Processes: n}
}

// Real Ruby Sidekiq 6.4.1 (`sidekiq -c 1 -t 1`) and gojob, each stopped
// with TERM while a job outlives the timeout, leave the same state: the job
// back in its queue with its original bytes, processed 1 and failed 1, the
// process unregistered. (-c 1: with an idle processor, Ruby 6.4.1 itself
// sometimes loses the job: the idle thread's BRPOP receives the requeued
// job just as hard_shutdown kills it. gojob's Stop waits for its fetchers;
// see TestAuditStopWaitsForFetchersAfterHardShutdown.)
func TestAuditHardShutdownMatchesRuby(t *testing.T) {
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
	waitFor(t, "the Ruby job to start", func() bool {
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
	<-srv.StopRequested()
	require.NoError(t, srv.Stop(context.Background()))
	gojob := readHardShutdownState(t, gc)

	logMu.Lock()
	defer logMu.Unlock()
	require.Equal(t, hardShutdownState{Processed: "1", Failed: "1", Queue: []string{payload}}, ruby, rubyLog.String())
	require.Equal(t, ruby, gojob)
}

// A panic in a retry hook must not take the process down: Ruby rescues an
// error in sidekiq_retry_in (default delay) and in sidekiq_retries_exhausted
// (the job still goes to the dead set).
func TestAuditRetryHookPanics(t *testing.T) {
	t.Parallel()
	now := time.Unix(1795296600, 0)
	s := &Server{cfg: (&ServerConfig{Version: Version6}).withDefaults(), hardCtx: context.Background()}
	reg := &registration{opts: HandlerOptions{
		RetryIn: func(int, error, *Job) (time.Duration, RetryDecision) { panic("retry_in bug") },
		RetriesExhausted: func(context.Context, *Job, error) RetryDecision {
			panic("exhausted bug")
		},
	}}
	zero := func(int) int { return 0 }
	p := s.planRetry("default", []byte(`{"retry":true,"queue":"default","class":"X","args":[],"jid":"j"}`), reg, errors.New("x"), now, zero)
	require.Equal(t, now.Add(15*time.Second), p.retryAt, "default delay")
	p = s.planRetry("default", []byte(`{"retry":0,"queue":"default","class":"X","args":[],"jid":"j"}`), reg, errors.New("x"), now, zero)
	require.True(t, p.toDead)
	require.True(t, p.died)
}

// Batch fetch: jobs popped by a BLMPOP that returns after the server went
// quiet go back in their original order (the oldest still runs first);
// one RPUSH per job used to reverse them.
func TestAuditBatchRequeueKeepsOrder(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 3, Fetch: FetchBatch})
	s := b.srv
	if !s.supportsBLMPOP() {
		t.Fatal("the test redis-server has no BLMPOP")
	}
	jobs := make(chan fetched, 3)
	idle := make(chan struct{}, 3)
	for i := 0; i < 3; i++ {
		idle <- struct{}{}
	}
	s.wg.Add(1)
	go s.batchFetchLoop(jobs, idle)
	waitFor(t, "the fetcher to block in BLMPOP", func() bool {
		cl, _ := redis.String(b.conn.Do("CLIENT", "LIST"))
		return strings.Contains(cl, "cmd=blmpop")
	})
	s.Quiet()
	_, err := b.conn.Do("LPUSH", "queue:default", "j1", "j2", "j3") // j1 is the oldest
	require.NoError(t, err)
	s.wg.Wait()
	vals, err := redis.Strings(b.conn.Do("LRANGE", "queue:default", 0, -1))
	require.NoError(t, err)
	require.Equal(t, []string{"j3", "j2", "j1"}, vals)
	require.Empty(t, jobs, "nothing was handed to a worker")
}

// 6.4's poller prunes dead processes through ProcessSet.new(true) on its
// first process count and every tenth after, without the process_cleanup
// lock (6.5.2+), and has no cleanup at the end of the initial wait
// (6.5.7+). gojob wrote the process_cleanup key in 6.4 mode, which no 6.4
// process ever writes.
func TestAuditProcessCleanupPerVersion(t *testing.T) {
	t.Parallel()
	for _, v := range []Version{Version6, Version7} {
		t.Run(v.String(), func(t *testing.T) {
			b := newTestServer(t, ServerConfig{Version: v})
			_, err := b.conn.Do("SADD", KeyProcesses, "dead1", "live1")
			require.NoError(t, err)
			_, err = b.conn.Do("HSET", "live1", "info", "{}")
			require.NoError(t, err)
			b.srv.startupCleanup()
			b.srv.pollSleep()
			members, _ := redis.Strings(b.conn.Do("SMEMBERS", KeyProcesses))
			lock, _ := redis.Int(b.conn.Do("EXISTS", KeyProcessCleanup))
			require.Equal(t, []string{"live1"}, members, "dead1 pruned")
			if v.AtLeast(6, 5, 2) {
				require.Equal(t, 1, lock)
				return
			}
			require.Zero(t, lock, "6.4 has no process_cleanup lock")
			_, err = b.conn.Do("SADD", KeyProcesses, "dead2")
			require.NoError(t, err)
			for i := 1; i < 10; i++ {
				b.srv.pollSleep()
			}
			n, _ := redis.Int(b.conn.Do("SISMEMBER", KeyProcesses, "dead2"))
			require.Equal(t, 1, n, "calls 1-9 only count")
			b.srv.pollSleep()
			n, _ = redis.Int(b.conn.Do("SISMEMBER", KeyProcesses, "dead2"))
			require.Zero(t, n, "the tenth call prunes")
		})
	}
}

// The poller loads its script as Enq#zpopbyscore does: SCRIPT LOAD once,
// then EVALSHA, and SCRIPT LOAD again after a NOSCRIPT. redigo's Script.Do
// sent EVALSHA, got NOSCRIPT and fell back to a full EVAL.
func TestAuditPollerScriptLoading(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{})
	mon := startMonitor(t, b.redis)
	names := func() []string {
		var out []string
		for _, l := range mon.lines(t) {
			f := strings.Fields(strings.ToLower(l))
			name := strings.Trim(f[0], `"`)
			if name == "script" {
				name += " " + strings.Trim(f[1], `"`)
			}
			if name == "evalsha" || name == "eval" || name == "script load" {
				out = append(out, name)
			}
		}
		return out
	}
	_, err := b.srv.pollOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"script load", "evalsha", "evalsha"}, names())
	_, err = b.srv.pollOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"evalsha", "evalsha"}, names())
	_, err = b.conn.Do("SCRIPT", "FLUSH")
	require.NoError(t, err)
	_, err = b.srv.pollOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"evalsha", "script load", "evalsha", "evalsha"}, names())
}
