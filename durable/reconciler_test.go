package durable

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/durable/internal/store"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/pgtest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

func (b *testBundle) zadd(t testing.TB, key string, at time.Time, job *wire.Job) {
	t.Helper()
	_, err := b.conn.Do("ZADD", key, contract.Score(at), job.Bytes())
	require.NoError(t, err)
}

// filler returns n unrelated jobs' payloads.
func filler(n int, class string) []any {
	out := make([]any, 0, n)
	for i := range n {
		j, _ := wire.NewJob(class, i)
		j.Set("jid", rubyjson.StringValue(contract.NewJID()))
		j.SetQueue("default")
		out = append(out, j.Bytes())
	}
	return out
}

// Checklist item 19 (docs/durable.md#conformance-checklist).
func TestKillsExpiredMissingJobLeavesOthers(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		ctx := context.Background()
		lost := newJob(t, "DurableJob", "a", 1)
		b.insert(t, lost, ptr(testNow))
		fresh := newJob(t, "DurableJob", "b")
		b.insert(t, fresh, nil)
		b.clk.Advance(6 * time.Minute)
		// fresh is being run: lock_job(jid, 2 minutes).
		var lr lockResult
		b.d.lockJob(ctx, fresh.JID(), "h:1:n", b.clk.Now(), 2*time.Minute, &lr, &store.Op{})
		require.Empty(t, lr.failed)
		require.NotNil(t, lr.st)
		before := b.row(t, fresh.JID())

		res := b.reconcile(t, b.reconciler(t, nil))
		require.Equal(t, 1, res.Killed)
		require.Equal(t, []string{lost.JID()}, res.KilledJIDs)
		require.Nil(t, b.row(t, lost.JID()))
		require.Equal(t, before, b.row(t, fresh.JID()), "not expired: untouched")
		dead := b.deadJobs(t)
		require.Len(t, dead, 1)
		require.Equal(t, lost.JID(), dead[0].JID())
		require.Equal(t, "DurableJob", dead[0].Class())
		args, _ := dead[0].Get("args")
		require.Equal(t, `["a",1]`, string(args.Encode()))
		killedAt, ok := dead[0].Time("durable_killed_at")
		require.True(t, ok)
		require.WithinDuration(t, b.clk.Now(), killedAt, time.Millisecond)
	})
}

// Checklist item 20 (docs/durable.md#conformance-checklist).
func TestFailureNotifierInsteadOfDeathHandlers(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		job := newJob(t, "DurableJob")
		b.insert(t, job, ptr(testNow))
		b.clk.Advance(6 * time.Minute)
		var mu sync.Mutex
		var notified []*wire.Job
		res := b.reconcile(t, b.reconciler(t, func(_ context.Context, j *wire.Job) {
			mu.Lock()
			defer mu.Unlock()
			notified = append(notified, j)
		}))
		require.Equal(t, 1, res.Killed)
		require.Len(t, notified, 1)
		require.Equal(t, "DurableJob", notified[0].Class())
		require.True(t, notified[0].Has("durable_killed_at"))
		require.Equal(t, 0, b.deaths.count(), "death handlers are not called")
		require.Equal(t, 1, b.zcard(t, contract.KeyDead))
	})
}

// Checklist item 21 (docs/durable.md#conformance-checklist).
func TestDeathHandlersWithoutNotifier(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		job := newJob(t, "DurableJob")
		b.insert(t, job, ptr(testNow))
		b.clk.Advance(6 * time.Minute)
		b.reconcile(t, b.reconciler(t, nil))
		require.Equal(t, 1, b.deaths.count())
		require.Equal(t, job.JID(), b.deaths.jobs[0].JID())
		require.True(t, b.deaths.jobs[0].Has("durable_killed_at"))
		require.ErrorIs(t, b.deaths.errs[0], api.ErrKilledByAPI)
		require.Equal(t, "RuntimeError", sidekiq.ErrorClassOf(b.deaths.errs[0]))
	})
}

// Checklist item 22 (docs/durable.md#conformance-checklist).
func TestTwoStrikes(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		never := newJob(t, "DurableJob", 1)
		b.insert(t, never, nil)
		already := newJob(t, "DurableJob", 2)
		b.insert(t, already, ptr(testNow))
		b.clk.Advance(6 * time.Minute)
		now := b.clk.Now()
		r := b.reconciler(t, nil)

		res := b.reconcile(t, r)
		require.Equal(t, 1, res.Marked)
		require.Equal(t, []string{already.JID()}, res.KilledJIDs)
		row := b.row(t, never.JID())
		require.True(t, micro(now).Equal(*row.MissingAt))
		require.True(t, micro(now.Add(5*time.Minute)).Equal(row.AssumeDeadAt))

		b.clk.Advance(6 * time.Minute)
		res = b.reconcile(t, r)
		require.Equal(t, []string{never.JID()}, res.KilledJIDs)
		st, err := b.d.Status(context.Background())
		require.NoError(t, err)
		for _, db := range st.Databases {
			require.Equal(t, int64(0), db.Total)
		}
		require.Equal(t, 2, b.zcard(t, contract.KeyDead))
	})
}

