package sidejob

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// testBundle is a private redis-server with a client, a runtime and the
// gem's spec workers registered in "testq" (spec_helper: register_all
// 'testq' before each example).
type testBundle struct {
	srv  *redistest.Server
	pool *redis.Pool
	c    *Client
	reg  *Registry
	rt   *jobRuntime
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	srv := redistest.Start(t)
	pool := srv.Pool(t)
	c, err := NewClient(&Config{Pool: pool})
	require.NoError(t, err)
	reg := &Registry{}
	require.NoError(t, reg.Register("TestSum", testSum{}, `{"description":"sums","inports":{"ready":{},"in":{}},"outports":{"sum":{}}}`))
	require.NoError(t, reg.Register("TestWorker", workerFunc(func(context.Context, *Job, []rubyjson.Value) error { return nil }), ""))
	rt, err := newJobRuntime(&runtimeConfig{Client: c, Registry: reg, ReturnErrors: true, LockRetryDelay: 10 * time.Millisecond})
	require.NoError(t, err)
	b := &testBundle{srv: srv, pool: pool, c: c, reg: reg, rt: rt}
	b.registerAll(t)
	return b
}

func (b *testBundle) registerAll(t *testing.T) {
	t.Helper()
	require.NoError(t, b.c.registerAll(context.Background(), "testq", b.reg))
}

// register adds a worker and rewrites the registry.
func (b *testBundle) register(t *testing.T, class string, w Worker, config string) {
	t.Helper()
	require.NoError(t, b.reg.Register(class, w, config))
	b.registerAll(t)
}

func (b *testBundle) do(t *testing.T, cmd string, args ...any) any {
	t.Helper()
	conn := b.pool.Get()
	defer conn.Close()
	r, err := conn.Do(cmd, args...)
	require.NoError(t, err)
	return r
}

func (b *testBundle) str(t *testing.T, key string) string {
	t.Helper()
	s, err := redis.String(b.do(t, "GET", key), nil)
	if errors.Is(err, redis.ErrNil) {
		return ""
	}
	require.NoError(t, err)
	return s
}

func (b *testBundle) list(t *testing.T, key string) []string {
	t.Helper()
	s, err := redis.Strings(b.do(t, "LRANGE", key, 0, -1), nil)
	require.NoError(t, err)
	return s
}

func (b *testBundle) set(t *testing.T, key string) []string {
	t.Helper()
	s, err := redis.Strings(b.do(t, "SORT", key, "ALPHA"), nil)
	require.NoError(t, err)
	return s
}

func (b *testBundle) hash(t *testing.T, key string) map[string]string {
	t.Helper()
	s, err := redis.StringMap(b.do(t, "HGETALL", key), nil)
	require.NoError(t, err)
	return s
}

func (b *testBundle) exists(t *testing.T, key string) bool {
	t.Helper()
	n, err := redis.Int(b.do(t, "EXISTS", key), nil)
	require.NoError(t, err)
	return n == 1
}

func (b *testBundle) queue(t *testing.T, class string, o *QueueOpts) *Job {
	t.Helper()
	j, err := b.c.Queue(context.Background(), "testq", class, o)
	require.NoError(t, err)
	return j
}

func (b *testBundle) status(t *testing.T, j *Job) string {
	t.Helper()
	s, err := j.status(context.Background())
	require.NoError(t, err)
	return s
}

// enqueued returns the number of items in queue:testq.
func (b *testBundle) enqueued(t *testing.T) int {
	t.Helper()
	n, err := redis.Int(b.do(t, "LLEN", "queue:testq"), nil)
	require.NoError(t, err)
	return n
}

func (b *testBundle) scheduled(t *testing.T) int {
	t.Helper()
	n, err := redis.Int(b.do(t, "ZCARD", "schedule"), nil)
	require.NoError(t, err)
	return n
}

