package durable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The first strike records when the job was actually looked for, not when
// the pass began: a pass slowed down (here by a failure notifier taking
// four minutes) must not let the second strike come less than one
// extension after the first.
func TestStrikeTimeIsWhenTheRowIsChecked(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		urls := be.urls(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		lost := newJob(t, "DurableJob", 1)
		b.insert(t, lost, ptr(testNow)) // second strike due: killed in page 1
		b.clk.Advance(time.Second)
		later := newJob(t, "DurableJob", 2)
		b.insert(t, later, nil) // never missed: first strike in page 2
		b.clk.Advance(6 * time.Minute)
		r, err := NewReconciler(&ReconcilerConfig{Durable: b.d, API: b.api, PageSize: 1,
			FailureNotifier: func(context.Context, *wire.Job) { b.clk.Advance(4 * time.Minute) }})
		require.NoError(t, err)
		res := b.reconcile(t, r)
		require.Equal(t, []string{lost.JID()}, res.KilledJIDs)
		require.Equal(t, 1, res.Marked)
		checkedAt := b.clk.Now() // page 2 was checked after the notifier's 4 minutes
		row := b.row(t, later.JID())
		require.True(t, micro(checkedAt).Equal(*row.MissingAt), "missing_at %v, checked at %v", row.MissingAt, checkedAt)
		require.True(t, micro(checkedAt.Add(5*time.Minute)).Equal(row.AssumeDeadAt))

		// Two minutes after it was found missing, the job is not killed.
		b.clk.Advance(2 * time.Minute)
		res = b.reconcile(t, r)
		require.Empty(t, res.KilledJIDs)
		require.NotNil(t, b.row(t, later.JID()))
	})
}

// An ActiveJob row gets its wrapped class's extension from the reconciler
// too, as from the client and server middleware, even when '*' makes every
// class durable: the first strike gives the job that class's extension
// before the second.
func TestReconcilerUsesWrappedClassExtension(t *testing.T) {
	t.Parallel()
	urls := backends[1].urls(t)
	b := setup(t, bundleOpts{urls: urls[:], classes: map[string]time.Duration{AllClasses: 0, "LongJob": 20 * time.Minute}})
	job := newJob(t, wire.ActiveJobWrapper, map[string]any{"job_class": "LongJob", "arguments": []any{}})
	job.Set("wrapped", rubyjson.StringValue("LongJob"))
	b.insert(t, job, nil)
	require.True(t, micro(testNow.Add(20*time.Minute)).Equal(b.row(t, job.JID()).AssumeDeadAt), "client side: the wrapped class's")
	b.clk.Advance(21 * time.Minute)
	res := b.reconcile(t, b.reconciler(t, nil))
	require.Equal(t, 1, res.Marked)
	require.True(t, micro(b.clk.Now().Add(20*time.Minute)).Equal(b.row(t, job.JID()).AssumeDeadAt), "%v", b.row(t, job.JID()).AssumeDeadAt)
}

// A death handler that panics (the server recovers those of its own
// failures) does not crash the reconciler, which runs inside every worker
// process; the job is in the dead set and the pass goes on.
func TestPanickingDeathHandlerDoesNotStopThePass(t *testing.T) {
	t.Parallel()
	urls := backends[1].urls(t)
	b := setup(t, bundleOpts{urls: urls[:]})
	admin, err := api.New(&api.Config{Pool: b.pool, Clock: b.clk, DeathHandlers: []sidekiq.DeathHandler{
		func(context.Context, *wire.Job, error) { panic("handler bug") },
	}})
	require.NoError(t, err)
	var jids []string
	for i := range 2 {
		j := newJob(t, "DurableJob", i)
		b.insert(t, j, ptr(testNow))
		jids = append(jids, j.JID())
	}
	b.clk.Advance(6 * time.Minute)
	r, err := NewReconciler(&ReconcilerConfig{Durable: b.d, API: admin})
	require.NoError(t, err)
	res := b.reconcile(t, r)
	require.ElementsMatch(t, jids, res.KilledJIDs)
	require.Equal(t, 2, b.zcard(t, wire.KeyDead))
	require.Equal(t, 2, b.logs.count("error", "death handler panicked"))
}
