package batch

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

type testBundle struct {
	pool    *redis.Pool
	client  *sidekiq.Client
	batches *Batches
	conn    redis.Conn
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool})
	require.NoError(t, err)
	b, err := New(&Config{Client: client})
	require.NoError(t, err)
	conn := pool.Get()
	t.Cleanup(func() { conn.Close() })
	return &testBundle{pool: pool, client: client, batches: b, conn: conn}
}

// startServer runs a server with the batches' extension and the given
// handlers.
func (tb *testBundle) startServer(t *testing.T, handlers map[string]sidekiq.HandlerFunc) {
	t.Helper()
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{Pool: tb.pool, Concurrency: 4, Logger: zerolog.Nop(),
		Fetch: "reliable", Extensions: []sidekiq.Extension{tb.batches}, Queues: []wire.QueueWeight{{Name: "work"}}})
	require.NoError(t, err)
	for class, h := range handlers {
		srv.Handle(class, sidekiq.HandlerFunc(h), nil)
	}
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
}

// callbacks returns the callback jobs waiting in queue default, by class.
func (tb *testBundle) callbacks(t *testing.T, class string) []*wire.Job {
	t.Helper()
	vals, err := redis.ByteSlices(tb.conn.Do("LRANGE", "queue:default", 0, -1))
	require.NoError(t, err)
	var out []*wire.Job
	for _, v := range vals {
		job, err := wire.ParseJob(v)
		require.NoError(t, err)
		if job.Class() == class {
			out = append(out, job)
		}
	}
	return out
}

func newJob(t *testing.T, class string, args ...any) *wire.Job {
	t.Helper()
	job, err := wire.NewJob(class, args...)
	require.NoError(t, err)
	job.SetQueue("work")
	return job
}

// Every job succeeding fires complete then success once; a second record
// of a success (a job run again after a crash) fires nothing.
func TestBatchSuccessFiresCallbacksOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := context.Background()
	st, err := tb.batches.Create(ctx, &CreateParams{Description: "three", OnSuccess: "Done", OnComplete: "Finished"})
	require.NoError(t, err)
	var ran atomic.Int64
	tb.startServer(t, map[string]sidekiq.HandlerFunc{"Work": func(ctx context.Context, job *wire.Job) error {
		ran.Add(1)
		return nil
	}})
	var jids []string
	for i := range 3 {
		jid, ok, err := tb.batches.Push(ctx, st.BID, newJob(t, "Work", i))
		require.NoError(t, err)
		require.True(t, ok)
		jids = append(jids, jid)
	}
	wait.For(t, "the jobs", func() bool { return ran.Load() == 3 })
	got, err := tb.batches.Status(ctx, st.BID)
	require.NoError(t, err)
	require.Nil(t, got.SuccessAt, "not sealed: no callback yet")
	require.Empty(t, tb.callbacks(t, "Done"))

	require.NoError(t, tb.batches.Seal(ctx, st.BID))
	require.NoError(t, tb.batches.Seal(ctx, st.BID))
	pushed, err := tb.batches.update(ctx, "ok", st.BID, jids[0])
	require.NoError(t, err)
	require.Empty(t, pushed, "a success recorded again changes nothing")

	done := tb.callbacks(t, "Done")
	require.Len(t, done, 1)
	require.Len(t, tb.callbacks(t, "Finished"), 1)
	args := done[0].Args()
	require.Len(t, args, 2)
	s, _ := args[0].Str()
	require.Equal(t, st.BID, s)
	_, ok := done[0].Get("enqueued_at")
	require.True(t, ok)
	got, err = tb.batches.Status(ctx, st.BID)
	require.NoError(t, err)
	require.Equal(t, int64(3), got.Total)
	require.Equal(t, int64(3), got.Succeeded)
	require.Zero(t, got.Pending)
	require.NotNil(t, got.SuccessAt)
	require.NotNil(t, got.CompleteAt)
	require.Equal(t, "three", got.Description)

	_, _, err = tb.batches.Push(ctx, st.BID, newJob(t, "Work"))
	require.ErrorIs(t, err, ErrComplete)
	_, _, err = tb.batches.Push(ctx, "nosuchbatch", newJob(t, "Work"))
	require.ErrorIs(t, err, ErrNotFound)
	list, err := tb.batches.List(ctx, 0, 0)
	require.NoError(t, err)
	require.Len(t, list, 1)
}