// Ruby skips the whole poll once the retry or dead set holds 500 entries
// (items 23, 24) and skips queues of 500 (item 25); gojob looks jobs up by
// jid and never skips.
// Checklist items 23, 24 (docs/durable.md#conformance-checklist).
func TestLargeRetryAndDeadSetsDoNotDisable(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		conn := b.conn
		args := []any{contract.KeyRetry}
		for i, p := range filler(1500, "Other") {
			args = append(args, float64(i)+contract.EpochSeconds(testNow.Add(time.Hour)), p)
		}
		_, err := conn.Do("ZADD", args...)
		require.NoError(t, err)
		args = []any{contract.KeyDead}
		for i, p := range filler(1500, "Other") {
			args = append(args, float64(i)+contract.EpochSeconds(testNow), p)
		}
		_, err = conn.Do("ZADD", args...)
		require.NoError(t, err)

		lost := newJob(t, "DurableJob")
		b.insert(t, lost, ptr(testNow))
		retrying := newJob(t, "DurableJob")
		b.insert(t, retrying, ptr(testNow))
		b.zadd(t, contract.KeyRetry, testNow.Add(3*24*time.Hour), retrying)
		dead := newJob(t, "DurableJob")
		b.insert(t, dead, ptr(testNow))
		b.zadd(t, contract.KeyDead, testNow.Add(-time.Hour), dead)
		// Enough rows to use the streaming lookup (more than 8 wanted jids).
		var lostMany []string
		for i := range 12 {
			j := newJob(t, "DurableJob", i)
			b.insert(t, j, ptr(testNow))
			lostMany = append(lostMany, j.JID())
		}
		b.clk.Advance(6 * time.Minute)
		res := b.reconcile(t, b.reconciler(t, nil))
		require.ElementsMatch(t, append(lostMany, lost.JID()), res.KilledJIDs)
		require.Equal(t, 1, res.Retrying)
		require.Equal(t, 1, res.AlreadyDead)
		require.True(t, micro(testNow.Add(3*24*time.Hour+5*time.Minute)).Equal(b.row(t, retrying.JID()).AssumeDeadAt))
		require.Nil(t, b.row(t, dead.JID()))
		require.Equal(t, 1501, b.zcard(t, contract.KeyRetry))
	})
}

// Checklist item 25 (docs/durable.md#conformance-checklist).
func TestJobsWaitingInQueuesAreExtended(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		ctx := context.Background()
		// q1 is long (chunked reads); its job sits deep in it.
		var q1Jobs []*wire.Job
		for i := range 3 {
			j := newJob(t, "DurableJob", i)
			j.SetQueue("q1")
			_, err := b.client.Push(ctx, j, nil)
			require.NoError(t, err)
			q1Jobs = append(q1Jobs, j)
		}
		_, err := b.conn.Do("LPUSH", append([]any{contract.QueueKey("q1")}, filler(2500, "Other")...)...)
		require.NoError(t, err)
		_, err = b.conn.Do("RPUSH", append([]any{contract.QueueKey("q1")}, filler(1200, "Other")...)...)
		require.NoError(t, err)
		q2 := newJob(t, "DurableJob")
		q2.SetQueue("q2")
		_, err = b.client.Push(ctx, q2, nil)
		require.NoError(t, err)
		b.clk.Advance(6 * time.Minute)
		now := b.clk.Now()
		res := b.reconcile(t, b.reconciler(t, nil))
		require.Equal(t, 4, res.Queued)
		require.Equal(t, 0, res.Killed+res.Marked)
		for _, j := range append(q1Jobs, q2) {
			r := b.row(t, j.JID())
			require.True(t, micro(now.Add(5*time.Minute)).Equal(r.AssumeDeadAt))
			require.Nil(t, r.MissingAt)
		}
	})
}

// Checklist item 26 (docs/durable.md#conformance-checklist).
func TestJobInRetrySet(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		job := newJob(t, "DurableJob")
		b.insert(t, job, ptr(testNow))
		retryAt := testNow.Add(3 * 24 * time.Hour)
		b.zadd(t, contract.KeyRetry, retryAt, job)
		b.clk.Advance(6 * time.Minute)
		res := b.reconcile(t, b.reconciler(t, nil))
		require.Equal(t, 1, res.Retrying)
		r := b.row(t, job.JID())
		require.Nil(t, r.MissingAt)
		require.WithinDuration(t, retryAt.Add(5*time.Minute), r.AssumeDeadAt, time.Millisecond)
		require.Equal(t, 0, b.llen(t, "default"), "nothing enqueued")
	})
}

