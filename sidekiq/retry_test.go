package sidekiq

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

func TestFailureWritesRubysRetryEntry(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{})
	b.srv.Handle("FailJob", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		return WithErrorClass("ArgumentError", errors.New("boom é"))
	}), nil)
	b.start(t)
	b.push(t, "default", `{"retry":2,"queue":"default","backtrace":3,"args":[42],"class":"FailJob","jid":"9e8c00000000000000000000","created_at":1795296573.166795,"enqueued_at":1795296573.1668046,"custom":{"k":[1.5]}}`)
	wait.For(t, "retry entry", func() bool { return zcard(t, b.conn, contract.KeyRetry) == 1 })
	vals, err := redis.Strings(b.conn.Do("ZRANGE", contract.KeyRetry, 0, -1, "WITHSCORES"))
	require.NoError(t, err)
	job, err := wire.ParseJob([]byte(vals[0]))
	require.NoError(t, err)
	require.Equal(t, []string{"retry", "queue", "backtrace", "args", "class", "jid", "created_at", "enqueued_at", "custom",
		"error_message", "error_class", "failed_at", "retry_count", "error_backtrace"}, job.Map().Keys())
	require.True(t, strings.HasPrefix(vals[0], `{"retry":2,"queue":"default","backtrace":3,"args":[42],"class":"FailJob","jid":"9e8c00000000000000000000","created_at":1795296573.166795,"enqueued_at":1795296573.1668046,"custom":{"k":[1.5]},"error_message":"boom é","error_class":"ArgumentError","failed_at":1795296573.0,"retry_count":0,"error_backtrace":"`), vals[0])
	score, _ := contract.ParseScore(vals[1])
	// count 0: 15 s + jitter rand(10)*1
	require.GreaterOrEqual(t, score, 1795296573.0+15)
	require.LessOrEqual(t, score, 1795296573.0+24)
	lines, err := job.ErrorBacktrace()
	require.NoError(t, err)
	require.Len(t, lines, 1)
}

