package sidejob

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Tests for defects found in the audit against the spec (each failed before
// its fix).

// The parent run after an execution happens outside SideJob.context(job:),
// as in the gem's ensure block: a port subscribed to the parent's job
// channel gets the status message with only the channel in its context.
func TestAuditParentRunOutsideJobContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	parent := b.queue(t, "TestWorker", nil)
	require.NoError(t, parent.SetStatus(ctx, StatusSuspended))
	observer := b.queue(t, "TestSum", nil)
	in := b.input(t, observer, "in")
	require.NoError(t, in.SetChannels(ctx, []string{JobChannel(parent.ID())}))
	b.register(t, "Hook", &hookWorker{}, "")
	child, err := parent.Queue(ctx, "testq", "Hook", &QueueOpts{Name: "kid"})
	require.NoError(t, err)
	require.NoError(t, b.exec(t, child))
	require.Equal(t, StatusQueued, b.status(t, parent))
	require.Equal(t, []string{`{"data":{"status":"queued"},"context":{"channel":"/sidejob/job/1"},"options":{"log":false}}`},
		b.list(t, in.String()), "no \"job\":3 from the child's run context")
}

// A Suspended raised by startup is rescued like one raised by perform: the
// status is not running, so it stays queued; nothing is logged and the job
// does not fail (ran_at stays unset, so startup runs again next time).
func TestAuditStartupSuspends(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := &hookWorker{startup: Suspend}
	j := b.hook(t, w)
	sub := b.subscribe(t)
	require.NoError(t, b.exec(t, j))
	require.Equal(t, []string{"startup"}, w.calls)
	require.Equal(t, StatusQueued, b.status(t, j))
	require.False(t, b.exists(t, j.key("ran_at")))
	for _, m := range sub.stop(t, b) {
		require.NotEqual(t, LogChannel, m.Channel, "nothing logged: %s", m.Data)
	}
}

// Job#parent is SideJob.find(parent id): nil when the parent job is gone
// (for example a child left behind by a delete that raced a forced run).
// Then run(parent: true) returns nil instead of failing, so an outport write
// and every execution of the child still succeed, and the child can be
// adopted again.
func TestAuditParentGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	parent := b.queue(t, "TestWorker", nil)
	child, err := parent.Queue(ctx, "testq", "TestSum", &QueueOpts{Name: "kid"})
	require.NoError(t, err)
	b.do(t, "SREM", KeyJobs, parent.ID()) // the parent was deleted
	p, err := child.Parent(ctx)
	require.NoError(t, err)
	require.Nil(t, p)
	got, err := child.Run(ctx, &RunOpts{Parent: true})
	require.NoError(t, err)
	require.Nil(t, got)
	require.NoError(t, b.output(t, child, "sum").Write(ctx, 1), "an outport write runs the parent")
	require.NoError(t, b.exec(t, child), "the middleware runs the parent afterwards")
	adopter := b.queue(t, "TestWorker", nil)
	require.NoError(t, adopter.Adopt(ctx, child, "kid"), "orphan.parent is nil")
}

// A job interrupted by a hard shutdown (its context cancelled) goes back to
// queued, since the Sidekiq server requeues its item; it is neither left
// running nor marked failed. A job timeout is an ordinary failure, recorded
// although the context is done.
func TestAuditInterruptedJob(t *testing.T) {
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
	err = b.rt.Execute(ctx, wk.class, j.id, nil)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, StatusQueued, b.status(t, j))

	tctx, tcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer tcancel()
	w2 := &hookWorker{perform: func(pctx context.Context, j *Job) error {
		<-pctx.Done()
		return pctx.Err()
	}}
	j2 := b.hook(t, w2)
	wk2, err := j2.worker(context.Background())
	require.NoError(t, err)
	b.rt.Execute(tctx, wk2.class, j2.id, nil)
	require.Equal(t, StatusFailed, b.status(t, j2))
}
