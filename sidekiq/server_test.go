package sidekiq

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/clock"
	"github.com/gojob/gojob/internal/redistest"
)

type srvBundle struct {
	srv   *Server
	pool  *redis.Pool
	redis *redistest.Server
	clk   *clock.Fake
	conn  redis.Conn
}

func newTestServer(t *testing.T, cfg ServerConfig) *srvBundle {
	t.Helper()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	clk := clock.NewFake(time.Unix(1795296573, 0))
	cfg.Pool = pool
	if cfg.Clock == nil {
		cfg.Clock = clk
	}
	cfg.DisablePoller = true
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t))
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = time.Hour
	}
	s, err := NewServer(&cfg)
	require.NoError(t, err)
	conn := pool.Get()
	t.Cleanup(func() { conn.Close() })
	return &srvBundle{srv: s, pool: pool, redis: rs, clk: clk, conn: conn}
}

func (b *srvBundle) start(t *testing.T) {
	t.Helper()
	require.NoError(t, b.srv.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b.srv.Stop(ctx)
	})
}

func (b *srvBundle) push(t *testing.T, queue, payload string) {
	t.Helper()
	_, err := b.conn.Do("LPUSH", QueueKey(queue), payload)
	require.NoError(t, err)
}

// waitFor polls cond (a Redis read) until it holds; jobs run in other
// goroutines and their effects are only visible in Redis.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func zcard(t *testing.T, c redis.Conn, key string) int {
	n, err := redis.Int(c.Do("ZCARD", key))
	require.NoError(t, err)
	return n
}

func TestServerRunsJob(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 2})
	got := make(chan *Job, 1)
	b.srv.HandleFunc("HardJob", func(ctx context.Context, job *Job) error {
		got <- job
		return nil
	})
	b.start(t)
	b.push(t, "default", `{"retry":true,"queue":"default","args":[1,"two"],"class":"HardJob","jid":"aaaaaaaaaaaaaaaaaaaaaaaa","created_at":1795296573.1,"enqueued_at":1795296573.2}`)
	select {
	case j := <-got:
		require.Equal(t, "aaaaaaaaaaaaaaaaaaaaaaaa", j.JID())
	case <-time.After(10 * time.Second):
		t.Fatal("job did not run")
	}
	require.NoError(t, b.srv.heartbeat(context.Background()))
	waitFor(t, "processed stat", func() bool {
		require.NoError(t, b.srv.heartbeat(context.Background()))
		n, _ := redis.Int(b.conn.Do("GET", "stat:processed"))
		return n == 1
	})
	f, _ := redis.Int(b.conn.Do("GET", "stat:failed"))
	require.Zero(t, f)
}

func TestServerFailureWritesRetryEntry(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{})
	b.srv.HandleFunc("FailJob", func(ctx context.Context, job *Job) error {
		return WithErrorClass("ArgumentError", errors.New("boom é"))
	})
	b.start(t)
	b.push(t, "default", `{"retry":2,"queue":"default","backtrace":3,"args":[42],"class":"FailJob","jid":"9e8c00000000000000000000","created_at":1795296573.166795,"enqueued_at":1795296573.1668046,"custom":{"k":[1.5]}}`)
	waitFor(t, "retry entry", func() bool { return zcard(t, b.conn, KeyRetry) == 1 })
	vals, err := redis.Strings(b.conn.Do("ZRANGE", KeyRetry, 0, -1, "WITHSCORES"))
	require.NoError(t, err)
	job, err := ParseJob([]byte(vals[0]))
	require.NoError(t, err)
	require.Equal(t, []string{"retry", "queue", "backtrace", "args", "class", "jid", "created_at", "enqueued_at", "custom",
		"error_message", "error_class", "failed_at", "retry_count", "error_backtrace"}, job.Map().Keys())
	require.True(t, strings.HasPrefix(vals[0], `{"retry":2,"queue":"default","backtrace":3,"args":[42],"class":"FailJob","jid":"9e8c00000000000000000000","created_at":1795296573.166795,"enqueued_at":1795296573.1668046,"custom":{"k":[1.5]},"error_message":"boom é","error_class":"ArgumentError","failed_at":1795296573.0,"retry_count":0,"error_backtrace":"`), vals[0])
	score, _ := ParseScore(vals[1])
	// count 0: 15 s + jitter rand(10)*1
	require.GreaterOrEqual(t, score, 1795296573.0+15)
	require.LessOrEqual(t, score, 1795296573.0+24)
	lines, err := job.ErrorBacktrace()
	require.NoError(t, err)
	require.Len(t, lines, 1)
}

