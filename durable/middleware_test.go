package durable

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/pgtest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Tests marked "Checklist item N" implement that item of
// docs/durable.md#conformance-checklist (Amigo's durable_job_spec.rb); each
// runs on PostgreSQL (two databases) and on SQLite (two files).

// Ruby's enabled=false (items 6, 11, 18, 28) is, in gojob, not installing
// the middleware: nothing of this package runs then.

// Checklist item 1 (docs/durable.md#conformance-checklist).
func TestMigrateCreatesTableInEachDatabase(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		d, err := New(&Config{URLs: urls[:], Table: uniqueTable()})
		require.NoError(t, err)
		defer d.Close()
		res, err := d.Migrate(context.Background())
		require.NoError(t, err)
		require.Len(t, res, 2)
		for _, m := range res {
			require.True(t, m.Created, m.Database)
		}
		st, err := d.Status(context.Background())
		require.NoError(t, err)
		for _, db := range st.Databases {
			require.NoError(t, db.Err)
		}
	})
}

// rubyPush writes a job's row as a push does, with "at" present for a
// scheduled job.
func rubyPush(t *testing.T, b *testBundle, job *wire.Job) {
	t.Helper()
	require.NoError(t, b.d.BeforePush(context.Background(), []*wire.Job{job}))
}

// Checklist item 2 (docs/durable.md#conformance-checklist).
func TestClientInsertsIntoFirstDatabase(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		ctx := context.Background()
		now := micro(testNow)

		// perform_async through the real client, with set(queue: "myq").
		j1 := newJob(t, "DurableJob", map[string]any{"x": 1})
		j1.SetQueue("myq")
		res, err := b.client.Push(ctx, j1, nil)
		require.NoError(t, err)
		// perform_in(10 min) and perform_at(+5 min): Ruby's client hands the
		// middleware the item with "at".
		j2 := newJob(t, "DurableJob", 2)
		j2.Set("at", rubyjson.FloatValue(contract.EpochSeconds(testNow.Add(10*time.Minute))))
		rubyPush(t, b, j2)
		j3 := newJob(t, "DurableJob", 3)
		j3.Set("at", rubyjson.FloatValue(contract.EpochSeconds(testNow.Add(5*time.Minute))))
		rubyPush(t, b, j3)

		for _, c := range []struct {
			jid      string
			deadline time.Time
			queue    string
			args     string
		}{
			{res.JID, now.Add(5 * time.Minute), "myq", `[{"x":1}]`},
			{j2.JID(), now.Add(15 * time.Minute), "default", `[2]`},
			{j3.JID(), now.Add(10 * time.Minute), "default", `[3]`},
		} {
			r := b.rowIn(t, 0, c.jid)
			require.NotNil(t, r, c.jid)
			require.Nil(t, b.rowIn(t, 1, c.jid), "DB1 only")
			require.Equal(t, c.queue, r.Queue)
			require.Nil(t, r.LockedBy)
			require.WithinDuration(t, c.deadline, r.AssumeDeadAt, time.Millisecond)
			item, err := wire.ParseJob([]byte(r.ItemJSON))
			require.NoError(t, err)
			require.Equal(t, "DurableJob", item.Class())
			args, _ := item.Get("args")
			require.Equal(t, c.args, string(args.Encode()))
		}
		require.Equal(t, 1, b.llen(t, "myq"), "pushed")
	})
}

// Checklist item 3 (docs/durable.md#conformance-checklist).
func TestFallsBackToSecondDatabase(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: []string{be.Unreachable, urls[1]}})
		res, err := b.client.Enqueue(context.Background(), "", "DurableJob", 1)
		require.NoError(t, err)
		require.NotNil(t, b.rowIn(t, 1, res.JID))
		require.Equal(t, 1, b.logs.Count("warn", "durable insert failed"))
		require.Equal(t, 0, b.logs.Count("error", ""))
	})
}

// Checklist item 4 (docs/durable.md#conformance-checklist).
func TestNoDatabaseLogsAndStillPushes(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		b := setup(t, bundleOpts{urls: []string{be.Unreachable}})
		_, err := b.client.Enqueue(context.Background(), "", "DurableJob", 1)
		require.NoError(t, err)
		require.Equal(t, 1, b.llen(t, "default"))
		require.Equal(t, 1, b.logs.Count("error", "no database available to insert"))
	})
}

