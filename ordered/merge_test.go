package ordered

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/orderedstore"
)

// Lowkiq's README "Job merging rules" example: a queued job
// {payloads: #{"v1": 1, "v2": 2}, retry_count: 0, perform_in: 1536323288}
// merged with a new job {payloads: #{"v2": 3, "v3": 4}, retry_count: -1,
// perform_in: 1536323290} keeps the queued job's retry_count and
// perform_in, and the payloads merge with the lower score for equal
// payloads: v2 keeps 2. (The README prints "v2": 3 in its result, which
// contradicts its own rule "minimal score is chosen for equal payloads";
// Lowkiq's code, ZADD NX in Queue#push, also keeps 2.)
func TestMergeNewJobIntoQueuedKeepsQueuedStateAndLowestScore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &recorder{fail: true}
	w := b.worker(t, Config{Handler: rec, RetryIn: func(int) time.Duration { return 2 * time.Second }})
	// A failed batch puts the job back with retry_count 0 and perform_in
	// now + retry_in(0) = 1536323288.
	b.clock.Set(t0.Add(-2 * time.Second))
	b.push(t, "q", "1", "v1", 1, time.Time{})
	b.push(t, "q", "1", "v2", 2, time.Time{})
	require.True(t, w.runOnce(t))
	ks := b.key(t, "q", "1")
	require.Equal(t, 0, ks.RetryCount)
	require.Equal(t, t0, ks.PerformIn)

	b.push(t, "q", "1", "v2", 3, t0.Add(2*time.Second))
	b.push(t, "q", "1", "v3", 4, t0.Add(2*time.Second))

	ks = b.key(t, "q", "1")
	require.Equal(t, map[string]float64{"v1": 1, "v2": 2, "v3": 4}, args0(t, ks.Payloads))
	require.Equal(t, 0, ks.RetryCount)
	require.Equal(t, t0, ks.PerformIn)
	require.True(t, ks.Queued)
}

// An equal payload pushed with a lower score than the queued one lowers it
// (the minimum wins whichever comes first).
func TestMergeEqualPayloadTakesTheLowerScore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.push(t, "q", "1", "v1", 5, time.Time{})
	b.push(t, "q", "1", "v1", 3, time.Time{})
	b.push(t, "q", "1", "v1", 7, time.Time{})
	require.Equal(t, map[string]float64{"v1": 3}, args0(t, b.key(t, "q", "1").Payloads))
}

// Lowkiq's shard_handler_spec "error": a failed batch of v1 (score 0) and
// v2 (score 1) goes back with retry_count 0, perform_in now +
// retry_in(0) and the error, its payloads unchanged.
func TestFailedBatchGoesBackWithRetryCountAndPerformIn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var counts []int
	w := b.worker(t, Config{Handler: &recorder{fail: true}, RetryIn: func(c int) time.Duration {
		counts = append(counts, c)
		return 10 * time.Second
	}})
	b.push(t, "q", "1", "v1", 0, time.Time{})
	b.push(t, "q", "1", "v2", 1, time.Time{})
	require.True(t, w.runOnce(t))

	ks := b.key(t, "q", "1")
	require.Equal(t, []int{0}, counts)
	require.Equal(t, 0, ks.RetryCount)
	require.Equal(t, t0.Add(10*time.Second), ks.PerformIn)
	require.Equal(t, "TestError: boom", ks.Error)
	require.Equal(t, map[string]float64{"v1": 0, "v2": 1}, args0(t, ks.Payloads))
	require.Empty(t, ks.Morgue)

	// Not due before perform_in; due after, with retry_count 0 in the batch.
	require.False(t, w.runOnce(t))
	b.clock.Advance(10 * time.Second)
	require.True(t, w.runOnce(t))
	require.Equal(t, []int{0, 1}, counts)
	require.Equal(t, 1, b.key(t, "q", "1").RetryCount)
}

// README: "if a failed job and queued job is merged, perform_in and
// retry_count is taken from the failed one": a job pushed while the batch
// runs joins it in the queue, behind it, under the failed batch's state.
func TestFailedBatchMergedWithJobPushedMeanwhileKeepsFailedState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var w *worker
	pushed := false
	w = b.worker(t, Config{Handler: HandlerFunc(func(ctx context.Context, batch *Batch) error {
		if !pushed {
			pushed = true
			b.push(t, "q", "1", "v2", 2, t0.Add(time.Hour))
		}
		return &testError{"boom"}
	})})
	b.push(t, "q", "1", "v1", 1, time.Time{})
	fb, err := w.fetch(ctx)
	require.NoError(t, err)
	w.work(fb)

	ks := b.key(t, "q", "1")
	require.Equal(t, map[string]float64{"v1": 1, "v2": 2}, args0(t, ks.Payloads))
	require.Equal(t, 0, ks.RetryCount)
	require.Equal(t, t0.Add(10*time.Second), ks.PerformIn)
}

// A *PartialError acknowledges the jobs before the failing one: only the
// rest goes back (classHandlers stops at the first failing job).
func TestPartialFailureAcknowledgesTheJobsThatRan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ran []string
	w := b.worker(t, Config{Handler: HandlerFunc(func(ctx context.Context, batch *Batch) error {
		for i, j := range batch.Jobs {
			s, _ := j.Args()[0].Str()
			if s == "v3" {
				return &PartialError{Done: i, Err: &testError{"v3 failed"}}
			}
			ran = append(ran, s)
		}
		return nil
	})})
	for i, p := range []string{"v1", "v2", "v3", "v4"} {
		b.push(t, "q", "1", p, float64(i), time.Time{})
	}
	require.True(t, w.runOnce(t))
	require.Equal(t, []string{"v1", "v2"}, ran)
	ks := b.key(t, "q", "1")
	require.Equal(t, map[string]float64{"v3": 2, "v4": 3}, args0(t, ks.Payloads))
	require.Equal(t, 0, ks.RetryCount)
	require.Equal(t, "TestError: v3 failed", ks.Error)

	st, err := orderedstore.Status(context.Background(), b.pool, "q", b.clock.Now())
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Processed)
	require.EqualValues(t, 2, st.Pending)
	require.EqualValues(t, 0, st.Processing)
}

// Without a score, jobs get the queue's sequence numbers: one key's jobs
// run in push order, whatever their payloads.
func TestDefaultScoreIsPushOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &recorder{}
	w := b.worker(t, Config{Handler: rec})
	for _, p := range []string{"c", "a", "b"} {
		job := mustJob(t, "V", p)
		job.SetQueue("q")
		_, err := b.client.Push(context.Background(), job, &PushOpts{Key: "k"})
		require.NoError(t, err)
	}
	require.True(t, w.runOnce(t))
	require.Equal(t, [][]string{{"c", "a", "b"}}, rec.batches)
}