// A job that dies makes the batch complete but not succeed; retried from
// the dead set and succeeding, it makes the batch succeed then.
func TestBatchDeathCompletesWithoutSuccess(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := context.Background()
	st, err := tb.batches.Create(ctx, &CreateParams{OnSuccess: "Done", OnComplete: "Finished"})
	require.NoError(t, err)
	var fail atomic.Bool
	fail.Store(true)
	var ran atomic.Int64
	tb.startServer(t, map[string]sidekiq.HandlerFunc{"Work": func(ctx context.Context, job *wire.Job) error {
		defer ran.Add(1)
		if a := job.Args(); len(a) > 0 {
			if n, _ := a[0].Int(); n == 1 && fail.Load() {
				return sidekiq.Kill(errors.New("boom"))
			}
		}
		return nil
	}})
	var bad *wire.Job
	for i := range 2 {
		j := newJob(t, "Work", i)
		if i == 1 {
			bad = j
		}
		_, _, err := tb.batches.Push(ctx, st.BID, j)
		require.NoError(t, err)
	}
	require.NoError(t, tb.batches.Seal(ctx, st.BID))
	wait.For(t, "complete", func() bool { return len(tb.callbacks(t, "Finished")) == 1 })
	require.Empty(t, tb.callbacks(t, "Done"))
	got, err := tb.batches.Status(ctx, st.BID)
	require.NoError(t, err)
	require.Equal(t, int64(1), got.Dead)
	require.Equal(t, int64(1), got.Succeeded)

	fail.Store(false)
	_, err = tb.conn.Do("DEL", contract.KeyDead)
	require.NoError(t, err)
	_, err = tb.conn.Do("LPUSH", "queue:work", bad.Bytes())
	require.NoError(t, err)
	wait.For(t, "success", func() bool { return len(tb.callbacks(t, "Done")) == 1 })
	require.Len(t, tb.callbacks(t, "Finished"), 1, "complete fired once")
}

// A child batch is a member of its parent: the parent succeeds once its
// own jobs and its child have.
func TestNestedBatchSucceedsThroughParent(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := context.Background()
	parent, err := tb.batches.Create(ctx, &CreateParams{OnSuccess: "ParentDone"})
	require.NoError(t, err)
	child, err := tb.batches.Create(ctx, &CreateParams{OnSuccess: "ChildDone", Parent: parent.BID})
	require.NoError(t, err)
	release := make(chan struct{})
	tb.startServer(t, map[string]sidekiq.HandlerFunc{"Work": func(ctx context.Context, job *wire.Job) error {
		<-release
		return nil
	}})
	_, _, err = tb.batches.Push(ctx, parent.BID, newJob(t, "Work", "p"))
	require.NoError(t, err)
	_, _, err = tb.batches.Push(ctx, child.BID, newJob(t, "Work", "c"))
	require.NoError(t, err)
	require.NoError(t, tb.batches.Seal(ctx, parent.BID))
	require.NoError(t, tb.batches.Seal(ctx, child.BID))
	got, err := tb.batches.Status(ctx, parent.BID)
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Total, "its job and its child")
	close(release)
	wait.For(t, "parent success", func() bool { return len(tb.callbacks(t, "ParentDone")) == 1 })
	require.Len(t, tb.callbacks(t, "ChildDone"), 1)
	_, err = tb.batches.Create(ctx, &CreateParams{Parent: "nosuchbatch"})
	require.ErrorIs(t, err, ErrNotFound)
}

// A job of a Sidekiq Pro batch goes to the dead set with the reason,
// without running.
func TestProBatchJobRefused(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var ran atomic.Int64
	tb.startServer(t, map[string]sidekiq.HandlerFunc{"Work": func(ctx context.Context, job *wire.Job) error {
		ran.Add(1)
		return nil
	}})
	_, err := tb.conn.Do("LPUSH", "queue:work", `{"class":"Work","args":[],"jid":"aaaaaaaaaaaaaaaaaaaaaaaa","queue":"work","retry":true,"bid":"pro-batch-1"}`)
	require.NoError(t, err)
	_, err = tb.conn.Do("SADD", "queues", "work")
	require.NoError(t, err)
	var dead [][]byte
	wait.For(t, "the dead set", func() bool {
		dead, _ = redis.ByteSlices(tb.conn.Do("ZRANGE", contract.KeyDead, 0, -1))
		return len(dead) == 1
	})
	job, err := wire.ParseJob(dead[0])
	require.NoError(t, err)
	ec, _ := job.Get("error_class")
	s, _ := ec.Str()
	require.Equal(t, "Gojob::UnsupportedBatch", s)
	em, _ := job.Get("error_message")
	msg, _ := em.Str()
	require.Contains(t, msg, "pro-batch-1")
	require.Zero(t, ran.Load())
}