// spyConn calls onPush before an LPUSH or ZADD schedule reaches Redis.
type spyConn struct {
	redis.Conn
	onPush func()
}

func (c *spyConn) spy(cmd string, args []any) {
	if cmd == "LPUSH" || (cmd == "ZADD" && len(args) > 0 && args[0] == contract.KeySchedule) {
		c.onPush()
	}
}

func (c *spyConn) Send(cmd string, args ...any) error {
	c.spy(cmd, args)
	return c.Conn.Send(cmd, args...)
}

func (c *spyConn) Do(cmd string, args ...any) (any, error) {
	c.spy(cmd, args)
	return c.Conn.Do(cmd, args...)
}

func (c *spyConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	c.spy(cmd, args)
	return c.Conn.(redis.ConnWithContext).DoContext(ctx, cmd, args...)
}

func (c *spyConn) ReceiveContext(ctx context.Context) (any, error) {
	return c.Conn.(redis.ConnWithContext).ReceiveContext(ctx)
}

func (c *spyConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	c.spy(cmd, args)
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

func (c *spyConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// Checklist item 5 (docs/durable.md#conformance-checklist).
func TestInsertHappensBeforeRedisPush(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		var mu sync.Mutex
		var order []string
		var job *wire.Job
		spied := &redis.Pool{Dial: func() (redis.Conn, error) {
			c, err := b.rs.Dial()
			if err != nil {
				return nil, err
			}
			return &spyConn{Conn: c, onPush: func() {
				mu.Lock()
				defer mu.Unlock()
				if r, _ := b.d.get(context.Background(), job.JID()); r != nil {
					order = append(order, "inserted")
				}
				order = append(order, "pushed")
			}}, nil
		}}
		defer spied.Close()
		client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: spied, Clock: b.clk, Extensions: []sidekiq.Extension{b.d}})
		require.NoError(t, err)
		job = newJob(t, "DurableJob", 1)
		_, err = client.Push(context.Background(), job, nil)
		require.NoError(t, err)
		require.Equal(t, []string{"inserted", "pushed"}, order)
	})
}

// serverBundle runs a sidekiq.Server with the durable middleware, and an
// outer middleware that reports every job's outcome after the durable one
// has finished with it.
type serverBundle struct {
	*testBundle
	srv  *sidekiq.Server
	done chan jobOutcome
}

type jobOutcome struct {
	jid string
	err error
}

// reportingExtension is the durable extension, reporting each job's
// outcome once the durable part is done with it. The bundle's client has
// the durable extension already: the server adds this one to it, and it
// writes no row a second time.
type reportingExtension struct {
	*Durable
	done chan jobOutcome
}

func (reportingExtension) BeforePush(context.Context, []*wire.Job) error { return nil }

func (e reportingExtension) Run(ctx context.Context, r *sidekiq.Run, next func(context.Context) error) error {
	defer func() {
		if p := recover(); p != nil {
			e.done <- jobOutcome{r.Job.JID(), fmt.Errorf("panic: %v", p)}
			panic(p)
		}
	}()
	err := e.Durable.Run(ctx, r, next)
	e.done <- jobOutcome{r.Job.JID(), err}
	return err
}

func startServer(t *testing.T, b *testBundle, handlers map[string]sidekiq.HandlerFunc) *serverBundle {
	t.Helper()
	done := make(chan jobOutcome, 16)
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{
		Pool: b.pool, Client: b.client, Clock: b.clk, Logger: b.log, Concurrency: 2,
		DisablePoller: true, HeartbeatInterval: time.Hour, Queues: []wire.QueueWeight{{Name: "default"}},
		Extensions: []sidekiq.Extension{reportingExtension{b.d, done}},
	})
	require.NoError(t, err)
	for class, h := range handlers {
		srv.Handle(class, h, &sidekiq.HandlerOptions{Retry: 3})
	}
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
	return &serverBundle{testBundle: b, srv: srv, done: done}
}

func (s *serverBundle) wait(t *testing.T) jobOutcome {
	t.Helper()
	select {
	case o := <-s.done:
		return o
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for a job to finish")
	}
	return jobOutcome{}
}