// Checklist item 27 (docs/durable.md#conformance-checklist).
func TestJobInDeadSet(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		job := newJob(t, "DurableJob")
		b.insert(t, job, nil)
		b.zadd(t, contract.KeyDead, testNow, job)
		b.clk.Advance(6 * time.Minute)
		res := b.reconcile(t, b.reconciler(t, nil))
		require.Equal(t, 1, res.AlreadyDead)
		require.Nil(t, b.row(t, job.JID()))
		require.Equal(t, 1, b.zcard(t, contract.KeyDead))
	})
}

func TestScheduledJobIsFoundInScheduleSet(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		// Pushed with perform_in: the client middleware sees "at", so the
		// row's deadline is run time + extension.
		job := newJob(t, "DurableJob")
		res, err := b.client.Push(context.Background(), job, &sidekiq.PushOpts{In: time.Hour})
		require.NoError(t, err)
		require.True(t, res.Scheduled)
		require.WithinDuration(t, testNow.Add(time.Hour+5*time.Minute), b.row(t, job.JID()).AssumeDeadAt, time.Millisecond)
		// Someone reschedules it two hours later (Web UI, API): past the
		// row's deadline it is still in the schedule set, which Ruby never
		// consults, so it is not a lost job.
		conn := b.pool.Get()
		_, err = conn.Do("ZADD", contract.KeySchedule, "XX", contract.Score(testNow.Add(3*time.Hour)), res.Payload)
		conn.Close()
		require.NoError(t, err)
		b.clk.Advance(time.Hour + 6*time.Minute)
		rec := b.reconcile(t, b.reconciler(t, nil))
		require.Equal(t, 1, rec.Scheduled)
		r := b.row(t, job.JID())
		require.Nil(t, r.MissingAt)
		require.WithinDuration(t, testNow.Add(3*time.Hour+5*time.Minute), r.AssumeDeadAt, time.Millisecond)
	})
}

// fakeProcess registers a live process whose work hash runs job (layout of
// docs/sidekiq-wire.md#process-info and #work-hash).
func (b *testBundle) fakeProcess(t testing.TB, identity string, job *wire.Job) {
	t.Helper()
	w := rubyjson.NewMap()
	w.Set("queue", rubyjson.StringValue("default"))
	w.Set("payload", rubyjson.StringValue(string(job.Bytes())))
	w.Set("run_at", rubyjson.IntValue(testNow.Unix()))
	_, err := b.conn.Do("SADD", contract.KeyProcesses, identity)
	require.NoError(t, err)
	_, err = b.conn.Do("HSET", identity, "info", `{"hostname":"h"}`, "busy", 1, "beat", contract.Score(testNow), "quiet", "false")
	require.NoError(t, err)
	_, err = b.conn.Do("HSET", identity+":work", "tid1", w.Encode())
	require.NoError(t, err)
}

func TestRunningJobIsNotKilled(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		// A job that runs past two extensions without heartbeating: Ruby
		// kills it into the dead set while it runs.
		job := newJob(t, "DurableJob")
		b.insert(t, job, ptr(testNow))
		b.fakeProcess(t, "h:1:abc", job)
		r := b.reconciler(t, nil)
		for range 3 {
			b.clk.Advance(6 * time.Minute)
			res := b.reconcile(t, r)
			require.Equal(t, 1, res.Running)
			require.Equal(t, 0, res.Killed)
		}
		require.Nil(t, b.row(t, job.JID()).MissingAt)
		require.Equal(t, 3, b.logs.Count("warn", "runs longer than its heartbeat extension"), "one warning per pass")
		// Once its process is gone (keys expired), the two strikes apply.
		_, err := b.conn.Do("DEL", "h:1:abc")
		require.NoError(t, err)
		b.clk.Advance(6 * time.Minute)
		require.Equal(t, 1, b.reconcile(t, r).Marked)
		b.clk.Advance(6 * time.Minute)
		require.Equal(t, 1, b.reconcile(t, r).Killed)
	})
}

func TestRowErrorsAffectOnlyTheirRow(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		ctx := context.Background()
		// A class this process does not know (Ruby's const_get raises and
		// aborts the poll): it gets the default extension.
		unknown := newJob(t, "Deleted::RubyJob")
		b.insert(t, unknown, nil)
		// A row whose item cannot be read.
		_, err := b.d.stores[0].Upsert(ctx, store.UpsertParams{JobID: "broken", JobClass: "DurableJob", ItemJSON: "{not json", Queue: "default",
			InsertedAt: testNow, AssumeDeadAt: testNow, MissingAt: ptr(testNow)})
		require.NoError(t, err)
		lost := newJob(t, "DurableJob")
		b.insert(t, lost, ptr(testNow))
		b.clk.Advance(6 * time.Minute)
		res, err := b.reconciler(t, nil).RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Failed)
		require.Len(t, res.Errors, 1)
		require.ErrorContains(t, res.Errors[0], "broken")
		require.Equal(t, []string{lost.JID()}, res.KilledJIDs)
		require.Equal(t, 1, res.Marked)
		require.True(t, micro(b.clk.Now().Add(5*time.Minute)).Equal(b.row(t, unknown.JID()).AssumeDeadAt))
		require.NotNil(t, b.row(t, "broken"), "left in place")
	})
}

