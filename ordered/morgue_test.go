package ordered

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Lowkiq's shard_handler_spec "morgue" with the README's rule: when
// retry_count reaches max_retry_count, the payload with the lowest score
// (v1) goes to the morgue with the error, and the rest (v2) goes back
// with retry_count -1 and perform_in now.
func TestExhaustedKeySendsItsOldestPayloadToTheMorgue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var counts []int
	w := b.worker(t, Config{Handler: &recorder{fail: true}, MaxRetryCount: 2, RetryIn: func(c int) time.Duration {
		counts = append(counts, c)
		return 10 * time.Second
	}})
	b.push(t, "q", "1", "v1", 0, time.Time{})
	b.push(t, "q", "1", "v2", 1, time.Time{})
	require.True(t, w.runOnce(t)) // retry_count -1 → 0
	b.clock.Advance(10 * time.Second)
	require.True(t, w.runOnce(t)) // 0 → 1 = max_retry_count - 1... → morgue at 2
	require.Equal(t, 1, b.key(t, "q", "1").RetryCount)
	b.clock.Advance(10 * time.Second)
	require.True(t, w.runOnce(t)) // 1 → 2 ≥ max_retry_count: bury
	require.Equal(t, []int{0, 1}, counts, "retry_in is not asked for the burial")

	ks := b.key(t, "q", "1")
	require.Equal(t, map[string]float64{"v2": 1}, args0(t, ks.Payloads))
	require.Equal(t, -1, ks.RetryCount)
	require.Equal(t, b.clock.Now(), ks.PerformIn)
	require.Equal(t, map[string]float64{"v1": 0}, args0(t, ks.Morgue))
	require.Equal(t, "TestError: boom", ks.MorgueError)
	require.Equal(t, b.clock.Now(), ks.MorgueAt)

	st, err := Status(context.Background(), b.pool, "q", b.clock.Now())
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Morgue)
	require.Equal(t, 1, st.MorgueKeys)
	require.EqualValues(t, 1, st.Pending)
	require.EqualValues(t, 3, st.Failed)

	entries, err := Morgue(context.Background(), b.pool, "q", nil)
	require.NoError(t, err)
	require.Equal(t, []MorgueEntry{{Key: "1", Payloads: 1, Error: "TestError: boom", At: b.clock.Now()}}, entries)
}

// README: "if morgue job and queued job is merged, perform_in = now(),
// retry_count = -1", and payloads merge with the lowest score.
func TestMorgueRequeueMergesWithQueuedJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// max_retry_count 1: one retry (retry_count 0), then the morgue.
	w := b.worker(t, Config{Handler: &recorder{fail: true}, MaxRetryCount: 1, RetryIn: func(int) time.Duration { return 0 }})
	b.push(t, "q", "1", "v1", 1, time.Time{})
	require.True(t, w.runOnce(t))
	require.True(t, w.runOnce(t))
	require.Equal(t, map[string]float64{"v1": 1}, args0(t, b.key(t, "q", "1").Morgue))

	// The key meanwhile failed again with another payload: it is queued
	// with retry_count 0 and a later perform_in.
	w.cfg.MaxRetryCount = 5
	w.cfg.RetryIn = func(int) time.Duration { return 10 * time.Second }
	b.push(t, "q", "1", "v2", 2, time.Time{})
	b.push(t, "q", "1", "v1", 3, time.Time{})
	require.True(t, w.runOnce(t))
	ks := b.key(t, "q", "1")
	require.Equal(t, 0, ks.RetryCount)
	require.Equal(t, b.clock.Now().Add(10*time.Second), ks.PerformIn)

	b.clock.Advance(time.Second)
	n, err := MorgueApply(context.Background(), b.pool, "q", MorgueRequeue, []string{"1"}, b.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ks = b.key(t, "q", "1")
	require.Equal(t, map[string]float64{"v1": 1, "v2": 2}, args0(t, ks.Payloads))
	require.Equal(t, -1, ks.RetryCount)
	require.Equal(t, b.clock.Now(), ks.PerformIn)
	require.Empty(t, ks.Morgue)

	st, err := Status(context.Background(), b.pool, "q", b.clock.Now())
	require.NoError(t, err)
	require.EqualValues(t, 0, st.Morgue)
	require.EqualValues(t, 2, st.Pending)

	// Requeued payloads run now, in score order.
	rec := &recorder{}
	w.cfg.Handler = rec
	require.True(t, w.runOnce(t))
	require.Equal(t, [][]string{{"v1", "v2"}}, rec.batches)
}

// Requeue and delete without keys act on the whole morgue.
func TestMorgueRequeueAllAndDelete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := b.worker(t, Config{Handler: &recorder{fail: true}, MaxRetryCount: 1, RetryIn: func(int) time.Duration { return 0 }})
	for _, k := range []string{"a", "b", "c"} {
		b.push(t, "q", k, "v-"+k, 1, time.Time{})
	}
	for w.runOnce(t) {
	}
	st, err := Status(ctx, b.pool, "q", b.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 3, st.MorgueKeys)

	n, err := MorgueApply(ctx, b.pool, "q", MorgueDelete, []string{"a"}, b.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = MorgueApply(ctx, b.pool, "q", MorgueRequeue, nil, b.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 2, n)
	st, err = Status(ctx, b.pool, "q", b.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 0, st.MorgueKeys)
	require.EqualValues(t, 0, st.Morgue)
	require.EqualValues(t, 2, st.Pending)
	require.Empty(t, b.key(t, "q", "a").Payloads)
}