// Checklist items 7, 8 (docs/durable.md#conformance-checklist).
func TestLockedWhileRunningDeletedAfterSuccess(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		var during *Row
		var active bool
		s := startServer(t, b, map[string]sidekiq.HandlerFunc{"DurableJob": func(ctx context.Context, job *wire.Job) error {
			during = b.row(t, job.JID())
			_, active = activeJID(ctx)
			return nil
		}})
		b.clk.Advance(time.Minute)
		res, err := b.client.Enqueue(context.Background(), "", "DurableJob", 1)
		require.NoError(t, err)
		o := s.wait(t)
		require.NoError(t, o.err)
		require.NotNil(t, during)
		require.Equal(t, s.srv.Identity(), during.LockedBy)
		require.True(t, micro(b.clk.Now()).Equal(*during.LockedAt))
		require.True(t, micro(b.clk.Now().Add(5*time.Minute)).Equal(during.AssumeDeadAt))
		require.True(t, active)
		require.Nil(t, b.row(t, res.JID), "deleted after success")
	})
}

// Checklist item 9 (docs/durable.md#conformance-checklist).
func TestErrorUnlocksAndRecordsError(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		s := startServer(t, b, map[string]sidekiq.HandlerFunc{"DurableJob": func(ctx context.Context, job *wire.Job) error {
			b.clk.Advance(time.Minute) // the job took a minute
			return sidekiq.WithErrorClass("NotImplementedError", errors.New("hi"))
		}})
		res, err := b.client.Enqueue(context.Background(), "", "DurableJob", 1)
		require.NoError(t, err)
		o := s.wait(t)
		require.EqualError(t, o.err, "hi", "re-raised")
		r := b.row(t, res.JID)
		require.NotNil(t, r)
		require.Empty(t, r.LockedBy)
		require.Nil(t, r.LockedAt)
		require.True(t, micro(testNow.Add(6*time.Minute)).Equal(r.AssumeDeadAt))
		item, err := wire.ParseJob([]byte(r.ItemJSON))
		require.NoError(t, err)
		require.Equal(t, "NotImplementedError", item.ErrorClass())
		require.Equal(t, "hi", item.ErrorMessage())
		require.Equal(t, res.JID, item.JID())
	})
}

// Checklist item 9 (docs/durable.md#conformance-checklist).
func TestPanicUnlocksAndRecordsError(t *testing.T) {
	t.Parallel()
	urls := pgtest.Backends[1].URLs(t)
	b := setup(t, bundleOpts{urls: urls[:]})
	s := startServer(t, b, map[string]sidekiq.HandlerFunc{"DurableJob": func(ctx context.Context, job *wire.Job) error {
		panic("boom")
	}})
	res, err := b.client.Enqueue(context.Background(), "", "DurableJob", 1)
	require.NoError(t, err)
	o := s.wait(t)
	require.Error(t, o.err)
	r := b.row(t, res.JID)
	require.NotNil(t, r)
	require.Empty(t, r.LockedBy)
	item, err := wire.ParseJob([]byte(r.ItemJSON))
	require.NoError(t, err)
	require.Equal(t, "Panic", item.ErrorClass())
	require.Equal(t, "panic: boom", item.ErrorMessage())
}

// Checklist item 10 (docs/durable.md#conformance-checklist).
func TestNoRowLogsAndRuns(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		res, err := b.client.Enqueue(context.Background(), "", "DurableJob", 1)
		require.NoError(t, err)
		_, err = b.d.stores[0].DeleteJob(context.Background(), res.JID)
		require.NoError(t, err)
		ran := make(chan bool, 1)
		s := startServer(t, b, map[string]sidekiq.HandlerFunc{"DurableJob": func(ctx context.Context, job *wire.Job) error {
			_, active := activeJID(ctx)
			ran <- active
			return nil
		}})
		require.NoError(t, s.wait(t).err)
		require.False(t, <-ran, "ran without a durable row")
		require.Equal(t, 1, b.logs.Count("error", "DurableJob: DurableJob["+res.JID+"]: no row found in database"))
	})
}