func TestRetryPlan(t *testing.T) {
	t.Parallel()
	now := time.Unix(1795296600, 0)
	base := `{"retry":true,"queue":"default","class":"X","args":[],"jid":"j"`
	zero := func(int) int { return 0 }
	nine := func(n int) int { return n - 1 }
	cases := []struct {
		name      string
		version   Version
		payload   string
		reg       *registration
		err       error
		rnd       func(int) int
		wantRetry time.Duration // 0 = no retry
		wantDead  bool
		wantDied  bool
		check     func(t *testing.T, j *Job)
	}{
		{name: "first failure", version: Version6, payload: base + `}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantRetry: 15 * time.Second,
			check: func(t *testing.T, j *Job) {
				c, _ := j.RetryCount()
				require.Equal(t, 0, c)
				require.Equal(t, "RuntimeError", j.ErrorClass())
			}},
		{name: "jitter 6.x", version: Version6, payload: base + `,"retry_count":2,"failed_at":1.5}`, reg: &registration{}, err: errors.New("x"), rnd: nine, wantRetry: (81 + 15 + 9*4) * time.Second,
			check: func(t *testing.T, j *Job) {
				c, _ := j.RetryCount()
				require.Equal(t, 3, c)
				require.True(t, j.Has("retried_at"))
			}},
		{name: "jitter 8.x", version: Version8, payload: base + `,"retry_count":2,"failed_at":1500}`, reg: &registration{}, err: errors.New("x"), rnd: nine, wantRetry: (81 + 15 + 39) * time.Second,
			check: func(t *testing.T, j *Job) {
				v, _ := j.Get("retried_at")
				require.Equal(t, "1795296600000", v.NumberText())
			}},
		{name: "retry_count -1 after manual retry", version: Version6, payload: base + `,"retry_count":-1,"failed_at":1.5}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantRetry: 15 * time.Second,
			check: func(t *testing.T, j *Job) {
				c, _ := j.RetryCount()
				require.Equal(t, 0, c)
			}},
		{name: "retry 0 goes to dead", version: Version6, payload: `{"retry":0,"queue":"default","class":"X","args":[],"jid":"j"}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantDead: true, wantDied: true},
		{name: "retry false vanishes", version: Version6, payload: `{"retry":false,"queue":"default","class":"X","args":[],"jid":"j"}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantDied: true},
		{name: "dead false", version: Version6, payload: `{"retry":0,"dead":false,"queue":"default","class":"X","args":[],"jid":"j"}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantDied: true},
		{name: "exhausted", version: Version6, payload: `{"retry":3,"queue":"default","class":"X","args":[],"jid":"j","retry_count":2}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantDead: true, wantDied: true},
		{name: "unknown class retries", version: Version6, payload: base + `}`, err: &NameError{Class: "X"}, rnd: zero, wantRetry: 15 * time.Second,
			check: func(t *testing.T, j *Job) {
				require.Equal(t, "NameError", j.ErrorClass())
				require.Equal(t, "uninitialized constant X", j.ErrorMessage())
			}},
		{name: "unknown class without retry key", version: Version6, payload: `{"queue":"default","class":"X","args":[],"jid":"j"}`, err: &NameError{Class: "X"}, rnd: zero, wantDied: true},
		{name: "known class without retry key", version: Version6, payload: `{"queue":"default","class":"X","args":[],"jid":"j"}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantRetry: 15 * time.Second,
			check: func(t *testing.T, j *Job) {
				require.Equal(t, "retry", j.Map().Keys()[4])
			}},
		{name: "retry_queue", version: Version6, payload: `{"retry":true,"queue":"default","retry_queue":"slow","class":"X","args":[],"jid":"j"}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantRetry: 15 * time.Second,
			check: func(t *testing.T, j *Job) { require.Equal(t, "slow", j.Queue()) }},
		{name: "retry_for expired 7.3 (count not reached)", version: Version7, payload: base + `,"retry_for":60,"retry_count":0,"failed_at":1795296500.0}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantDead: true, wantDied: true},
		{name: "retry_for ignored in 6.4", version: Version6, payload: base + `,"retry_for":60,"retry_count":0,"failed_at":1795296500.0}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantRetry: 16 * time.Second},
		{name: "retry_for replaces count in 8.1", version: Version8, payload: `{"retry":1,"queue":"default","class":"X","args":[],"jid":"j","retry_for":3600,"retry_count":5,"failed_at":1795296500000}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantRetry: (1296 + 15) * time.Second},
		{name: "RetryIn", version: Version6, payload: base + `}`, reg: &registration{}, err: RetryIn(time.Minute, errors.New("x")), rnd: zero, wantRetry: time.Minute},
		{name: "Kill", version: Version6, payload: base + `}`, reg: &registration{}, err: Kill(errors.New("x")), rnd: zero, wantDead: true, wantDied: true},
		{name: "Discard", version: Version6, payload: base + `}`, reg: &registration{}, err: Discard(errors.New("x")), rnd: zero},
		{name: "hook retry_in", version: Version6, payload: base + `}`, reg: &registration{opts: HandlerOptions{RetryIn: func(count int, err error, job *Job) (time.Duration, RetryDecision) {
			return 7 * time.Second, RetryDefault
		}}}, err: errors.New("x"), rnd: zero, wantRetry: 7 * time.Second},
		{name: "hook exhausted discard", version: Version6, payload: `{"retry":0,"queue":"default","class":"X","args":[],"jid":"j"}`, reg: &registration{opts: HandlerOptions{RetriesExhausted: func(ctx context.Context, job *Job, err error) RetryDecision {
			return RetryDiscard
		}}}, err: errors.New("x"), rnd: zero, wantDied: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &Server{cfg: (&ServerConfig{Version: c.version}).withDefaults(), hardCtx: context.Background()}
			p := s.planRetry("default", []byte(c.payload), c.reg, c.err, now, c.rnd)
			if c.wantRetry > 0 {
				require.Equal(t, now.Add(c.wantRetry), p.retryAt)
			} else {
				require.True(t, p.retryAt.IsZero(), "unexpected retry at %v", p.retryAt)
			}
			require.Equal(t, c.wantDead, p.toDead, "dead")
			require.Equal(t, c.wantDied, p.died, "died")
			if c.check != nil {
				require.NotNil(t, p.job)
				c.check(t, p.job)
			}
		})
	}
}

func TestServerUnparsableGoesToDead(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{})
	b.start(t)
	b.push(t, "default", `{"class":"Broken",`)
	waitFor(t, "dead entry", func() bool { return zcard(t, b.conn, KeyDead) == 1 })
	vals, _ := redis.Strings(b.conn.Do("ZRANGE", KeyDead, 0, -1))
	require.Equal(t, `{"class":"Broken",`, vals[0])
}

func TestServerPanicAndDeathHandler(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var died []string
	b := newTestServer(t, ServerConfig{DeathHandlers: []DeathHandler{func(ctx context.Context, job *Job, err error) {
		mu.Lock()
		died = append(died, job.JID()+":"+err.Error())
		mu.Unlock()
	}}})
	b.srv.HandleFunc("Panics", func(ctx context.Context, job *Job) error { panic("kaboom") })
	b.start(t)
	b.push(t, "default", `{"retry":0,"queue":"default","backtrace":true,"class":"Panics","args":[],"jid":"p1"}`)
	waitFor(t, "dead entry", func() bool { return zcard(t, b.conn, KeyDead) == 1 })
	vals, _ := redis.Strings(b.conn.Do("ZRANGE", KeyDead, 0, -1))
	job, err := ParseJob([]byte(vals[0]))
	require.NoError(t, err)
	require.Equal(t, "Panic", job.ErrorClass())
	require.Equal(t, "panic: kaboom", job.ErrorMessage())
	lines, err := job.ErrorBacktrace()
	require.NoError(t, err)
	require.NotEmpty(t, lines)
	require.Contains(t, strings.Join(lines, "\n"), "server_test.go")
	waitFor(t, "death handler", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(died) == 1
	})
	require.Equal(t, "p1:panic: kaboom", died[0])
}

func TestServerShutdownRequeues(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 1, ShutdownTimeout: 100 * time.Millisecond})
	started := make(chan struct{})
	b.srv.HandleFunc("Slow", func(ctx context.Context, job *Job) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	require.NoError(t, b.srv.Start(context.Background()))
	raw := `{"retry":true,"queue":"default","class":"Slow","args":[],"jid":"slow1","enqueued_at":1.5}`
	b.push(t, "default", raw)
	<-started
	require.NoError(t, b.srv.Stop(context.Background()))
	vals, _ := redis.Strings(b.conn.Do("LRANGE", "queue:default", 0, -1))
	require.Equal(t, []string{raw}, vals)
	require.Zero(t, zcard(t, b.conn, KeyRetry))
	isMember, _ := redis.Bool(b.conn.Do("SISMEMBER", KeyProcesses, b.srv.Identity()))
	require.False(t, isMember)
}

func TestHeartbeatAndSignals(t *testing.T) {
	t.Parallel()
	for _, v := range []Version{Version6, Version7, Version8} {
		t.Run(v.String(), func(t *testing.T) {
			b := newTestServer(t, ServerConfig{Version: v, Concurrency: 3, Tag: "mytag", Queues: []QueueWeight{{"default", 2}, {"slow", 1}}})
			block := make(chan struct{})
			running := make(chan struct{})
			b.srv.HandleFunc("Slow", func(ctx context.Context, job *Job) error {
				close(running)
				<-block
				return nil
			})
			b.start(t)
			b.push(t, "slow", `{"retry":true,"queue":"slow","class":"Slow","args":[],"jid":"s1"}`)
			<-running
			require.NoError(t, b.srv.heartbeat(context.Background()))
			id := b.srv.Identity()
			h, err := redis.StringMap(b.conn.Do("HGETALL", id))
			require.NoError(t, err)
			require.Equal(t, "1", h["busy"])
			require.Equal(t, "false", h["quiet"])
			require.Equal(t, "3", h["concurrency"])
			require.NotEmpty(t, h["rss"])
			info, err := ParseJob([]byte(h["info"]))
			require.NoError(t, err)
			if v.Major == 6 {
				require.Equal(t, []string{"hostname", "started_at", "pid", "tag", "concurrency", "queues", "labels", "identity"}, info.Map().Keys())
			} else {
				require.Contains(t, info.Map().Keys(), "version")
			}
			work, err := redis.StringMap(b.conn.Do("HGETALL", WorkKey(id, v)))
			require.NoError(t, err)
			require.Len(t, work, 1)
			for _, w := range work {
				require.Contains(t, w, `"queue":"slow","payload":"{\"retry\":true`)
			}
			ttl, _ := redis.Int(b.conn.Do("TTL", id))
			require.InDelta(t, 60, ttl, 1)

			_, err = b.conn.Do("LPUSH", SignalsKey(id), "TSTP")
			require.NoError(t, err)
			require.NoError(t, b.srv.heartbeat(context.Background()))
			require.True(t, b.srv.IsQuiet())
			require.NoError(t, b.srv.heartbeat(context.Background()))
			q, _ := redis.String(b.conn.Do("HGET", id, "quiet"))
			require.Equal(t, "true", q)
			_, err = b.conn.Do("LPUSH", SignalsKey(id), "TERM")
			require.NoError(t, err)
			require.NoError(t, b.srv.heartbeat(context.Background()))
			select {
			case <-b.srv.StopRequested():
			default:
				t.Fatal("TERM did not request a stop")
			}
			close(block)
		})
	}
}

