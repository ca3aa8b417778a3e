package durable

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/durable/internal/store"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/pgtest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// outboxTx opens a transaction on the bundle's first database: a pgx.Tx
// and a *sql.Tx on PostgreSQL (both forms Enqueue takes), a *sql.Tx on
// SQLite.
// outboxTxs gives, per kind of transaction the first database takes, a
// begin that returns the outbox's Enqueue in a new transaction, its commit
// and its rollback.
func outboxTxs(t *testing.T, b *testBundle) map[string]func() (enqueue func(*wire.Job) error, commit, rollback func()) {
	ctx := context.Background()
	out := map[string]func() (func(*wire.Job) error, func(), func()){}
	sqlOutbox, pgxOutbox := SQLOutbox(b.d), PgxOutbox(b.d)
	if path, _, ok := store.SQLitePath(b.urls[0]); ok {
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		out["sql"] = func() (func(*wire.Job) error, func(), func()) {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			return func(j *wire.Job) error { return sqlOutbox.Enqueue(ctx, tx, j) },
				func() { require.NoError(t, tx.Commit()) }, func() { require.NoError(t, tx.Rollback()) }
		}
		return out
	}
	conn, err := pgx.Connect(ctx, b.urls[0])
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	out["pgx"] = func() (func(*wire.Job) error, func(), func()) {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		return func(j *wire.Job) error { return pgxOutbox.Enqueue(ctx, tx, j) },
			func() { require.NoError(t, tx.Commit(ctx)) }, func() { require.NoError(t, tx.Rollback(ctx)) }
	}
	db, err := sql.Open("pgx", b.urls[0])
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	out["sql"] = func() (func(*wire.Job) error, func(), func()) {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		return func(j *wire.Job) error { return sqlOutbox.Enqueue(ctx, tx, j) },
			func() { require.NoError(t, tx.Commit()) }, func() { require.NoError(t, tx.Rollback()) }
	}
	return out
}

func queueJIDs(t testing.TB, b *testBundle, queue string) []string {
	t.Helper()
	raws, err := redis.ByteSlices(b.conn.Do("LRANGE", contract.QueueKey(queue), 0, -1))
	require.NoError(t, err)
	var jids []string
	for _, raw := range raws {
		j, err := wire.ParseJob(raw)
		require.NoError(t, err)
		jids = append(jids, j.JID())
	}
	slices.Sort(jids)
	return jids
}

func testRelay(t testing.TB, b *testBundle) *relay {
	r, err := newRelay(&RelayConfig{Durable: b.d, Client: b.client, Lease: time.Minute, Logger: b.log})
	require.NoError(t, err)
	return r
}

// Committed rows are pushed once, rolled-back ones never; a relay that
// died between a push and the update of its row does not make the next
// one push it again; the reconciler leaves rows to push alone.
func TestOutboxPushesCommittedOnce(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:1]})
		ctx := context.Background()
		var committed []string
		for name, begin := range outboxTxs(t, b) {
			for i := range 6 {
				enqueue, commit, rollback := begin()
				job := newJob(t, "DurableJob", name, i)
				job.SetQueue("outbox")
				require.NoError(t, enqueue(job))
				if i%2 == 0 {
					commit()
					committed = append(committed, job.JID())
				} else {
					rollback()
				}
			}
		}
		slices.Sort(committed)
		st, err := b.d.Status(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(len(committed)), st.Databases[0].ToPush)
		require.Equal(t, int64(len(committed)), st.Databases[0].Total)

		// Overdue rows to push are not the reconciler's.
		b.clk.Advance(time.Hour)
		res := b.reconcile(t, b.reconciler(t, nil))
		require.Zero(t, res.Checked)
		require.Zero(t, b.zcard(t, contract.KeyDead))

		// A relay that pushes the first row and dies before clearing it.
		s := b.d.stores[0]
		leased, err := s.OutboxLease(ctx, store.OutboxLeaseParams{Now: b.clk.Now(), Until: b.clk.Now().Add(time.Minute), Limit: 1})
		require.NoError(t, err)
		require.Len(t, leased, 1)
		r := testRelay(t, b)
		pushed, err := r.push(ctx, s, leased[0])
		require.NoError(t, err)
		require.True(t, pushed)

		// The next relay: the leased row waits for the end of its lease.
		out, err := r.runOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, len(committed)-1, out.Pushed)
		require.Zero(t, out.Duplicates)
		b.clk.Advance(2 * time.Minute)
		out, err = r.runOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, &relayResult{Duplicates: 1}, out)
		require.Equal(t, committed, queueJIDs(t, b, "outbox"))

		// The rows are ordinary durable rows now.
		st, err = b.d.Status(ctx)
		require.NoError(t, err)
		require.Zero(t, st.Databases[0].ToPush)
		for _, jid := range committed {
			row := b.row(t, jid)
			require.NotNil(t, row)
			require.Empty(t, row.LockedBy)
		}
		out, err = r.runOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, &relayResult{}, out)

		// The pushed jobs carry what the client writes at a push.
		raw, err := redis.Bytes(b.conn.Do("LINDEX", contract.QueueKey("outbox"), 0))
		require.NoError(t, err)
		j, err := wire.ParseJob(raw)
		require.NoError(t, err)
		require.True(t, j.Has("created_at") && j.Has("enqueued_at") && j.Has("retry"))
	})
}