// Checklist item 12 (docs/durable.md#conformance-checklist).
func TestNonDurableClassIsUntouched(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		ran := make(chan bool, 1)
		s := startServer(t, b, map[string]sidekiq.HandlerFunc{"PlainJob": func(ctx context.Context, job *wire.Job) error {
			_, active := activeJID(ctx)
			ran <- active
			return nil
		}})
		res, err := b.client.Enqueue(context.Background(), "", "PlainJob", 1)
		require.NoError(t, err)
		require.NoError(t, s.wait(t).err)
		require.False(t, <-ran)
		require.Nil(t, b.row(t, res.JID))
		require.Equal(t, 0, b.logs.Count("error", ""))
	})
}

// Checklist items 13, 14, 15 (docs/durable.md#conformance-checklist).
func TestInsertJob(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		ctx := context.Background()
		job := newJob(t, "DurableJob")
		res, err := b.d.insert(ctx, &insertParams{Job: job})
		require.NoError(t, err)
		require.Equal(t, b.d.stores[0].Name(), res.Database)
		r := b.row(t, job.JID())
		require.Equal(t, "DurableJob", r.JobClass)
		require.Equal(t, string(job.Bytes()), r.ItemJSON)
		require.Contains(t, r.ItemJSON, `{"class":"DurableJob"`)
		require.Empty(t, r.LockedBy)
		require.Nil(t, r.LockedAt)
		require.Equal(t, "default", r.Queue)
		require.True(t, micro(testNow.Add(5*time.Minute)).Equal(r.AssumeDeadAt))

		at := newJob(t, "DurableJob")
		at.Set("at", rubyjson.IntValue(100))
		_, err = b.d.insert(ctx, &insertParams{Job: at})
		require.NoError(t, err)
		require.Equal(t, "1970-01-01T00:06:40Z", b.row(t, at.JID()).AssumeDeadAt.Format(time.RFC3339))
		at.Set("at", rubyjson.IntValue(10_000))
		_, err = b.d.insert(ctx, &insertParams{Job: at})
		require.NoError(t, err)
		require.Equal(t, "1970-01-01T02:51:40Z", b.row(t, at.JID()).AssumeDeadAt.Format(time.RFC3339))

		// A class's own extension (Amigo's heartbeat_extension override).
		short := newJob(t, "ShortJob")
		_, err = b.d.insert(ctx, &insertParams{Job: short})
		require.NoError(t, err)
		require.True(t, micro(testNow.Add(20*time.Second)).Equal(b.row(t, short.JID()).AssumeDeadAt))
	})
}

// Checklist items 16, 17 (docs/durable.md#conformance-checklist): a
// heartbeat moves assume_dead_at to now + extension, at most once a
// quarter of the extension, and reports a row that is gone.
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		ctx := context.Background()
		require.NoError(t, sidekiq.Heartbeat(ctx), "outside a job a heartbeat does nothing")

		job := newJob(t, "DurableJob")
		b.insert(t, job, nil)
		err := b.d.Run(ctx, &sidekiq.Run{Job: job, Identity: "h:1:n"}, func(ctx context.Context) error {
			a, _ := ctx.Value(activeKey{}).(*activeJob)
			require.NotNil(t, a)
			dl, err := a.heartbeat(ctx, b.clk.Now())
			require.NoError(t, err)
			require.True(t, micro(testNow.Add(5*time.Minute)).Equal(dl))

			// beat: nothing written within a quarter of the extension.
			b.clk.Advance(time.Minute)
			require.NoError(t, a.beat(ctx))
			require.True(t, dl.Equal(b.row(t, job.JID()).AssumeDeadAt))
			b.clk.Advance(29 * time.Minute)
			require.NoError(t, a.beat(ctx))
			want := micro(testNow.Add(35 * time.Minute))
			wait.For(t, "the deadline moved", func() bool { return want.Equal(b.row(t, job.JID()).AssumeDeadAt) })

			// A row removed meanwhile (the reconciler gave up on the job):
			// the next beat after the write that found it gone says so.
			_, err = b.d.stores[0].DeleteJob(ctx, job.JID())
			require.NoError(t, err)
			wait.For(t, "the write done", func() bool { return !a.beating.Load() })
			b.clk.Advance(2 * time.Minute)
			require.NoError(t, a.beat(ctx))
			wait.For(t, "the row found gone", func() bool { return errors.Is(a.beat(ctx), ErrRowGone) })
			return nil
		})
		require.NoError(t, err)
	})
}

