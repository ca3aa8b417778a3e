package sidejob

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// hookWorker records its calls and runs fn in Perform.
type hookWorker struct {
	perform  func(ctx context.Context, j *Job) error
	startup  func() error
	shutdown func() error
	calls    []string
}

func (w *hookWorker) Perform(ctx context.Context, j *Job, _ []rubyjson.Value) error {
	w.calls = append(w.calls, "perform")
	if w.perform != nil {
		return w.perform(ctx, j)
	}
	return nil
}

func (w *hookWorker) Startup(context.Context, *Job) error {
	w.calls = append(w.calls, "startup")
	if w.startup != nil {
		return w.startup()
	}
	return nil
}

func (w *hookWorker) Shutdown(context.Context, *Job) error {
	w.calls = append(w.calls, "shutdown")
	if w.shutdown != nil {
		return w.shutdown()
	}
	return nil
}

func (b *testBundle) hook(t *testing.T, w *hookWorker) *Job {
	t.Helper()
	b.register(t, "Hook", w, "")
	return b.queue(t, "Hook", nil)
}

func (b *testBundle) exec(t *testing.T, j *Job) error {
	t.Helper()
	w, err := j.worker(context.Background())
	require.NoError(t, err)
	return b.rt.executeJob(context.Background(), w.class, j.id, nil)
}

// server_middleware_spec.rb
func TestMiddlewareSkips(t *testing.T) {
	t.Parallel()
	for _, st := range []string{"running", "suspended", "completed", "failed", "terminated"} {
		b := setup(t)
		w := &hookWorker{}
		j := b.hook(t, w)
		require.NoError(t, j.setStatus(context.Background(), st))
		require.NoError(t, b.exec(t, j))
		require.Empty(t, w.calls, st)
		require.Equal(t, st, b.status(t, j))
	}
	b := setup(t)
	w := &hookWorker{}
	j := b.hook(t, w)
	b.do(t, "SREM", "jobs", j.id)
	require.NoError(t, b.exec(t, j))
	require.Empty(t, w.calls, "deleted job")
}

func TestMiddlewareRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var seen string
	var ranAt string
	w := &hookWorker{perform: func(ctx context.Context, j *Job) error {
		seen, _ = j.status(ctx)
		ranAt = b.str(t, j.key("ran_at"))
		require.True(t, b.exists(t, j.key("lock")), "the job lock is held during the run")
		return nil
	}}
	j := b.hook(t, w)
	before := time.Now()
	items := b.enqueued(t)
	require.NoError(t, b.exec(t, j))
	require.Equal(t, "running", seen)
	require.Equal(t, "completed", b.status(t, j))
	ts, err := sidejobwire.ParseTimestamp(ranAt)
	require.NoError(t, err)
	require.WithinDuration(t, before, ts, 5*time.Second)
	require.False(t, b.exists(t, j.key("lock")), "released")
	require.False(t, b.exists(t, j.key("lock:worker")))
	require.Equal(t, items, b.enqueued(t), "no new push after a normal run")
	require.Equal(t, []string{"startup", "perform"}, w.calls)
	// startup only on the first run
	_, err = j.Run(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, b.exec(t, j))
	require.Equal(t, []string{"startup", "perform", "perform"}, w.calls)
}

func TestMiddlewareLocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w := &hookWorker{}
	j := b.hook(t, w)
	b.do(t, "SET", j.key("lock:worker"), "1")
	require.NoError(t, b.exec(t, j))
	require.Empty(t, w.calls, "no run while lock:worker is set")
	b.do(t, "DEL", j.key("lock:worker"))

	token, err := j.lock(ctx, time.Minute, nil)
	require.NoError(t, err)
	require.NotEmpty(t, token)
	sched := b.scheduled(t)
	b.do(t, "DEL", "queue:testq") // as Sidekiq took the item
	require.NoError(t, b.exec(t, j))
	require.Empty(t, w.calls, "no run while the job lock is held")
	require.Equal(t, "queued", b.status(t, j))
	require.Equal(t, sched+1, b.scheduled(t), "one new scheduled entry")
	require.False(t, b.exists(t, j.key("lock:worker")))
}

func TestMiddlewareRateLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := &hookWorker{}
	j := b.hook(t, w)
	rk := rateKey(j.id, b.c.now())
	b.do(t, "SET", rk, defaultMaxRunsPerMinute-1)
	require.NoError(t, b.exec(t, j))
	require.Equal(t, []string{"startup", "perform"}, w.calls, "max-1 runs")
	require.NoError(t, j.setStatus(context.Background(), "queued"))
	require.NoError(t, b.exec(t, j))
	require.Equal(t, []string{"startup", "perform"}, w.calls, "the 601st run is refused")
	require.Equal(t, "terminating", b.status(t, j))
}

func TestMiddlewareErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	boom := errors.New("boom")
	w := &hookWorker{perform: func(context.Context, *Job) error { return boom }}
	parent := b.queue(t, "TestWorker", nil)
	require.NoError(t, parent.setStatus(ctx, "suspended"))
	b.register(t, "Hook", w, "")
	j, err := parent.Queue(ctx, "testq", "Hook", &QueueOpts{Name: "kid"})
	require.NoError(t, err)
	sub := b.subscribe(t)
	require.ErrorIs(t, b.exec(t, j), boom, "raise_errors")
	require.Equal(t, "failed", b.status(t, j))
	require.Equal(t, "queued", b.status(t, parent), "a failing child still queues the parent")
	msgs := normalize(sub.stop(t, b))
	require.Contains(t, msgs, `/sidejob/job/2  {"status":"failed"}`)

	// logged when errors are not returned
	rt, err := newJobRuntime(&runtimeConfig{Client: b.c, Registry: b.reg})
	require.NoError(t, err)
	sub = b.subscribe(t)
	require.NoError(t, rt.runInline(ctx, j, &inlineOpts{SwallowErrors: true}))
	require.Contains(t, normalize(sub.stop(t, b)), `/sidejob/log  {"job":2,"timestamp":"…","error":"boom"}`)

	// an exception after terminate keeps terminating
	w.perform = func(ctx context.Context, j *Job) error {
		require.NoError(t, j.Terminate(ctx, false))
		return boom
	}
	require.NoError(t, rt.runInline(ctx, j, &inlineOpts{SwallowErrors: true}))
	require.Equal(t, "terminating", b.status(t, j))

	// panics fail the job too
	w.perform = func(context.Context, *Job) error { panic("oops") }
	var pe *panicError
	require.ErrorAs(t, b.rt.runInline(ctx, j, nil), &pe)
	require.Equal(t, "failed", b.status(t, j))
}

func TestMiddlewareSuspend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w := &hookWorker{perform: func(context.Context, *Job) error { return Suspend() }}
	j := b.hook(t, w)
	require.NoError(t, b.exec(t, j))
	require.Equal(t, "suspended", b.status(t, j))
	// run then suspend inside perform → stays queued
	w.perform = func(ctx context.Context, j *Job) error {
		_, err := j.Run(ctx, nil)
		require.NoError(t, err)
		return Suspend()
	}
	require.NoError(t, b.rt.runInline(ctx, j, nil))
	require.Equal(t, "queued", b.status(t, j))
}

func TestMiddlewareTerminate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	parent := b.queue(t, "TestWorker", nil)
	require.NoError(t, parent.setStatus(ctx, "completed"))
	w := &hookWorker{shutdown: func() error { return errors.New("shutdown failed") }}
	b.register(t, "Hook", w, "")
	j, err := parent.Queue(ctx, "testq", "Hook", &QueueOpts{Name: "kid"})
	require.NoError(t, err)
	require.NoError(t, j.Terminate(ctx, false))
	sub := b.subscribe(t)
	require.NoError(t, b.exec(t, j))
	require.Equal(t, []string{"shutdown"}, w.calls, "no perform")
	require.Equal(t, "terminated", b.status(t, j))
	require.Equal(t, "queued", b.status(t, parent))
	require.Contains(t, normalize(sub.stop(t, b)), `/sidejob/log  {"job":2,"timestamp":"…","error":"shutdown failed"}`)
}