func (b *testBundle) input(t *testing.T, j *Job, name string) *Port {
	t.Helper()
	p, err := j.Input(context.Background(), name)
	require.NoError(t, err)
	return p
}

func (b *testBundle) output(t *testing.T, j *Job, name string) *Port {
	t.Helper()
	p, err := j.Output(context.Background(), name)
	require.NoError(t, err)
	return p
}

func (b *testBundle) write(t *testing.T, p *Port, vs ...any) {
	t.Helper()
	for _, v := range vs {
		require.NoError(t, p.Write(context.Background(), v))
	}
}

// read returns the next value of p as JSON text, or "None".
func (b *testBundle) read(t *testing.T, p *Port) string {
	t.Helper()
	d, err := p.Read(context.Background())
	require.NoError(t, err)
	if d == nil {
		return "None"
	}
	return string(d.Value.Encode())
}

// testSum is the gem's spec TestSum: suspends unless ready has data, then
// writes the sum of everything on in to sum.
type testSum struct{}

func (testSum) Perform(ctx context.Context, j *Job, _ []rubyjson.Value) error {
	ready, err := j.Input(ctx, "ready")
	if err != nil {
		return err
	}
	ok, err := ready.hasData(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return Suspend()
	}
	in, err := j.Input(ctx, "in")
	if err != nil {
		return err
	}
	var sum int64
	if err := in.Each(ctx, func(d *Data) error {
		n, _ := d.Value.Int()
		sum += n
		return nil
	}); err != nil {
		return err
	}
	out, err := j.Output(ctx, "sum")
	if err != nil {
		return err
	}
	return out.Write(ctx, sum)
}

// message is one pub/sub message.
type message struct{ Channel, Data string }

// pubsubRecorder records every pub/sub message (PSUBSCRIBE *) in order.
type pubsubRecorder struct {
	conn redis.PubSubConn
	mu   sync.Mutex
	msgs []message
	done chan struct{}
}

func (b *testBundle) subscribe(t *testing.T) *pubsubRecorder {
	t.Helper()
	conn, err := b.srv.Dial()
	require.NoError(t, err)
	s := &pubsubRecorder{conn: redis.PubSubConn{Conn: conn}, done: make(chan struct{})}
	require.NoError(t, s.conn.PSubscribe("*"))
	ready := make(chan struct{})
	go func() {
		defer close(s.done)
		for {
			switch v := s.conn.Receive().(type) {
			case redis.Subscription:
				if v.Kind == "psubscribe" {
					close(ready)
				}
			case redis.Message:
				s.mu.Lock()
				s.msgs = append(s.msgs, message{v.Channel, string(v.Data)})
				s.mu.Unlock()
				if v.Channel == "__end__" {
					return
				}
			case error:
				return
			}
		}
	}()
	<-ready
	t.Cleanup(func() { conn.Close() })
	return s
}

// stop publishes a sentinel, waits for it and returns the messages before
// it.
func (s *pubsubRecorder) stop(t *testing.T, b *testBundle) []message {
	t.Helper()
	b.do(t, "PUBLISH", "__end__", "x")
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("subscriber did not see the sentinel")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.msgs[:len(s.msgs)-1]
}

var tsRE = regexp.MustCompile(`"timestamp":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z"`)

// normalize replaces timestamps by "…" as the golden session of docs/sidejob.md#golden-session does.
func normalize(msgs []message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = fmt.Sprintf("%s  %s", m.Channel, tsRE.ReplaceAllString(m.Data, `"timestamp":"…"`))
	}
	return out
}

// tracedError is an error with a Ruby-like backtrace.
type tracedError struct {
	msg   string
	trace []string
}

func (e *tracedError) Error() string        { return e.msg }
func (e *tracedError) StackTrace() []string { return e.trace }

// mustObject parses a JSON object literal, keeping its key order.
func mustObject(js string) *rubyjson.Map {
	m, err := rubyjson.ParseObject([]byte(js))
	if err != nil {
		panic(err)
	}
	return m
}
