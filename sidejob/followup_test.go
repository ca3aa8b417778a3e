package sidejob

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubytest"
)

// Tests for the defects left open by the audit (each failed before its
// fix).

// goneJob removes a job's membership and status the way a delete does,
// but leaves its parent's children entry behind (a dangling entry, as a
// delete racing an adopt, or data edited by hand, leaves).
func (b *testBundle) goneJob(t *testing.T, j *Job) {
	t.Helper()
	b.do(t, "SREM", KeyJobs, j.ID())
	b.do(t, "DEL", j.key("status"), j.key("worker"), j.key("parent"))
}

// Ruby's child(name) is SideJob.find(id) and children maps every id through
// find: a child whose job is gone is nil, never a handle. So it is not in
// Children, Child returns nil, its name is free for a new child, and the
// parent's Terminated (and so Delete) no longer waits for it for ever.
func TestFollowupChildGone(t *testing.T) {
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

	ch, err := parent.Child(ctx, "gone")
	require.NoError(t, err)
	require.Nil(t, ch)
	ch, err = parent.Child(ctx, "kept")
	require.NoError(t, err)
	require.True(t, kept.Equal(ch))
	children, err := parent.Children(ctx)
	require.NoError(t, err)
	require.Len(t, children, 1)
	require.Equal(t, "kept", children[0].Name)
	require.True(t, kept.Equal(children[0].Job))
	require.ErrorIs(t, parent.Disown(ctx, "gone"), ErrNotChild, "Ruby: cannot disown non-existent child")

	require.NoError(t, parent.SetStatus(ctx, StatusTerminated))
	require.NoError(t, kept.SetStatus(ctx, StatusTerminated))
	ok, err := parent.Terminated(ctx)
	require.NoError(t, err)
	require.True(t, ok, "the gone child does not hold the parent back")
	require.NoError(t, parent.Terminate(ctx, true), "recursive terminate skips the gone child")

	// the gone child's name is free again (Ruby's adopt checks child(name))
	again, err := parent.Queue(ctx, "testq", "TestWorker", &QueueOpts{Name: "gone"})
	require.NoError(t, err)
	require.Equal(t, strconv.FormatInt(again.ID(), 10), b.hash(t, parent.key("children"))["gone"])
	require.NoError(t, again.SetStatus(ctx, StatusTerminated))

	b.goneJob(t, again)
	deleted, err := parent.Delete(ctx)
	require.NoError(t, err)
	require.True(t, deleted)
	require.False(t, b.exists(t, parent.key("children")))
	require.Empty(t, b.set(t, KeyJobs))
}

// Queue checks the ports (names and defaults, merged with the worker
// config) before it allocates an id: an invalid port leaves no job behind,
// neither a completed orphan nor a child entry in the parent (spec §10.2).
func TestFollowupQueueInvalidPortsNoOrphan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	parent := b.queue(t, "TestWorker", nil)
	for _, o := range []*QueueOpts{
		{Inports: []PortDef{PortNamed("bad name")}},
		{Outports: []PortDef{PortNamed("ok"), PortNamed("")}},
		{Inports: []PortDef{PortNamed("in").WithDefault(make(chan int))}},
		{Parent: parent, Name: "kid", Inports: []PortDef{PortNamed("multi\nline")}},
		{Parent: parent, Name: "kid", Outports: []PortDef{PortNamed("x").WithDefault(func() {})}},
	} {
		_, err := b.c.Queue(ctx, "testq", "TestSum", o)
		require.Error(t, err)
	}
	require.Equal(t, []string{"1"}, b.set(t, KeyJobs))
	require.Equal(t, "1", b.str(t, KeyLastID), "no id was allocated")
	require.False(t, b.exists(t, "job:2:status"))
	require.False(t, b.exists(t, parent.key("children")))
	require.Equal(t, 1, b.enqueued(t), "only the parent's item")

	// a port name in the worker config is checked too
	b.register(t, "BadConfig", &hookWorker{}, `{"inports":{"no way":{}}}`)
	_, err := b.c.Queue(ctx, "testq", "BadConfig", nil)
	require.ErrorContains(t, err, `invalid port name "no way"`)
	require.Equal(t, "1", b.str(t, KeyLastID))
}

