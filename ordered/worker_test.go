package ordered

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/internal/orderedstore"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// orderCheck records runs per key and fails on overlap or disorder.
type orderCheck struct {
	mu      sync.Mutex
	running map[string]bool
	next    map[string]int
	errs    []string
	total   int
}

func newOrderCheck() *orderCheck {
	return &orderCheck{running: map[string]bool{}, next: map[string]int{}}
}

func (o *orderCheck) handler() sidekiq.Handler {
	return sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		key, _ := job.Args()[0].Str()
		i, _ := job.Args()[1].Int()
		o.mu.Lock()
		if o.running[key] {
			o.errs = append(o.errs, fmt.Sprintf("%s: job %d overlaps another", key, i))
		}
		if int(i) != o.next[key] {
			o.errs = append(o.errs, fmt.Sprintf("%s: job %d ran, %d expected", key, i, o.next[key]))
		}
		o.running[key] = true
		o.mu.Unlock()
		time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		o.mu.Lock()
		o.running[key] = false
		o.next[key] = int(i) + 1
		o.total++
		o.mu.Unlock()
		return nil
	})
}

// Two workers with several slots each share a queue: every key's jobs run
// once, in push order, never two at once, while jobs are still being
// pushed. The leases last 4 s: a worker whose renewals a loaded machine
// delays past a short lease loses its shards while it runs their jobs,
// and those run again elsewhere (at least once), which is not what this
// test checks.
func TestTwoWorkersRunEachKeyInPushOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	check := newOrderCheck()
	var workers []*worker
	for range 2 {
		w, err := newWorker(&Config{Pool: b.pool, Queue: "q", Shards: 4, Concurrency: 3, LeaseTTL: 4 * time.Second,
			PollInterval: 5 * time.Millisecond, Handler: classHandlers{"T": check.handler()},
			Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
		require.NoError(t, err)
		require.NoError(t, w.Start(ctx))
		workers = append(workers, w)
	}
	// The first worker took every shard; its next renewal gives the second
	// its share.
	wait.For(t, "both workers holding shards", func() bool {
		st, err := orderedstore.Status(ctx, b.pool, "q", time.Now())
		require.NoError(t, err)
		owners := map[string]bool{}
		for _, ss := range st.ShardSet {
			if ss.Owner != "" {
				owners[ss.Owner] = true
			}
		}
		return len(owners) == 2
	})
	const keys, perKey = 20, 25
	client, err := NewClient(&ClientConfig{Pool: b.pool})
	require.NoError(t, err)
	for i := range perKey {
		var items []PushItem
		for k := range keys {
			job := mustJob(t, "T", fmt.Sprintf("k%d", k), i)
			job.SetQueue("q")
			items = append(items, PushItem{Job: job, Opts: PushOpts{Key: fmt.Sprintf("k%d", k)}})
		}
		_, err := client.PushBulk(ctx, items)
		require.NoError(t, err)
	}
	wait.For(t, "every job to run", func() bool {
		check.mu.Lock()
		defer check.mu.Unlock()
		return check.total >= keys*perKey
	})
	for _, w := range workers {
		require.NoError(t, w.Stop(ctx))
	}
	require.Empty(t, check.errs)
	require.Equal(t, keys*perKey, check.total)
	st, err := orderedstore.Status(ctx, b.pool, "q", time.Now())
	require.NoError(t, err)
	require.EqualValues(t, keys*perKey, st.Processed)
	require.EqualValues(t, 0, st.Pending+st.Processing)
	for _, ss := range st.ShardSet {
		require.Empty(t, ss.Owner, "stopped workers give their leases back")
	}
}

// A worker stopped while a batch runs past the shutdown timeout cancels it;
// the jobs the batch did not finish go back unchanged (retry_count and
// perform_in as fetched), the ones it finished do not.
func TestStopPutsUnfinishedJobsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	started := make(chan struct{})
	w, err := NewWorker(&Config{Pool: b.pool, Queue: "q", Shards: 4, Concurrency: 1, ShutdownTimeout: 50 * time.Millisecond,
		PollInterval: 5 * time.Millisecond, Clock: monoclock.Or(nil),
		Handler: classHandlers{"V": sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
			if s, _ := job.Args()[0].Str(); s == "v2" {
				close(started)
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		})},
		Logger: zerolog.New(zerolog.NewTestWriter(t))})
	require.NoError(t, err)
	for i, p := range []string{"v1", "v2", "v3"} {
		b.push(t, "q", "k", p, float64(i), time.Time{})
	}
	require.NoError(t, w.Start(ctx))
	<-started
	require.NoError(t, w.Stop(ctx))
	ks := b.key(t, "q", "k")
	require.Equal(t, map[string]float64{"v2": 1, "v3": 2}, args0(t, ks.Payloads))
	require.Equal(t, -1, ks.RetryCount)
	require.Empty(t, ks.Error)
	st, err := orderedstore.Status(ctx, b.pool, "q", time.Now())
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Processed)
	require.EqualValues(t, 0, st.Failed)
	require.EqualValues(t, 2, st.Pending)
}

// Bad configuration is an error, not a panic.
func TestNewWorkerRejectsBadConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, cfg := range map[string]Config{
		"no pool":    {Queue: "q", Handler: &recorder{}},
		"no handler": {Pool: b.pool, Queue: "q"},
		"bad queue":  {Pool: b.pool, Queue: "a{b}", Handler: &recorder{}},
		"negative":   {Pool: b.pool, Queue: "q", Handler: &recorder{}, Shards: -1},
	} {
		_, err := NewWorker(&cfg)
		require.Error(t, err, name)
	}
	_, err := declare(context.Background(), b.pool, "q", 8, time.Now())
	require.NoError(t, err)
	w, err := NewWorker(&Config{Pool: b.pool, Queue: "q", Shards: 4, Handler: &recorder{}})
	require.NoError(t, err)
	var mismatch *shardsMismatchError
	require.ErrorAs(t, w.Start(context.Background()), &mismatch)
	require.Equal(t, 8, mismatch.Shards)
}