// The parent run after an execution happens outside SideJob.context(job:),
// as in the gem's ensure block: a port subscribed to the parent's job
// channel gets the status message with only the channel in its context.
func TestParentRunsOutsideTheJobContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	parent := b.queue(t, "TestWorker", nil)
	require.NoError(t, parent.setStatus(ctx, statusSuspended))
	observer := b.queue(t, "TestSum", nil)
	in := b.input(t, observer, "in")
	require.NoError(t, in.setChannels(ctx, []string{sidejobwire.JobChannel(parent.ID())}))
	b.register(t, "Hook", &hookWorker{}, "")
	child, err := parent.Queue(ctx, "testq", "Hook", &QueueOpts{Name: "kid"})
	require.NoError(t, err)
	require.NoError(t, b.exec(t, child))
	require.Equal(t, statusQueued, b.status(t, parent))
	require.Equal(t, []string{`{"data":{"status":"queued"},"context":{"channel":"/sidejob/job/1"},"options":{"log":false}}`},
		b.list(t, in.String()), "no \"job\":3 from the child's run context")
}

// A Suspended raised by startup is rescued like one raised by perform: the
// status is not running, so it stays queued; nothing is logged and the job
// does not fail (ran_at stays unset, so startup runs again next time).
func TestStartupMaySuspend(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := &hookWorker{startup: Suspend}
	j := b.hook(t, w)
	sub := b.subscribe(t)
	require.NoError(t, b.exec(t, j))
	require.Equal(t, []string{"startup"}, w.calls)
	require.Equal(t, statusQueued, b.status(t, j))
	require.False(t, b.exists(t, j.key("ran_at")))
	for _, m := range sub.stop(t, b) {
		require.NotEqual(t, sidejobwire.LogChannel, m.Channel, "nothing logged: %s", m.Data)
	}
}

// Job#parent is SideJob.find(parent id): nil when the parent job is gone
// (for example a child left behind by a delete that raced a forced run).
// Then run(parent: true) returns nil instead of failing, so an outport write
// and every execution of the child still succeed, and the child can be
// adopted again.
func TestParentOfADeletedParentIsNil(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	parent := b.queue(t, "TestWorker", nil)
	child, err := parent.Queue(ctx, "testq", "TestSum", &QueueOpts{Name: "kid"})
	require.NoError(t, err)
	b.do(t, "SREM", sidejobwire.KeyJobs, parent.ID()) // the parent was deleted
	p, err := child.Parent(ctx)
	require.NoError(t, err)
	require.Nil(t, p)
	got, err := child.Run(ctx, &RunOpts{Parent: true})
	require.NoError(t, err)
	require.Nil(t, got)
	require.NoError(t, b.output(t, child, "sum").Write(ctx, 1), "an outport write runs the parent")
	require.NoError(t, b.exec(t, child), "the middleware runs the parent afterwards")
	adopter := b.queue(t, "TestWorker", nil)
	require.NoError(t, adopter.adopt(ctx, child, "kid"), "orphan.parent is nil")
}

// A job interrupted by a hard shutdown (its context cancelled) goes back to
// queued, since the Sidekiq server requeues its item; it is neither left
// running nor marked failed. A job timeout is an ordinary failure, recorded
// although the context is done.
func TestHardShutdownPutsAnInterruptedJobBackToQueued(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	w := &hookWorker{perform: func(pctx context.Context, j *Job) error {
		cancel()
		<-pctx.Done()
		return pctx.Err()
	}}
	j := b.hook(t, w)
	wk, err := j.worker(context.Background())
	require.NoError(t, err)
	err = b.rt.executeJob(ctx, wk.class, j.id, nil)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, statusQueued, b.status(t, j))

	w2 := &hookWorker{perform: func(pctx context.Context, j *Job) error {
		<-pctx.Done()
		return pctx.Err()
	}}
	j2 := b.hook(t, w2)
	wk2, err := j2.worker(context.Background())
	require.NoError(t, err)
	// Long enough that the deadline passes in perform, not before it
	// starts (on a loaded machine the run's own Redis calls take a while).
	tctx, tcancel := context.WithTimeout(context.Background(), time.Second)
	defer tcancel()
	b.rt.executeJob(tctx, wk2.class, j2.id, nil)
	require.Equal(t, statusFailed, b.status(t, j2))
}