// sidekiq.Heartbeat from a running durable job's handler reaches its row.
func TestSidekiqHeartbeatMovesTheRowsDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{urls: []string{"sqlite:" + filepath.Join(t.TempDir(), "one.db")}})
	job := newJob(t, "DurableJob")
	beat := make(chan struct{})
	sb := startServer(t, b, map[string]sidekiq.HandlerFunc{"DurableJob": func(ctx context.Context, j *wire.Job) error {
		b.clk.Advance(10 * time.Minute)
		require.NoError(t, sidekiq.Heartbeat(ctx))
		want := micro(b.clk.Now().Add(5 * time.Minute))
		wait.For(t, "the deadline moved", func() bool { return want.Equal(b.row(t, j.JID()).AssumeDeadAt) })
		close(beat)
		return nil
	}})
	_, err := b.client.Push(context.Background(), job, nil)
	require.NoError(t, err)
	<-beat
	out := <-sb.done
	require.NoError(t, out.err)
}

func TestLockFindsRowInAnotherDatabase(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		table := uniqueTable()
		b := setup(t, bundleOpts{urls: urls[:], table: table})
		job := newJob(t, "DurableJob")
		b.insert(t, job, nil)
		require.NotNil(t, b.rowIn(t, 0, job.JID()))

		// The same databases in the other order: the row is found in the
		// second one, and the success deletes it there.
		reversed := setup(t, bundleOpts{urls: []string{urls[1], urls[0]}, table: table})
		ran := false
		err := reversed.d.Run(context.Background(), &sidekiq.Run{Job: job, Identity: "h:1:n"}, func(ctx context.Context) error {
			ran = true
			r := reversed.rowIn(t, 1, job.JID())
			require.Equal(t, "h:1:n", *r.LockedBy)
			return nil
		})
		require.NoError(t, err)
		require.True(t, ran)
		require.Nil(t, b.rowIn(t, 0, job.JID()))

		// With the first database unreachable, the row in the second is found.
		j2 := newJob(t, "DurableJob")
		reversed.insert(t, j2, nil) // into urls[1]
		down := setup(t, bundleOpts{urls: []string{be.Unreachable, urls[1]}, table: table})
		err = down.d.Run(context.Background(), &sidekiq.Run{Job: j2, Identity: "h:1:n"}, func(ctx context.Context) error {
			_, active := activeJID(ctx)
			require.True(t, active)
			return nil
		})
		require.NoError(t, err)
		require.Nil(t, down.rowIn(t, 1, j2.JID()))
		require.Equal(t, 1, down.logs.Count("warn", "durable lock: database skipped"))
	})
}

func TestInJobPushOfSameJIDKeepsRow(t *testing.T) {
	t.Parallel()
	urls := pgtest.Backends[1].URLs(t)
	b := setup(t, bundleOpts{urls: urls[:]})
	ctx := context.Background()
	job := newJob(t, "DurableJob")
	b.insert(t, job, nil)
	// Amigo's retry helper re-pushes the same jid from inside the job, then
	// the job returns successfully: the row now stands for the new push.
	err := b.d.Run(ctx, &sidekiq.Run{Job: job, Identity: "h:1:n"}, func(ctx context.Context) error {
		again, err := wire.ParseJob(job.Bytes())
		require.NoError(t, err)
		_, err = b.client.Push(ctx, again, &sidekiq.PushOpts{In: time.Hour})
		return err
	})
	require.NoError(t, err)
	r := b.row(t, job.JID())
	require.NotNil(t, r, "the re-pushed job keeps its durable row")
	require.Empty(t, r.LockedBy)
}

func TestActiveJobWrapperUsesWrappedClass(t *testing.T) {
	t.Parallel()
	urls := pgtest.Backends[1].URLs(t)
	b := setup(t, bundleOpts{urls: urls[:]})
	job := newJob(t, contract.ActiveJobWrapper, map[string]any{"job_class": "ShortJob", "arguments": []any{}})
	job.Set("wrapped", rubyjson.StringValue("ShortJob"))
	_, err := b.client.Push(context.Background(), job, nil)
	require.NoError(t, err)
	r := b.row(t, job.JID())
	require.NotNil(t, r)
	require.Equal(t, contract.ActiveJobWrapper, r.JobClass, "job_class is the item's class, as in Ruby")
	require.True(t, micro(testNow.Add(20*time.Second)).Equal(r.AssumeDeadAt))
}