// A job with "at" in the future goes to the schedule set; bad input is an
// error and writes nothing.
func TestOutboxScheduledAndBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{urls: []string{"sqlite:" + t.TempDir() + "/o.db"}})
	ctx := context.Background()
	begin := outboxTxs(t, b)["sql"]
	enqueue, commit, _ := begin()
	job := newJob(t, "DurableJob", 1)
	job.Set("at", rubyjson.FloatValue(contract.EpochSeconds(b.clk.Now().Add(time.Hour))))
	require.NoError(t, enqueue(job))
	bad, err := wire.NewJob("DurableJob")
	require.NoError(t, err)
	bad.Set("queue", rubyjson.FloatValue(1))
	require.Error(t, enqueue(bad))
	commit()
	out, err := testRelay(t, b).runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, out.Pushed)
	require.Equal(t, 1, b.zcard(t, contract.KeySchedule))
	row := b.row(t, job.JID())
	require.True(t, row.AssumeDeadAt.After(b.clk.Now().Add(time.Hour)), "deadline from the run time")
}

// With PostgreSQL a committed row is pushed at its commit's notification,
// not at the next poll.
func TestOutboxNotifyLatency(t *testing.T) {
	t.Parallel()
	urls := pgtest.Databases(t)
	b := setup(t, bundleOpts{urls: urls[:1]})
	b.clk.Set(time.Now())
	ctx := context.Background()
	r, err := newRelay(&RelayConfig{Durable: b.d, Client: b.client, PollInterval: time.Hour, Logger: b.log})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
	begin := outboxTxs(t, b)["pgx"]
	var worst time.Duration
	for i := range 20 {
		enqueue, commit, _ := begin()
		job := newJob(t, "DurableJob", i)
		job.SetQueue("fast")
		require.NoError(t, enqueue(job))
		start := time.Now()
		commit()
		require.Eventually(t, func() bool { return b.llen(t, "fast") == i+1 }, 10*time.Second, time.Millisecond)
		worst = max(worst, time.Since(start))
	}
	t.Logf("slowest push after commit: %v", worst)
	require.Less(t, worst, 5*time.Second, "pushed at the notification, not at the hourly poll")
}

// Adopt writes the row of a durable job pushed without one, and the job
// runs under its lock.
func TestAdoptWritesMissingRow(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:], configure: func(c *Config) { c.Adopt = true }})
		plain, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: b.pool, Clock: b.clk})
		require.NoError(t, err)
		res, err := plain.Enqueue(context.Background(), "", "DurableJob", 1)
		require.NoError(t, err)
		require.Nil(t, b.row(t, res.JID))
		held := make(chan *Row, 1)
		s := startServer(t, b, map[string]sidekiq.HandlerFunc{"DurableJob": func(ctx context.Context, job *wire.Job) error {
			held <- b.row(t, job.JID())
			return nil
		}})
		require.NoError(t, s.wait(t).err)
		row := <-held
		require.NotNil(t, row, "the row exists while the job runs")
		require.NotEmpty(t, row.LockedBy)
		require.Zero(t, b.logs.Count("error", "no row found in database"))
		require.Eventually(t, func() bool { return b.row(t, res.JID) == nil }, 10*time.Second, 10*time.Millisecond, "deleted at success")
	})
}