// If the port setup fails after the job was created and adopted (a
// concurrent delete, a Redis error: set up by hand here), Queue's cleanup
// removes the job's keys and the parent's entry, but only an entry that
// still names this job.
func TestFollowupQueueDiscardsHalfCreatedJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	parent := b.queue(t, "TestWorker", nil)
	j := b.c.Job(2)
	// simulate: job 2 created and adopted, then the port write fails
	b.do(t, "SET", KeyLastID, 2)
	b.do(t, "SADD", KeyJobs, 2)
	b.do(t, "SET", j.key("worker"), `{"queue":"testq","class":"TestSum","args":null}`)
	b.do(t, "SET", j.key("status"), StatusCompleted)
	require.NoError(t, parent.Adopt(ctx, j, "kid"))
	b.do(t, "HSET", j.key("inports:default"), "in", `{"data":1}`)
	j.discard(ctx, parent, "kid")
	require.Equal(t, []string{"1"}, b.set(t, KeyJobs))
	require.Empty(t, b.hash(t, parent.key("children")))
	keys, err := redis.Strings(b.do(t, "KEYS", "job:2:*"), nil)
	require.NoError(t, err)
	require.Empty(t, keys)

	// the parent's entry is left alone when it names another job
	other := b.queue(t, "TestWorker", &QueueOpts{Parent: parent, Name: "kid2"})
	b.c.Job(99).discard(ctx, parent, "kid2")
	require.Equal(t, strconv.FormatInt(other.ID(), 10), b.hash(t, parent.key("children"))["kid2"])
}

// Ruby's status= checks that the job exists (the spec's "nearly every method
// first checks that the job exists", and 4.0's status= went through set,
// which raised "Job N does not exist!"). SetStatus on a deleted job fails
// and does not recreate job:<id>:status or publish; the middleware's final
// status writes on a job deleted during perform leave it gone too.
func TestFollowupSetStatusDeletedJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j := b.queue(t, "TestWorker", nil)
	require.NoError(t, j.SetStatus(ctx, StatusTerminated))
	deleted, err := j.Delete(ctx)
	require.NoError(t, err)
	require.True(t, deleted)
	sub := b.subscribe(t)
	err = j.SetStatus(ctx, StatusQueued)
	require.ErrorIs(t, err, ErrJobNotFound)
	var nf *JobNotFoundError
	require.True(t, errors.As(err, &nf))
	require.Equal(t, j.ID(), nf.ID)
	require.False(t, b.exists(t, j.key("status")))
	require.Empty(t, sub.stop(t, b), "nothing published")

	// a job that deletes itself during perform and then fails: the gem's
	// failed write would raise; here nothing is written and the worker's
	// error is what comes back
	w := &hookWorker{perform: func(ctx context.Context, j *Job) error {
		require.NoError(t, j.SetStatus(ctx, StatusTerminated))
		ok, err := j.Delete(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		return errors.New("boom")
	}}
	j2 := b.hook(t, w)
	err = b.exec(t, j2)
	require.EqualError(t, err, "boom")
	require.False(t, b.exists(t, j2.key("status")), "failed is not written to a deleted job")
	// and one that completes normally
	w3 := &hookWorker{perform: func(ctx context.Context, j *Job) error {
		require.NoError(t, j.SetStatus(ctx, StatusTerminated))
		_, err := j.Delete(ctx)
		return err
	}}
	j3 := b.hook(t, w3)
	require.NoError(t, b.exec(t, j3))
	require.False(t, b.exists(t, j3.key("status")))
}

// queueEntries are Sidekiq items around the job's own in a long queue, for
// the duplicate check: wantFound tells whether Sidekiq::Queue#find_job(id)
// (and so the gem's run) sees the job as already queued.
var queueEntries = []struct {
	name      string
	item      func(id int64) string
	wantFound bool
}{
	{"integer jid", func(id int64) string {
		return fmt.Sprintf(`{"retry":false,"queue":"testq","class":"TestWorker","args":[],"jid":%d}`, id)
	}, true},
	{"integral float jid", func(id int64) string {
		return fmt.Sprintf(`{"retry":false,"queue":"testq","class":"TestWorker","args":[],"jid":%d.0}`, id)
	}, true},
	{"longer jid with the same prefix", func(id int64) string {
		return fmt.Sprintf(`{"retry":false,"queue":"testq","class":"TestWorker","args":[],"jid":%d5}`, id)
	}, false},
	{"jid only inside args", func(id int64) string {
		return fmt.Sprintf(`{"retry":false,"queue":"testq","class":"TestWorker","args":[{"jid":%d}],"jid":"abc"}`, id)
	}, false},
	{"non-integral float jid", func(id int64) string {
		return fmt.Sprintf(`{"retry":false,"queue":"testq","class":"TestWorker","args":[],"jid":%d.5}`, id)
	}, false},
}