func TestPollerMovesDueJobs(t *testing.T) {
	t.Parallel()
	for _, v := range []Version{Version6, Version7} {
		t.Run(v.String(), func(t *testing.T) {
			b := newTestServer(t, ServerConfig{Version: v})
			now := b.clk.Now()
			_, err := b.conn.Do("ZADD", KeySchedule, Score(now.Add(-time.Second)), `{"class":"A","args":[],"jid":"due1","created_at":1.5}`,
				Score(now.Add(time.Hour)), `{"retry":true,"queue":"q","class":"A","args":[],"jid":"later"}`)
			require.NoError(t, err)
			_, err = b.conn.Do("ZADD", KeyRetry, Score(now.Add(-time.Minute)), `{"retry":true,"queue":"low","class":"B","args":[],"jid":"r1","retry_count":0}`,
				Score(now.Add(-time.Minute)), `not json`)
			require.NoError(t, err)
			s := b.srv
			s.hardCtx = context.Background()
			res, err := s.pollOnce(context.Background())
			require.NoError(t, err)
			require.Equal(t, 2, res.Enqueued)
			require.Equal(t, 1, res.Buried)
			d, _ := redis.Strings(b.conn.Do("LRANGE", "queue:default", 0, -1))
			require.Len(t, d, 1)
			require.True(t, strings.HasPrefix(d[0], `{"retry":true,"queue":"default","class":"A","args":[],"jid":"due1","created_at":1.5,"enqueued_at":1795296573.0}`), d[0])
			l, _ := redis.Strings(b.conn.Do("LRANGE", "queue:low", 0, -1))
			require.Len(t, l, 1)
			qs, _ := redis.Strings(b.conn.Do("SMEMBERS", KeyQueues))
			require.ElementsMatch(t, []string{"default", "low"}, qs)
			require.Equal(t, 1, zcard(t, b.conn, KeySchedule))
			require.Equal(t, 1, zcard(t, b.conn, KeyDead))
		})
	}
}

