package ordered

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/orderedstore"
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

	st, err := orderedstore.Status(context.Background(), b.pool, "q", b.clock.Now())
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Morgue)
	require.Equal(t, 1, st.MorgueKeys)
	require.EqualValues(t, 1, st.Pending)
	require.EqualValues(t, 3, st.Failed)

	entries, err := orderedstore.Morgue(context.Background(), b.pool, "q", nil)
	require.NoError(t, err)
	require.Equal(t, []orderedstore.MorgueEntry{{Key: "1", Payloads: 1, Error: "TestError: boom", At: b.clock.Now()}}, entries)
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
	n, err := orderedstore.MorgueApply(context.Background(), b.pool, "q", orderedstore.MorgueRequeue, []string{"1"}, b.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ks = b.key(t, "q", "1")
	require.Equal(t, map[string]float64{"v1": 1, "v2": 2}, args0(t, ks.Payloads))
	require.Equal(t, -1, ks.RetryCount)
	require.Equal(t, b.clock.Now(), ks.PerformIn)
	require.Empty(t, ks.Morgue)

	st, err := orderedstore.Status(context.Background(), b.pool, "q", b.clock.Now())
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
	st, err := orderedstore.Status(ctx, b.pool, "q", b.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 3, st.MorgueKeys)

	n, err := orderedstore.MorgueApply(ctx, b.pool, "q", orderedstore.MorgueDelete, []string{"a"}, b.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = orderedstore.MorgueApply(ctx, b.pool, "q", orderedstore.MorgueRequeue, nil, b.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 2, n)
	st, err = orderedstore.Status(ctx, b.pool, "q", b.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 0, st.MorgueKeys)
	require.EqualValues(t, 0, st.Morgue)
	require.EqualValues(t, 2, st.Pending)
	require.Empty(t, b.key(t, "q", "a").Payloads)
}

// pushRaw adds payload to key's pending set as it is, as a client that
// writes Redis itself could.
func (b *testBundle) pushRaw(t *testing.T, queue, key, payload string, score float64) {
	t.Helper()
	conn := b.pool.Get()
	defer conn.Close()
	_, err := orderedstore.PushScript.Do(conn, orderedstore.Prefix(queue), 4, b.clock.Now().UnixMilli(), key, orderedstore.ShardOf(key, 4), payload, formatScore(score), b.clock.Now().UnixMilli())
	require.NoError(t, err)
}

// A payload that is not a job (not a JSON object, or no class) goes to the
// morgue at its first run, byte for byte, with an error saying so and a
// log line; the jobs before it run, those after it go back as new, and no
// retry is spent on it.
func TestMalformedPayloadGoesToTheMorgueAtOnceUnchanged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rec := &recorder{}
	w := b.worker(t, Config{Handler: rec})
	var logs bytes.Buffer
	w.log = zerolog.New(&logs)

	b.push(t, "q", "1", "v1", 1, time.Time{})
	b.pushRaw(t, "q", "1", `not json {`, 2)
	b.push(t, "q", "1", "v2", 3, time.Time{})
	noClass := `{"args":["x"], "retry" :true}`
	b.pushRaw(t, "q", "2", noClass, 1)
	array := `["V",["y"]]`
	b.pushRaw(t, "q", "3", array, 1)

	for w.runOnce(t) {
	}
	// Key 1: v1 ran, the bad payload was buried, v2 ran next, as new.
	require.Contains(t, rec.batches, []string{"v1"})
	require.Contains(t, rec.batches, []string{"v2"})
	require.Len(t, rec.batches, 2, "the handler never sees a malformed payload")

	ks := b.key(t, "q", "1")
	require.Equal(t, []orderedstore.ScoredEntry{{Payload: `not json {`, Score: 2}}, ks.Morgue)
	require.Contains(t, ks.MorgueError, "payload 2 of key 1 (score 2) is not a job")
	require.Empty(t, ks.Payloads)
	require.False(t, ks.Queued)
	require.Equal(t, -1, ks.RetryCount)

	ks = b.key(t, "q", "2")
	require.Equal(t, []orderedstore.ScoredEntry{{Payload: noClass, Score: 1}}, ks.Morgue, "buried unchanged")
	require.Contains(t, ks.MorgueError, `payload 1 of key 2 (score 1) is not a job: it has no "class"`)
	require.Equal(t, -1, ks.RetryCount, "no retry was spent")
	ks = b.key(t, "q", "3")
	require.Equal(t, []orderedstore.ScoredEntry{{Payload: array, Score: 1}}, ks.Morgue)
	require.Contains(t, ks.MorgueError, "payload 1 of key 3 (score 1) is not a job")

	st, err := orderedstore.Status(ctx, b.pool, "q", b.clock.Now())
	require.NoError(t, err)
	require.EqualValues(t, 3, st.Morgue)
	require.EqualValues(t, 0, st.Pending)
	require.EqualValues(t, 2, st.Processed)

	require.Equal(t, 3, strings.Count(logs.String(), "malformed payload: it goes to the morgue unchanged"), logs.String())
	require.Contains(t, logs.String(), `"level":"error"`)
}