// A discarded job is its batch's death; a job that reached the dead set
// unseen (a kill -9 before its death handler, a Kill from Ruby's Web UI)
// is found by Reconcile, which fires the complete callback then.
func TestBatchDiscardAndReconcile(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := context.Background()
	st, err := tb.batches.Create(ctx, &CreateParams{OnComplete: "Finished"})
	require.NoError(t, err)
	tb.startServer(t, map[string]sidekiq.HandlerFunc{"Work": func(ctx context.Context, job *wire.Job) error {
		return sidekiq.Discard(errors.New("not wanted"))
	}})
	_, _, err = tb.batches.Push(ctx, st.BID, newJob(t, "Work"))
	require.NoError(t, err)
	unseen := newJob(t, "Unseen")
	unseen.SetQueue("elsewhere")
	_, _, err = tb.batches.Push(ctx, st.BID, unseen)
	require.NoError(t, err)
	require.NoError(t, tb.batches.Seal(ctx, st.BID))
	wait.For(t, "the discard recorded", func() bool {
		got, err := tb.batches.Status(ctx, st.BID)
		require.NoError(t, err)
		return got.Dead == 1
	})
	require.Empty(t, tb.callbacks(t, "Finished"))

	raw, err := redis.Bytes(tb.conn.Do("RPOP", "queue:elsewhere"))
	require.NoError(t, err)
	_, err = tb.conn.Do("ZADD", contract.KeyDead, 1, raw)
	require.NoError(t, err)
	got, err := tb.batches.Reconcile(ctx, st.BID)
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Dead)
	require.NotNil(t, got.CompleteAt)
	require.Nil(t, got.SuccessAt)
	require.Len(t, tb.callbacks(t, "Finished"), 1)
	_, err = tb.batches.Reconcile(ctx, st.BID)
	require.NoError(t, err)
	require.Len(t, tb.callbacks(t, "Finished"), 1, "once")
}

// A batch job that reached the dead set unseen is found by the dead-set
// watch, which completes its batch once; a second process's pass while the
// first holds the lease reads nothing, and passes after it record nothing
// twice.
func TestDeadSetWatchCompletesBatchesOnce(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := context.Background()
	st, err := tb.batches.Create(ctx, &CreateParams{OnComplete: "Finished"})
	require.NoError(t, err)
	_, _, err = tb.batches.Push(ctx, st.BID, newJob(t, "Unseen"))
	require.NoError(t, err)
	require.NoError(t, tb.batches.Seal(ctx, st.BID))
	raw, err := redis.Bytes(tb.conn.Do("RPOP", "queue:work"))
	require.NoError(t, err)
	// Killed from Ruby's Web UI: in the dead set, no death handler ran.
	_, err = tb.conn.Do("ZADD", contract.KeyDead, contract.EpochSeconds(time.Now()), raw)
	require.NoError(t, err)
	// An entry that is no batch job is left alone.
	_, err = tb.conn.Do("ZADD", contract.KeyDead, contract.EpochSeconds(time.Now()), `{"class":"Other","jid":"x","args":[]}`)
	require.NoError(t, err)

	n, err := tb.batches.watchPass(ctx, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got, err := tb.batches.Status(ctx, st.BID)
	require.NoError(t, err)
	require.Equal(t, int64(1), got.Dead)
	require.NotNil(t, got.CompleteAt)
	require.Len(t, tb.callbacks(t, "Finished"), 1)

	n, err = tb.batches.watchPass(ctx, time.Minute)
	require.NoError(t, err)
	require.Zero(t, n, "another pass within the lease reads nothing")
	_, err = tb.conn.Do("DEL", contract.KeyBatchDeadWatch)
	require.NoError(t, err)
	n, err = tb.batches.watchPass(ctx, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the entry is read again within the overlap")
	require.Len(t, tb.callbacks(t, "Finished"), 1, "and recorded once")
}