func TestFetchOrder(t *testing.T) {
	t.Parallel()
	f := newFetchOrder([]QueueWeight{{"a", 0}, {"b", 0}, {"a", 0}}, Version6)
	require.True(t, f.strict)
	require.Equal(t, []any{"queue:a", "queue:b", fetchTimeout}, f.args(nil))
	w := newFetchOrder([]QueueWeight{{"a", 3}, {"b", 1}}, Version6)
	require.False(t, w.strict)
	first := map[any]int{}
	r := newRand(1)
	for i := 0; i < 4000; i++ {
		args := w.args(r)
		require.Len(t, args, 3)
		first[args[0]]++
	}
	// a is first with probability 3/4.
	require.InDelta(t, 3000, first["queue:a"], 200)
}

func TestServerRoutesActiveJob(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{})
	got := make(chan *Job, 2)
	b.srv.HandleFunc("MyAjJob", func(ctx context.Context, job *Job) error {
		got <- job
		return nil
	})
	b.start(t)
	for _, wrapper := range []string{ActiveJobWrapperClass, ActiveJobWrapperClass8} {
		b.push(t, "default", `{"retry":true,"queue":"default","class":"`+wrapper+`","wrapped":"MyAjJob","args":[{"job_class":"MyAjJob","job_id":"2a9e29a2-a6ef-44aa-b262-1774d5db212d","provider_job_id":null,"queue_name":"default","arguments":[1]}],"jid":"c1361047e1fbb605ada036ad"}`)
		select {
		case j := <-got:
			aj, err := j.ActiveJob()
			require.NoError(t, err)
			require.Equal(t, "c1361047e1fbb605ada036ad", aj.ProviderJobID)
		case <-time.After(10 * time.Second):
			t.Fatalf("ActiveJob payload with %s did not run", wrapper)
		}
	}
}

