package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/wire"
)

// locateWorld is a Redis caught between heartbeats: a gojob process whose
// in-progress list holds a job its work hash does not show yet and has
// lost one it still shows, both work-hash layouts written, a Ruby process
// without lists, the list of a gone process, a long queue and the sets.
type locateWorld struct {
	b                                            *apiBundle
	started, steady, ended, ruby, orphan, queued string
}

const (
	goProc   = "host:10:aaaaaaaaaaaa"
	rubyProc = "rb:20:cccccccccccc"
	goneList = "gone:30:bbbbbbbbbbbb000001"
	goBeat   = 1795296570.25
)

func jobJSON(class, jid, queue string) string {
	return fmt.Sprintf(`{"retry":true,"queue":%q,"class":%q,"args":[1],"jid":%q,"created_at":1795296500.5,"enqueued_at":1795296500.75}`, queue, class, jid)
}

func workEntry(job string, runAt int64) string {
	return `{"queue":"default","payload":` + string(apiJSONString(job)) + fmt.Sprintf(`,"run_at":%d}`, runAt)
}

func newLocateWorld(t *testing.T) *locateWorld {
	t.Helper()
	w := &locateWorld{b: apiSetup(t), started: "0000000000000000000started", steady: "00000000000000000000steady",
		ended: "000000000000000000000ended", ruby: "0000000000000000000000ruby", orphan: "00000000000000000000orphan",
		queued: "00000000000000000000queued"}
	b := w.b
	b.do(t, "SADD", "processes", goProc, rubyProc)
	b.do(t, "HSET", goProc, "info", `{"hostname":"host","pid":10,"identity":"`+goProc+`","concurrency":5,"queues":["default"]}`, "beat", fmt.Sprint(goBeat), "busy", "2")
	b.do(t, "HSET", rubyProc, "info", `{"hostname":"rb","pid":20,"identity":"`+rubyProc+`","concurrency":5,"queues":["default"]}`, "beat", "1795296571", "busy", "1")
	// The gojob process writes for all readers: both layouts, same threads.
	for _, key := range []string{goProc + ":work", goProc + ":workers"} {
		b.do(t, "HSET", key, "t1", workEntry(jobJSON("Steady", w.steady, "default"), 1795296560),
			"t2", workEntry(jobJSON("Ended", w.ended, "default"), 1795296561))
	}
	list := contract.WorkingListKey("default", goProc+"000001")
	b.do(t, "LPUSH", list, jobJSON("Steady", w.steady, "default"), jobJSON("Started", w.started, "default"))
	b.do(t, "SET", contract.ReliableHeartbeatKey(goProc+"000001"), "1")
	// The Ruby process keeps no list: its work hash is all there is.
	b.do(t, "HSET", rubyProc+":work", "r1", workEntry(jobJSON("RubyJob", w.ruby, "default"), 1795296565))
	// A gone process's list, no heartbeat.
	gone := contract.WorkingListKey("default", goneList)
	b.do(t, "LPUSH", gone, jobJSON("Orphan", w.orphan, "default"))
	b.do(t, "SADD", contract.KeyWorkingLists, list, gone)
	// A queue longer than one search chunk, the job near its oldest end.
	c := b.pool.Get()
	defer c.Close()
	c.Send("RPUSH", "queue:big", jobJSON("Queued", w.queued, "big"))
	for i := range 4500 {
		c.Send("LPUSH", "queue:big", jobJSON("Filler", fmt.Sprintf("%024x", i), "big"))
	}
	c.Send("SADD", "queues", "big", "default")
	require.NoError(t, c.Flush())
	for range 4502 {
		_, err := c.Receive()
		require.NoError(t, err)
	}
	return w
}

// Running shows every running job once, from its first moment to its
// end, whatever the last heartbeat wrote.
func TestRunningJoinsInProgressListsAndWorkHashes(t *testing.T) {
	t.Parallel()
	w := newLocateWorld(t)
	ctx := context.Background()
	run, err := w.b.api.Running(ctx)
	require.NoError(t, err)
	got := map[string]*api.Work{}
	for _, r := range run {
		require.NotContains(t, got, r.Payload.JID(), "listed once")
		got[r.Payload.JID()] = r
	}
	require.Len(t, got, 3, "steady, started and ruby; not ended, not the orphan")
	require.Equal(t, "t1", got[w.steady].TID)
	require.Equal(t, time.Unix(1795296560, 0), got[w.steady].RunAt)
	require.Equal(t, contract.WorkingListKey("default", goProc+"000001"), got[w.steady].List)
	s := got[w.started]
	require.Equal(t, goProc, s.Identity)
	require.True(t, s.RunAt.IsZero())
	require.Equal(t, contract.FromEpochSeconds(goBeat), s.StartedAfter)
	require.Equal(t, "default", s.Queue)
	require.Equal(t, rubyProc, got[w.ruby].Identity)
	require.Empty(t, got[w.ruby].List)

	// WorkSet is the heartbeats' view, each thread once.
	ws, err := w.b.api.WorkSet(ctx)
	require.NoError(t, err)
	require.Len(t, ws, 3, "t1 and t2 of both layouts once each, and r1")
}

// Locate answers for every place a job can be, and the Cancel of a job
// that only its in-progress list shows is a request to its process.
func TestLocateFindsAJobWhereverItIs(t *testing.T) {
	t.Parallel()
	w := newLocateWorld(t)
	ctx := context.Background()
	a := w.b.api
	retry, err := wire.ParseJob([]byte(jobJSON("Retried", "0000000000000000000retried", "default")))
	require.NoError(t, err)
	at := time.Unix(1795300000, 0)
	require.NoError(t, a.RetrySet().Schedule(ctx, at, retry))

	for _, tc := range []struct {
		jid, where, queue, process string
	}{
		{w.started, "running", "default", goProc},
		{w.steady, "running", "default", goProc},
		{w.ruby, "running", "default", rubyProc},
		{w.orphan, "orphaned", "default", goneList},
		{w.queued, "queue", "big", ""},
		{retry.JID(), "retry", "default", ""},
	} {
		loc, err := a.Locate(ctx, tc.jid)
		require.NoError(t, err, tc.jid)
		require.NotNil(t, loc, tc.jid)
		require.Equal(t, tc.where, loc.Where, tc.jid)
		require.Equal(t, tc.queue, loc.Queue, tc.jid)
		require.Equal(t, tc.process, loc.Process, tc.jid)
		require.Equal(t, tc.jid, loc.Job.JID())
	}
	loc, err := a.Locate(ctx, w.started)
	require.NoError(t, err)
	require.True(t, loc.At.IsZero())
	require.Equal(t, contract.FromEpochSeconds(goBeat), loc.StartedAfter)
	loc, err = a.Locate(ctx, retry.JID())
	require.NoError(t, err)
	require.Equal(t, at, loc.At)
	require.NotNil(t, loc.Entry)

	// Ended since the last heartbeat: its work entry is stale.
	loc, err = a.Locate(ctx, w.ended)
	require.NoError(t, err)
	require.Nil(t, loc)

	res, err := a.Cancel(ctx, w.started)
	require.NoError(t, err)
	require.Equal(t, "running", res.Where)
	require.Equal(t, "1", strings.TrimSpace(fmt.Sprint(w.b.do(t, "EXISTS", contract.CancelKey(w.started)))))
	res, err = a.Cancel(ctx, w.queued)
	require.NoError(t, err)
	require.Equal(t, "queue", res.Where)
	require.Equal(t, "big", res.Queue)
	n, err := a.Queue("big").Size(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4500, n)
}