func TestRetryPlanPerVersion(t *testing.T) {
	t.Parallel()
	now := time.Unix(1795296600, 0)
	base := `{"retry":true,"queue":"default","class":"X","args":[],"jid":"j"`
	zero := func(int) int { return 0 }
	nine := func(n int) int { return n - 1 }
	cases := []struct {
		name      string
		version   wire.Version
		payload   string
		reg       *registration
		err       error
		rnd       func(int) int
		wantRetry time.Duration // 0 = no retry
		wantDead  bool
		wantDied  bool
		check     func(t *testing.T, j *wire.Job)
	}{
		{name: "first failure", version: wire.Version6, payload: base + `}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantRetry: 15 * time.Second,
			check: func(t *testing.T, j *wire.Job) {
				c, _ := j.RetryCount()
				require.Equal(t, 0, c)
				require.Equal(t, "RuntimeError", j.ErrorClass())
			}},
		{name: "jitter 6.x", version: wire.Version6, payload: base + `,"retry_count":2,"failed_at":1.5}`, reg: &registration{}, err: errors.New("x"), rnd: nine, wantRetry: (81 + 15 + 9*4) * time.Second,
			check: func(t *testing.T, j *wire.Job) {
				c, _ := j.RetryCount()
				require.Equal(t, 3, c)
				require.True(t, j.Has("retried_at"))
			}},
		{name: "jitter 8.x", version: wire.Version8, payload: base + `,"retry_count":2,"failed_at":1500}`, reg: &registration{}, err: errors.New("x"), rnd: nine, wantRetry: (81 + 15 + 39) * time.Second,
			check: func(t *testing.T, j *wire.Job) {
				v, _ := j.Get("retried_at")
				require.Equal(t, "1795296600000", string(v.Encode()))
			}},
		{name: "retry_count -1 after manual retry", version: wire.Version6, payload: base + `,"retry_count":-1,"failed_at":1.5}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantRetry: 15 * time.Second,
			check: func(t *testing.T, j *wire.Job) {
				c, _ := j.RetryCount()
				require.Equal(t, 0, c)
			}},
		{name: "retry 0 goes to dead", version: wire.Version6, payload: `{"retry":0,"queue":"default","class":"X","args":[],"jid":"j"}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantDead: true, wantDied: true},
		{name: "retry false vanishes", version: wire.Version6, payload: `{"retry":false,"queue":"default","class":"X","args":[],"jid":"j"}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantDied: true},
		{name: "dead false", version: wire.Version6, payload: `{"retry":0,"dead":false,"queue":"default","class":"X","args":[],"jid":"j"}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantDied: true},
		{name: "exhausted", version: wire.Version6, payload: `{"retry":3,"queue":"default","class":"X","args":[],"jid":"j","retry_count":2}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantDead: true, wantDied: true},
		{name: "unknown class retries", version: wire.Version6, payload: base + `}`, err: &nameError{Class: "X"}, rnd: zero, wantRetry: 15 * time.Second,
			check: func(t *testing.T, j *wire.Job) {
				require.Equal(t, "NameError", j.ErrorClass())
				require.Equal(t, "uninitialized constant X", j.ErrorMessage())
			}},
		{name: "unknown class without retry key", version: wire.Version6, payload: `{"queue":"default","class":"X","args":[],"jid":"j"}`, err: &nameError{Class: "X"}, rnd: zero, wantDied: true},
		{name: "known class without retry key", version: wire.Version6, payload: `{"queue":"default","class":"X","args":[],"jid":"j"}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantRetry: 15 * time.Second,
			check: func(t *testing.T, j *wire.Job) {
				require.Equal(t, "retry", j.Map().Keys()[4])
			}},
		{name: "retry_queue", version: wire.Version6, payload: `{"retry":true,"queue":"default","retry_queue":"slow","class":"X","args":[],"jid":"j"}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantRetry: 15 * time.Second,
			check: func(t *testing.T, j *wire.Job) { require.Equal(t, "slow", j.Queue()) }},
		{name: "retry_for expired 7.3 (count not reached)", version: wire.Version7, payload: base + `,"retry_for":60,"retry_count":0,"failed_at":1795296500.0}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantDead: true, wantDied: true},
		{name: "retry_for ignored in 6.4", version: wire.Version6, payload: base + `,"retry_for":60,"retry_count":0,"failed_at":1795296500.0}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantRetry: 16 * time.Second},
		{name: "retry_for replaces count in 8.1", version: wire.Version8, payload: `{"retry":1,"queue":"default","class":"X","args":[],"jid":"j","retry_for":3600,"retry_count":5,"failed_at":1795296500000}`, reg: &registration{}, err: errors.New("x"), rnd: zero, wantRetry: (1296 + 15) * time.Second},
		{name: "RetryIn", version: wire.Version6, payload: base + `}`, reg: &registration{}, err: RetryIn(time.Minute, errors.New("x")), rnd: zero, wantRetry: time.Minute},
		{name: "Kill", version: wire.Version6, payload: base + `}`, reg: &registration{}, err: Kill(errors.New("x")), rnd: zero, wantDead: true, wantDied: true},
		{name: "Discard", version: wire.Version6, payload: base + `}`, reg: &registration{}, err: Discard(errors.New("x")), rnd: zero},
		{name: "hook retry_in", version: wire.Version6, payload: base + `}`, reg: &registration{opts: HandlerOptions{RetryIn: func(count int, err error, job *wire.Job) error {
			return RetryIn(7*time.Second, err)
		}}}, err: errors.New("x"), rnd: zero, wantRetry: 7 * time.Second},
		{name: "hook retry_in kill", version: wire.Version6, payload: base + `}`, reg: &registration{opts: HandlerOptions{RetryIn: func(count int, err error, job *wire.Job) error {
			return Kill(err)
		}}}, err: errors.New("x"), rnd: zero, wantDead: true, wantDied: true},
		{name: "hook retry_in other error", version: wire.Version6, payload: base + `}`, reg: &registration{opts: HandlerOptions{RetryIn: func(count int, err error, job *wire.Job) error {
			return err
		}}}, err: errors.New("x"), rnd: zero, wantRetry: 15 * time.Second},
		{name: "hook exhausted discard", version: wire.Version6, payload: `{"retry":0,"queue":"default","class":"X","args":[],"jid":"j"}`, reg: &registration{opts: HandlerOptions{RetriesExhausted: func(ctx context.Context, job *wire.Job, err error) error {
			return Discard(err)
		}}}, err: errors.New("x"), rnd: zero, wantDied: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := planServer(c.version)
			p := s.proc.planRetry("default", []byte(c.payload), c.reg, c.err, now, c.rnd)
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

func TestRetryForReadsFailedAtAsTheTargetDoes(t *testing.T) {
	t.Parallel()
	now := time.Unix(1795296600, 0)
	zero := func(int) int { return 0 }
	// An integer failed_at: 7.3 reads it as seconds (long expired), 8.x as
	// milliseconds (1795296500000 ms = 100 s ago, within retry_for).
	payload := `{"retry":true,"queue":"default","class":"X","args":[],"jid":"j","retry_for":3600,"retry_count":0,"failed_at":1795296500}`
	s7 := planServer(wire.Version7)
	p7 := s7.proc.planRetry("default", []byte(payload), &registration{}, errors.New("x"), now, zero)
	require.False(t, p7.retryAt.IsZero(), "7.3: 1795296500 s + 3600 s is in the future")
	payloadMS := `{"retry":true,"queue":"default","class":"X","args":[],"jid":"j","retry_for":60,"retry_count":0,"failed_at":1795296500000}`
	p7ms := s7.proc.planRetry("default", []byte(payloadMS), &registration{}, errors.New("x"), now, zero)
	require.False(t, p7ms.retryAt.IsZero(), "7.3 reads ms as far-future seconds: never expires (as Ruby 7)")
	s8 := planServer(wire.Version8)
	p8 := s8.proc.planRetry("default", []byte(payloadMS), &registration{}, errors.New("x"), now, zero)
	require.True(t, p8.toDead, "8.x: failed 100 s ago with retry_for 60 s: exhausted")
}

// stackErr is an error with a fixed three-line backtrace.
type stackErr struct{}

func (stackErr) Error() string        { return "boom" }
func (stackErr) StackTrace() []string { return []string{"a.go:1", "b.go:2", "c.go:3"} }

// JobRetry stores `exception.backtrace[0...msg["backtrace"].to_i]` for any
// truthy value but true: 0 gives an empty array (still stored), a string or
// float is converted with to_i, a negative count drops lines from the end.
func TestBacktraceOptionLimitsLines(t *testing.T) {
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
			s := planServer(wire.Version6)
			p := s.proc.planRetry("default", []byte(`{"retry":true,"queue":"default","backtrace":`+c.bt+`,"class":"X","args":[],"jid":"j"}`),
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
func TestErrorMessageScrubbedAsRuby(t *testing.T) {
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

// 8.0.8+ sets discarded_at when sidekiq_retry_in returns :discard (8.0.7+
// runs the death handlers with that payload).
func TestDiscardFromRetryInSetsDiscardedAt(t *testing.T) {
	t.Parallel()
	now := time.Unix(1795296600, 0)
	reg := &registration{opts: HandlerOptions{RetryIn: func(_ int, err error, _ *wire.Job) error {
		return Discard(err)
	}}}
	for _, c := range []struct {
		v    wire.Version
		want bool
	}{{wire.Version{Major: 8, Patch: 7}, false}, {wire.Version{Major: 8, Patch: 8}, true}, {wire.Version7, false}} {
		s := planServer(c.v)
		p := s.proc.planRetry("default", []byte(`{"retry":true,"queue":"default","class":"X","args":[],"jid":"j"}`), reg, errors.New("x"), now, func(int) int { return 0 })
		require.True(t, p.retryAt.IsZero())
		require.False(t, p.toDead)
		require.Equal(t, c.v.AtLeast(8, 0, 7), p.died, c.v.String())
		v, ok := p.job.Get("discarded_at")
		require.Equal(t, c.want, ok, c.v.String())
		if ok {
			require.Equal(t, strconv.FormatInt(now.UnixMilli(), 10), string(v.Encode()))
		}
	}
}

// A panic in a retry hook must not take the process down: Ruby rescues an
// error in sidekiq_retry_in (default delay) and in sidekiq_retries_exhausted
// (the job still goes to the dead set).
func TestRetryHookPanicsFallBackToDefaults(t *testing.T) {
	t.Parallel()
	now := time.Unix(1795296600, 0)
	s := planServer(wire.Version6)
	reg := &registration{opts: HandlerOptions{
		RetryIn: func(int, error, *wire.Job) error { panic("retry_in bug") },
		RetriesExhausted: func(context.Context, *wire.Job, error) error {
			panic("exhausted bug")
		},
	}}
	zero := func(int) int { return 0 }
	p := s.proc.planRetry("default", []byte(`{"retry":true,"queue":"default","class":"X","args":[],"jid":"j"}`), reg, errors.New("x"), now, zero)
	require.Equal(t, now.Add(15*time.Second), p.retryAt, "default delay")
	p = s.proc.planRetry("default", []byte(`{"retry":0,"queue":"default","class":"X","args":[],"jid":"j"}`), reg, errors.New("x"), now, zero)
	require.True(t, p.toDead)
	require.True(t, p.died)
}

// planServer is a server that only plans retries, writing version v.
func planServer(v wire.Version) *Server {
	cfg := (&ServerConfig{Version: v}).withDefaults()
	log := zerolog.Nop()
	return &Server{cfg: cfg, format: contract.FixedFormat(v),
		proc: &processor{cfg: cfg, log: &log, format: contract.FixedFormat(v), hardCtx: context.Background()}}
}

// A failed job's log line says where it went: the retry with its number
// and time, the dead set and why, or discarded and why.
func TestFailureLogSaysWhereTheJobWent(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	logs := testlog.New(t)
	clk := clocktest.NewFake(time.Unix(1795296573, 0))
	srv, err := NewServer(&ServerConfig{Pool: pool, Clock: clk, DisablePoller: true, HeartbeatInterval: time.Hour, Logger: logs.Logger()})
	require.NoError(t, err)
	srv.Handle("Fail", HandlerFunc(func(ctx context.Context, job *wire.Job) error { return errors.New("boom") }), nil)
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
	conn := pool.Get()
	defer conn.Close()
	for _, p := range []string{
		`{"retry":3,"queue":"default","class":"Fail","args":[],"jid":"r00000000000000000000001","retry_count":1}`,
		`{"retry":0,"queue":"default","class":"Fail","args":[],"jid":"d00000000000000000000001"}`,
		`{"retry":false,"queue":"default","class":"Fail","args":[],"jid":"x00000000000000000000001"}`,
	} {
		_, err := conn.Do("LPUSH", "queue:default", p)
		require.NoError(t, err)
	}
	wait.For(t, "three failures logged", func() bool { return logs.Count("", "job failed;") == 3 })
	var vals []string
	// The line is logged as the outcome is written: the entry may land a
	// moment later.
	wait.For(t, "the retry entry written", func() bool {
		vals, err = redis.Strings(conn.Do("ZRANGE", "retry", 0, -1, "WITHSCORES"))
		require.NoError(t, err)
		return len(vals) == 2
	})
	score, err := strconv.ParseFloat(vals[1], 64)
	require.NoError(t, err)
	at := contract.FromEpochSeconds(score)
	require.Equal(t, 1, logs.Count("", "job failed; retry 3/3 at "+at.Local().Format("15:04:05")), logs.String())
	require.Equal(t, 1, logs.Count("", "job failed; moved to the dead set (retries exhausted: 0/0)"), logs.String())
	require.Equal(t, 1, logs.Count("", "job failed; discarded (retry: false)"), logs.String())
}