// fillQueue writes n filler items to queue:testq with entry at index pos
// (counted from the head, where LPUSH adds); pos < 0 leaves it out.
func (b *testBundle) fillQueue(t *testing.T, n, pos int, entry string) {
	t.Helper()
	b.do(t, "DEL", "queue:testq")
	args := []any{"queue:testq"}
	for i := range n {
		if i == pos {
			args = append(args, entry)
			continue
		}
		args = append(args, fmt.Sprintf(`{"retry":false,"queue":"testq","class":"TestWorker","args":[],"jid":"%024x"}`, i))
	}
	b.do(t, "RPUSH", args...)
}

// cmdCalls returns the number of calls of a command since the last CONFIG
// RESETSTAT (commands run by scripts are counted too).
func (b *testBundle) cmdCalls(t *testing.T, name string) int {
	t.Helper()
	info, err := redis.String(b.do(t, "INFO", "commandstats"), nil)
	require.NoError(t, err)
	m := regexp.MustCompile(`cmdstat_` + name + `:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// The duplicate check of run scans queue:<q> client-side in pages (as
// Sidekiq::Queue#find_job does), not in one Lua call that blocks Redis for
// the whole list, and still finds the item anywhere in a long queue.
func TestFollowupDuplicateCheckPaged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j := b.queue(t, "TestWorker", nil)
	n := 2*queuePageSize + queuePageSize/2
	item := queueEntries[0].item(j.ID())
	for _, pos := range []int{0, queuePageSize - 1, queuePageSize, n - 1} {
		b.fillQueue(t, n, pos, item)
		got, err := j.Run(ctx, nil)
		require.NoError(t, err)
		require.True(t, j.Equal(got))
		require.Equal(t, n, b.enqueued(t), "found at index %d: no second push", pos)
	}

	// unlike Ruby, a jid written as a JSON string of the same digits counts
	b.fillQueue(t, n, n-1, fmt.Sprintf(`{"retry":false,"queue":"testq","class":"TestWorker","args":[],"jid":"%d"}`, j.ID()))
	_, err := j.Run(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, n, b.enqueued(t), "string jid found")

	b.fillQueue(t, n, -1, "")
	b.do(t, "CONFIG", "RESETSTAT")
	_, err = j.Run(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, n+1, b.enqueued(t), "not queued yet: pushed")
	require.Equal(t, 3, b.cmdCalls(t, "lrange"), "three pages of %d, not one LRANGE 0 -1", queuePageSize)
}

// The Go duplicate check agrees with Ruby's Sidekiq::Queue#find_job (6.4.1,
// pages of 50) on a queue longer than a page, entry by entry.
func TestFollowupDuplicateCheckMatchesRuby(t *testing.T) {
	rubytest.Require(t)
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := srv.Pool(t)
	c, err := NewClient(&Config{Pool: pool})
	require.NoError(t, err)
	b := &testBundle{srv: srv, pool: pool, c: c}
	const id = 7
	var script strings.Builder
	for i, e := range queueEntries {
		key := fmt.Sprintf("queue:case%d", i)
		b.do(t, "DEL", key)
		for k := range 120 {
			entry := `{"jid":"filler","class":"X"}`
			if k == 70 {
				entry = e.item(id)
			}
			b.do(t, "RPUSH", key, entry)
		}
		found, err := c.Job(id).waitingInQueue(ctx, fmt.Sprintf("case%d", i))
		require.NoError(t, err)
		require.Equal(t, e.wantFound, found, e.name)
		fmt.Fprintf(&script, "puts Sidekiq::Queue.new('case%d').find_job(%d).nil? ? 'no' : 'yes'\n", i, id)
	}
	out := strings.Fields(rubytest.Run(t, srv.URL(), script.String()))
	require.Len(t, out, len(queueEntries))
	for i, e := range queueEntries {
		require.Equal(t, map[bool]string{true: "yes", false: "no"}[e.wantFound], out[i], "Ruby: %s", e.name)
	}
}