func TestReconcilerPagesAndCoversEveryDatabase(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		table := uniqueTable()
		b := setup(t, bundleOpts{urls: urls[:], table: table})
		second := setup(t, bundleOpts{urls: []string{urls[1]}, table: table})
		var want []string
		for i := range 10 {
			j := newJob(t, "DurableJob", i)
			b.insert(t, j, ptr(testNow))
			want = append(want, j.JID())
		}
		for i := range 4 {
			j := newJob(t, "DurableJob", i)
			second.insert(t, j, ptr(testNow))
			want = append(want, j.JID())
		}
		b.clk.Advance(6 * time.Minute)
		r, err := NewReconciler(&ReconcilerConfig{Durable: b.d, API: b.api, PageSize: 3})
		require.NoError(t, err)
		res := b.reconcile(t, r)
		require.ElementsMatch(t, want, res.KilledJIDs)
		require.Len(t, res.Databases, 2)
		require.Equal(t, 10, res.Databases[0].Killed)
		require.Equal(t, 4, res.Databases[1].Killed)
	})
}

func TestUnreachableDatabaseDoesNotStopThePass(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: []string{be.Unreachable, urls[1]}})
		job := newJob(t, "DurableJob")
		b.insert(t, job, ptr(testNow))
		b.clk.Advance(6 * time.Minute)
		res, err := b.reconciler(t, nil).RunOnce(context.Background())
		require.Error(t, err)
		require.Error(t, res.Databases[0].Err)
		require.NoError(t, res.Databases[1].Err)
		require.Equal(t, []string{job.JID()}, res.KilledJIDs)
	})
}

func TestKillTrimsDeadSet(t *testing.T) {
	t.Parallel()
	urls := pgtest.Backends[1].URLs(t)
	b := setup(t, bundleOpts{urls: urls[:]})
	admin, err := api.New(&api.Config{Pool: b.pool, Clock: b.clk, DeadMaxJobs: 3})
	require.NoError(t, err)
	args := []any{contract.KeyDead}
	for i, p := range filler(5, "Other") {
		args = append(args, contract.EpochSeconds(testNow)-float64(10-i), p)
	}
	_, err = b.conn.Do("ZADD", args...)
	require.NoError(t, err)
	job := newJob(t, "DurableJob")
	b.insert(t, job, ptr(testNow))
	b.clk.Advance(6 * time.Minute)
	r, err := NewReconciler(&ReconcilerConfig{Durable: b.d, API: admin})
	require.NoError(t, err)
	require.Equal(t, 1, b.reconcile(t, r).Killed)
	// dead_max_jobs 3 keeps the newest 2, as Ruby's trim does.
	vals, err := redis.ByteSlices(b.conn.Do("ZRANGE", contract.KeyDead, 0, -1))
	require.NoError(t, err)
	require.Len(t, vals, 2)
	require.Contains(t, string(vals[1]), job.JID())
}

func TestNewReconcilerValidates(t *testing.T) {
	t.Parallel()
	_, err := NewReconciler(nil)
	require.Error(t, err)
	_, err = NewReconciler(&ReconcilerConfig{})
	require.ErrorContains(t, err, "Durable is required")
	_, err = New(&Config{})
	require.ErrorContains(t, err, "at least one database")
	_, err = New(&Config{URLs: []string{"sqlite:x.db"}, Classes: map[string]time.Duration{"A": -time.Second}})
	require.ErrorContains(t, err, "negative")
}

// The first strike records when the job was actually looked for, not when
// the pass began: a pass slowed down (here by a failure notifier taking
// four minutes) must not let the second strike come less than one
// extension after the first.
func TestStrikeTimeIsWhenTheRowIsChecked(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
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
	urls := pgtest.Backends[1].URLs(t)
	b := setup(t, bundleOpts{urls: urls[:], classes: map[string]time.Duration{allClasses: 0, "LongJob": 20 * time.Minute}})
	job := newJob(t, contract.ActiveJobWrapper, map[string]any{"job_class": "LongJob", "arguments": []any{}})
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
	urls := pgtest.Backends[1].URLs(t)
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
	require.Equal(t, 2, b.zcard(t, contract.KeyDead))
	require.Equal(t, 2, b.logs.Count("error", "death handler panicked"))
}
