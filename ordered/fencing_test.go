package ordered

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/orderedstore"
	"github.com/gojob/gojob/internal/wait"
)

// expireLease makes worker w's lease of shard s lapse in Redis, as if w
// had stopped beating (a hung or partitioned process), and drops w from
// the members.
func expireLease(t *testing.T, b *testBundle, w *worker, s int) {
	t.Helper()
	conn := b.pool.Get()
	defer conn.Close()
	_, err := conn.Do("DEL", w.keys.Lease(s))
	require.NoError(t, err)
	_, err = conn.Do("ZREM", w.keys.Members(), w.cfg.Identity)
	require.NoError(t, err)
}

// A process whose lease was taken over cannot commit: its batch's outcome
// is refused inside the commit script (the new owner's fencing token is
// in the lease), the new owner gets the batch back as it was fetched, and
// the old owner's next fetch learns it lost the shard.
func TestTakenOverProcessCannotCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	oldRan := 0
	a := b.worker(t, Config{Handler: HandlerFunc(func(context.Context, *Batch) error { oldRan++; return nil })})
	require.Len(t, a.heldShards(), 4, "alone, a worker leases every shard")
	b.push(t, "q", "k", "v1", 1, time.Time{})
	b.push(t, "q", "k", "v2", 2, time.Time{})
	s := orderedstore.ShardOf("k", 4)

	fb, err := a.fetch(ctx)
	require.NoError(t, err)
	require.NotNil(t, fb)
	require.Equal(t, s, fb.shard)

	expireLease(t, b, a, s)
	rec := &recorder{}
	nb := b.worker(t, Config{Handler: rec})
	require.Contains(t, nb.heldShards(), s, "the new worker leased the lapsed shard")
	require.NotEqual(t, fb.token, nb.held[s], "under a new fencing token")

	// The old owner finishes its batch: its commit is refused.
	a.work(fb)
	require.Equal(t, 1, oldRan)
	ks := b.key(t, "q", "k")
	require.Equal(t, map[string]float64{"v1": 1, "v2": 2}, args0(t, ks.Payloads), "the batch is back in the queue, untouched by the refused commit")
	st, err := orderedstore.Status(ctx, b.pool, "q", b.clock.Now())
	require.NoError(t, err)
	require.EqualValues(t, 0, st.Processed)
	require.EqualValues(t, 2, st.Pending)
	require.Equal(t, nb.cfg.Identity, st.ShardSet[s].Owner)

	// The old owner cannot fetch from it either, and forgets it.
	b.push(t, "q", "k", "v3", 3, time.Time{})
	fb, err = a.fetch(ctx)
	require.NoError(t, err)
	require.Nil(t, fb)
	require.NotContains(t, a.heldShards(), s)

	require.True(t, nb.runOnce(t))
	require.Equal(t, [][]string{{"v1", "v2", "v3"}}, rec.batches)
	st, err = orderedstore.Status(ctx, b.pool, "q", b.clock.Now())
	require.NoError(t, err)
	require.EqualValues(t, 3, st.Processed)
	require.EqualValues(t, 0, st.Pending)
	require.EqualValues(t, 0, st.Processing)
}

// The commit script checks the token itself: a commit under a stale token
// writes nothing even when the caller believes it holds the shard.
func TestCommitWithStaleTokenWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	a := b.worker(t, Config{Handler: &recorder{}})
	b.push(t, "q", "k", "v1", 1, time.Time{})
	fb, err := a.fetch(ctx)
	require.NoError(t, err)
	tok, _ := strconv.Atoi(fb.token)
	ok, err := a.commitOnce([]any{a.keys.Prefix(), fb.shard, a.cfg.Identity, strconv.Itoa(tok - 1), b.clock.Now().UnixMilli(),
		"k", 1, "ok", "-1", "0", "0", ""})
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = a.commitOnce([]any{a.keys.Prefix(), fb.shard, "someone-else", fb.token, b.clock.Now().UnixMilli(),
		"k", 1, "ok", "-1", "0", "0", ""})
	require.NoError(t, err)
	require.False(t, ok)
	st, err := orderedstore.Status(ctx, b.pool, "q", b.clock.Now())
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Processing)
	a.work(fb)
	st, err = orderedstore.Status(ctx, b.pool, "q", b.clock.Now())
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Processed)
}

// Shards are shared fairly: a second worker gets half at its beats, the
// first gives back idle ones above its share; when one stops, the other
// takes all of them back.
func TestLeasesAreSharedAndHandedOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	a := b.worker(t, Config{Handler: &recorder{}})
	c := b.worker(t, Config{Handler: &recorder{}})
	require.Len(t, a.heldShards(), 4)
	require.Empty(t, c.heldShards(), "every shard is leased")
	_, err := a.beat(ctx)
	require.NoError(t, err)
	require.Len(t, a.heldShards(), 2, "a releases idle shards above its share")
	_, err = c.beat(ctx)
	require.NoError(t, err)
	require.Len(t, c.heldShards(), 2)
	require.ElementsMatch(t, []int{0, 1, 2, 3}, append(a.heldShards(), c.heldShards()...))

	// Leaving releases at once; the other takes them at its next beat.
	require.NoError(t, a.release(ctx))
	_, err = c.beat(ctx)
	require.NoError(t, err)
	require.Len(t, c.heldShards(), 4)
	conn := b.pool.Get()
	defer conn.Close()
	members, err := redis.Strings(conn.Do("ZRANGE", c.keys.Members(), 0, -1))
	require.NoError(t, err)
	require.Equal(t, []string{c.cfg.Identity}, members)
}

// A worker that cannot reach Redis for half its lease TTL cancels its
// running batches before anyone may take its shards over.
func TestWorkerThatCannotBeatCancelsItsBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cancelled := make(chan struct{})
	started := make(chan struct{})
	a := b.worker(t, Config{LeaseTTL: 400 * time.Millisecond, Handler: HandlerFunc(func(ctx context.Context, _ *Batch) error {
		close(started)
		<-ctx.Done()
		close(cancelled)
		return ctx.Err()
	})})
	b.push(t, "q", "k", "v1", 1, time.Time{})
	fb, err := a.fetch(ctx)
	require.NoError(t, err)
	go a.work(fb)
	<-started
	// Redis unreachable: every beat fails.
	a.cfg.Pool = &redis.Pool{Dial: func() (redis.Conn, error) { return nil, context.DeadlineExceeded }}
	wait.For(t, "the batch to be cancelled", func() bool {
		a.beatOnce()
		select {
		case <-cancelled:
			return true
		default:
			return false
		}
	})
	require.Empty(t, a.heldShards())
	wait.For(t, "the slot to give up its commit", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.running) == 0
	})
}