func TestServerStopWithSpentContextStillRequeues(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 1, ShutdownTimeout: time.Minute})
	started := make(chan struct{})
	b.srv.HandleFunc("Slow", func(ctx context.Context, job *Job) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
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

func TestRetryForReadsFailedAtAsTheTargetDoes(t *testing.T) {
	t.Parallel()
	now := time.Unix(1795296600, 0)
	zero := func(int) int { return 0 }
	// An integer failed_at: 7.3 reads it as seconds (long expired), 8.x as
	// milliseconds (1795296500000 ms = 100 s ago, within retry_for).
	payload := `{"retry":true,"queue":"default","class":"X","args":[],"jid":"j","retry_for":3600,"retry_count":0,"failed_at":1795296500}`
	s7 := &Server{cfg: (&ServerConfig{Version: Version7}).withDefaults(), hardCtx: context.Background()}
	p7 := s7.planRetry("default", []byte(payload), &registration{}, errors.New("x"), now, zero)
	require.False(t, p7.retryAt.IsZero(), "7.3: 1795296500 s + 3600 s is in the future")
	payloadMS := `{"retry":true,"queue":"default","class":"X","args":[],"jid":"j","retry_for":60,"retry_count":0,"failed_at":1795296500000}`
	p7ms := s7.planRetry("default", []byte(payloadMS), &registration{}, errors.New("x"), now, zero)
	require.False(t, p7ms.retryAt.IsZero(), "7.3 reads ms as far-future seconds: never expires (as Ruby 7)")
	s8 := &Server{cfg: (&ServerConfig{Version: Version8}).withDefaults(), hardCtx: context.Background()}
	p8 := s8.planRetry("default", []byte(payloadMS), &registration{}, errors.New("x"), now, zero)
	require.True(t, p8.toDead, "8.x: failed 100 s ago with retry_for 60 s: exhausted")
}

func TestDefaultTagPerVersion(t *testing.T) {
	t.Parallel()
	wd, err := os.Getwd()
	require.NoError(t, err)
	require.Equal(t, "", (&ServerConfig{Version: Version7}).withDefaults().Tag)
	require.Equal(t, filepath.Base(wd), (&ServerConfig{Version: Version8}).withDefaults().Tag)
	require.Equal(t, "mine", (&ServerConfig{Version: Version8, Tag: "mine"}).withDefaults().Tag)
}
