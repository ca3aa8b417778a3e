package sidejob

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/sidejobwire"
)

// goneJob removes a job's membership and status the way a delete does,
// but leaves its parent's children entry behind (a dangling entry, as a
// delete racing an adopt, or data edited by hand, leaves).
func (b *testBundle) goneJob(t *testing.T, j *Job) {
	t.Helper()
	b.do(t, "SREM", sidejobwire.KeyJobs, j.ID())
	b.do(t, "DEL", j.key("status"), j.key("worker"), j.key("parent"))
}

// Ruby's child(name) is SideJob.find(id) and children maps every id through
// find: a child whose job is gone is nil, never a handle. So it is not in
// Children, Child returns nil, its name is free for a new child, and the
// parent's Terminated (and so Delete) no longer waits for it for ever.
func TestDeletedChildIsNotAChild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	parent := b.queue(t, "TestWorker", nil)
	gone, err := parent.Queue(ctx, "testq", "TestWorker", &QueueOpts{Name: "gone"})
	require.NoError(t, err)
	kept, err := parent.Queue(ctx, "testq", "TestWorker", &QueueOpts{Name: "kept"})
	require.NoError(t, err)
	b.goneJob(t, gone)
	require.Equal(t, map[string]string{"gone": "2", "kept": "3"}, b.hash(t, parent.key("children")))

	ch, err := parent.child(ctx, "gone")
	require.NoError(t, err)
	require.Nil(t, ch)
	ch, err = parent.child(ctx, "kept")
	require.NoError(t, err)
	require.True(t, kept.equal(ch))
	children, err := parent.Children(ctx)
	require.NoError(t, err)
	require.Len(t, children, 1)
	require.True(t, kept.equal(children["kept"]))
	require.ErrorIs(t, parent.disownNamed(ctx, "gone"), errNotChild, "Ruby: cannot disown non-existent child")

	require.NoError(t, parent.setStatus(ctx, statusTerminated))
	require.NoError(t, kept.setStatus(ctx, statusTerminated))
	ok, err := parent.terminated(ctx)
	require.NoError(t, err)
	require.True(t, ok, "the gone child does not hold the parent back")
	require.NoError(t, parent.Terminate(ctx, true), "recursive terminate skips the gone child")

	// the gone child's name is free again (Ruby's adopt checks child(name))
	again, err := parent.Queue(ctx, "testq", "TestWorker", &QueueOpts{Name: "gone"})
	require.NoError(t, err)
	require.Equal(t, strconv.FormatInt(again.ID(), 10), b.hash(t, parent.key("children"))["gone"])
	require.NoError(t, again.setStatus(ctx, statusTerminated))

	b.goneJob(t, again)
	deleted, err := parent.Delete(ctx)
	require.NoError(t, err)
	require.True(t, deleted)
	require.False(t, b.exists(t, parent.key("children")))
	require.Empty(t, b.set(t, sidejobwire.KeyJobs))
}
