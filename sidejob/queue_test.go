package sidejob

import (
	"context"
	"strconv"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/sidejobwire"
)

// Queue checks the ports (names and defaults, merged with the worker
// config) before it allocates an id: an invalid port leaves no job behind,
// neither a completed orphan nor a child entry in the parent (docs/sidejob.md#weakness-2-orphan-job-after-a-failed-queue).
func TestQueueRefusesInvalidPortsBeforeCreatingAJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	parent := b.queue(t, "TestWorker", nil)
	for _, o := range []*QueueOpts{
		{Inports: `{"bad name":{}}`},
		{Outports: `{"ok":{},"":{}}`},
		{Inports: `["in"]`},
		{Parent: parent, Name: "kid", Inports: `{"multi\nline":{}}`},
		{Parent: parent, Name: "kid", Outports: `{"x":{"default":1}`},
	} {
		_, err := b.c.Queue(ctx, "testq", "TestSum", o)
		require.Error(t, err)
	}
	require.Equal(t, []string{"1"}, b.set(t, sidejobwire.KeyJobs))
	require.Equal(t, "1", b.str(t, sidejobwire.KeyLastID), "no id was allocated")
	require.False(t, b.exists(t, "job:2:status"))
	require.False(t, b.exists(t, parent.key("children")))
	require.Equal(t, 1, b.enqueued(t), "only the parent's item")

	// a port name in the worker config is checked too
	b.register(t, "BadConfig", &hookWorker{}, `{"inports":{"no way":{}}}`)
	_, err := b.c.Queue(ctx, "testq", "BadConfig", nil)
	require.ErrorContains(t, err, `invalid port name "no way"`)
	require.Equal(t, "1", b.str(t, sidejobwire.KeyLastID))
}

// If the port setup fails after the job was created and adopted (a
// concurrent delete, a Redis error: set up by hand here), Queue's cleanup
// removes the job's keys and the parent's entry, but only an entry that
// still names this job.
func TestQueueDiscardsAHalfCreatedJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	parent := b.queue(t, "TestWorker", nil)
	j := b.c.job(2)
	// simulate: job 2 created and adopted, then the port write fails
	b.do(t, "SET", sidejobwire.KeyLastID, 2)
	b.do(t, "SADD", sidejobwire.KeyJobs, 2)
	b.do(t, "SET", j.key("worker"), `{"queue":"testq","class":"TestSum","args":null}`)
	b.do(t, "SET", j.key("status"), statusCompleted)
	require.NoError(t, parent.adopt(ctx, j, "kid"))
	b.do(t, "HSET", j.key("inports:default"), "in", `{"data":1}`)
	j.discard(ctx, parent, "kid")
	require.Equal(t, []string{"1"}, b.set(t, sidejobwire.KeyJobs))
	require.Empty(t, b.hash(t, parent.key("children")))
	keys, err := redis.Strings(b.do(t, "KEYS", "job:2:*"), nil)
	require.NoError(t, err)
	require.Empty(t, keys)

	// the parent's entry is left alone when it names another job
	other := b.queue(t, "TestWorker", &QueueOpts{Parent: parent, Name: "kid2"})
	b.c.job(99).discard(ctx, parent, "kid2")
	require.Equal(t, strconv.FormatInt(other.ID(), 10), b.hash(t, parent.key("children"))["kid2"])
}
