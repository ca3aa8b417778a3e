package ordered

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/orderedstore"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testBundle is a private redis-server, a client and a fake clock.
type testBundle struct {
	pool   *redis.Pool
	client *Client
	clock  *clocktest.Fake
}

// t0 is the perform_in of Lowkiq's README merge example.
var t0 = time.Unix(1536323288, 0)

func setup(t *testing.T) *testBundle {
	t.Helper()
	rs := redistest.Start(t)
	b := &testBundle{pool: rs.Pool(t), clock: clocktest.NewFake(t0)}
	var err error
	b.client, err = NewClient(&ClientConfig{Pool: b.pool, Shards: 4, Clock: b.clock})
	require.NoError(t, err)
	return b
}

// push pushes a job of class V with args [payload] under key.
func (b *testBundle) push(t *testing.T, queue, key, payload string, score float64, at time.Time) {
	t.Helper()
	job, err := wire.NewJob("V", payload)
	require.NoError(t, err)
	job.SetQueue(queue)
	_, err = b.client.Push(context.Background(), job, &PushOpts{Key: key, Score: &score, At: at})
	require.NoError(t, err)
}

// worker builds a worker driven by hand (no slots, no heartbeat loop):
// the test calls beat, fetch and work itself.
func (b *testBundle) worker(t *testing.T, cfg Config) *worker {
	t.Helper()
	cfg.Pool = b.pool
	cfg.Queue = cmpOr(cfg.Queue, "q")
	cfg.Clock = b.clock
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t))
	if cfg.RetryIn == nil {
		cfg.RetryIn = func(count int) time.Duration { return 10 * time.Second }
	}
	w, err := newWorker(&cfg)
	require.NoError(t, err)
	w.shards, err = declare(context.Background(), b.pool, w.cfg.Queue, 4, b.clock.Now())
	require.NoError(t, err)
	_, err = w.beat(context.Background())
	require.NoError(t, err)
	t.Cleanup(w.hardStop)
	return w
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// runOnce fetches one batch and works it; it reports whether there was one.
func (w *worker) runOnce(t *testing.T) bool {
	t.Helper()
	b, err := w.fetch(context.Background())
	require.NoError(t, err)
	if b == nil {
		return false
	}
	w.work(b)
	return true
}

// args0 returns args[0] of each payload: Lowkiq's payload in these tests.
func args0(t *testing.T, entries []orderedstore.ScoredEntry) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, e := range entries {
		var j struct{ Args []string }
		require.NoError(t, json.Unmarshal([]byte(e.Payload), &j))
		out[j.Args[0]] = e.Score
	}
	return out
}

func (b *testBundle) key(t *testing.T, queue, key string) *orderedstore.KeyState {
	t.Helper()
	ks, err := orderedstore.Key(context.Background(), b.pool, queue, key)
	require.NoError(t, err)
	return ks
}

// recorder is a handler that records the batches it gets, failing them
// when fail is set.
type recorder struct {
	fail    bool
	batches [][]string
}

func (r *recorder) Perform(_ context.Context, b *Batch) error {
	var got []string
	for _, j := range b.Jobs {
		s, _ := j.Args()[0].Str()
		got = append(got, s)
	}
	r.batches = append(r.batches, got)
	if r.fail {
		return &testError{"boom"}
	}
	return nil
}

type testError struct{ msg string }

func (e *testError) Error() string      { return e.msg }
func (e *testError) ErrorClass() string { return "TestError" }

func mustJob(t *testing.T, class string, args ...any) *wire.Job {
	t.Helper()
	j, err := wire.NewJob(class, args...)
	require.NoError(t, err)
	return j
}

// classHandlers runs each job of a batch with the sidekiq.Handler of its
// class, in order, stopping at the first failure (a *PartialError), as
// gojob ordered work does.
type classHandlers map[string]sidekiq.Handler

func (m classHandlers) Perform(ctx context.Context, b *Batch) error {
	for i, job := range b.Jobs {
		h := m[job.Class()]
		if h == nil {
			return &PartialError{Done: i, Err: fmt.Errorf("ordered: no handler for class %q", job.Class())}
		}
		if err := h.Perform(ctx, job); err != nil {
			return &PartialError{Done: i, Err: err}
		}
	}
	return nil
}
