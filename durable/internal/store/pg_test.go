package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/pgtest"
)

// A group connection the server closed while it sat idle (a restart, an
// idle timeout, an administrator) is found dead by a ping and replaced
// before the next group is sent, so that group lands as it would on a
// connection of its own.
func TestGroupConnectionClosedByTheServerIsReplacedBeforeTheNextGroup(t *testing.T) {
	t.Parallel()
	url := pgtest.Databases(t)[0]
	st := openStore(t, url, uniqueTable())
	ctx := context.Background()
	_, err := st.Migrate(ctx)
	require.NoError(t, err)
	row := func(jid string) UpsertParams {
		return UpsertParams{JobID: jid, JobClass: "C", ItemJSON: "{}", Queue: "q", InsertedAt: testNow, AssumeDeadAt: testNow}
	}
	upsert(t, st, row("first"))

	groupPID := func() uint32 {
		conns := st.d.(*pgDialect).group.AcquireAllIdle(ctx)
		require.Len(t, conns, 1)
		defer conns[0].Release()
		return conns[0].Conn().PgConn().PID()
	}
	pid := groupPID()
	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer admin.Close(ctx)
	var terminated bool
	require.NoError(t, admin.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&terminated))
	require.True(t, terminated)

	time.Sleep(1100 * time.Millisecond) // idle for more than a second: pinged first
	created, err := st.Upsert(ctx, row("second"))
	require.NoError(t, err, "the group landed")
	require.True(t, created)
	r, err := st.Get(ctx, "second")
	require.NoError(t, err)
	require.NotNil(t, r, "the push's row")
	require.NotEqual(t, pid, groupPID(), "a new connection")
}

// The group statement's arrays are written in PostgreSQL's binary format
// by gojob (pg_encode.go): text of any length and alphabet, times to
// the microsecond, NULLs among the missing_at values, and empty arrays for
// the kinds a group lacks, all land as the single-row statements would
// write them.
func TestGroupStatementWritesTextTimesAndNullsExactly(t *testing.T) {
	t.Parallel()
	st := openTestStore(t, pgtest.Backends[0])
	ctx := context.Background()
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.FixedZone("x", 3600))
	missing := time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	long := strings.Repeat("é✓\"\\,{}", 5000)
	ups := []UpsertParams{
		{JobID: "enc-1", JobClass: "Ünïcode::Job", ItemJSON: `{"args":["` + long + `"]}`, Queue: "q,1", InsertedAt: at, AssumeDeadAt: at.Add(time.Minute)},
		{JobID: "enc-2", JobClass: "", ItemJSON: "{}", Queue: "", InsertedAt: at, AssumeDeadAt: at, MissingAt: &missing},
		{JobID: "enc-3", JobClass: "C", ItemJSON: "{}", Queue: "q", InsertedAt: at, AssumeDeadAt: at},
	}
	created, errs := st.UpsertMany(ctx, ups)
	for i := range ups {
		require.NoError(t, errs[i])
		require.True(t, created[i], ups[i].JobID)
	}
	for _, up := range ups {
		r, err := st.Get(ctx, up.JobID)
		require.NoError(t, err)
		require.NotNil(t, r, up.JobID)
		require.Equal(t, up.JobClass, r.JobClass)
		require.Equal(t, up.ItemJSON, r.ItemJSON)
		require.Equal(t, up.Queue, r.Queue)
		require.True(t, Micro(up.InsertedAt).Equal(r.InsertedAt), "%s inserted_at %v", up.JobID, r.InsertedAt)
		require.True(t, Micro(up.AssumeDeadAt).Equal(r.AssumeDeadAt), "%s assume_dead_at %v", up.JobID, r.AssumeDeadAt)
		if up.MissingAt == nil {
			require.Nil(t, r.MissingAt, up.JobID)
		} else {
			require.NotNil(t, r.MissingAt, up.JobID)
			require.True(t, Micro(*up.MissingAt).Equal(*r.MissingAt), "%s missing_at %v", up.JobID, *r.MissingAt)
		}
	}
	// A later push of the same jid updates the row: not created.
	again := ups[0]
	again.InsertedAt = at.Add(time.Second)
	created, errs = st.UpsertMany(ctx, []UpsertParams{again})
	require.NoError(t, errs[0])
	require.False(t, created[0])
}

// PostgreSQL's group statement writes a push's rows in push order, not
// sorted by jid, so it can deadlock with another statement writing the
// same rows in the other order. PostgreSQL then aborts one of them with a
// deadlock error, an SQL error: a group it aborts is applied op by op, and
// every write lands.
func TestGroupDeadlockedByAnotherStatementIsAppliedOpByOp(t *testing.T) {
	t.Parallel()
	url := pgtest.Databases(t)[0]
	// PostgreSQL looks for a deadlock once per wait, deadlock_timeout after
	// it began: the store's pgtest.Backends look 3 s after the group starts
	// waiting, by when the other transaction waits too.
	st := openStore(t, url+"&deadlock_timeout=3s", uniqueTable())
	ctx := context.Background()
	_, err := st.Migrate(ctx)
	require.NoError(t, err)
	t0 := time.Now()
	row := func(jid, item string, at time.Time) UpsertParams {
		return UpsertParams{JobID: jid, JobClass: "C", ItemJSON: item, Queue: "q", InsertedAt: at, AssumeDeadAt: at.Add(time.Hour)}
	}
	// Push order "dl-2", "dl-1": sorted by jid the group would take dl-1
	// first, like the other transaction, and could not deadlock.
	_, errs := st.UpsertMany(ctx, []UpsertParams{row("dl-2", `{"v":0}`, t0), row("dl-1", `{"v":0}`, t0)})
	require.NoError(t, errors.Join(errs...))

	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer admin.Close(ctx)
	var deadlocksBefore int64
	require.NoError(t, admin.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&deadlocksBefore))
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	// The group's backend finds the deadlock first and aborts the group,
	// not this transaction.
	_, err = tx.Exec(ctx, `SET LOCAL deadlock_timeout = '60s'`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE `+st.table+` SET queue = 'tx' WHERE job_id = 'dl-1'`)
	require.NoError(t, err)

	type answer struct {
		created []bool
		errs    []error
	}
	done := make(chan answer, 1)
	t1 := t0.Add(time.Second)
	go func() {
		created, errs := st.UpsertMany(ctx, []UpsertParams{row("dl-2", `{"v":1}`, t1), row("dl-1", `{"v":1}`, t1)})
		done <- answer{created, errs}
	}()
	// Once the group holds dl-2 and waits for dl-1, take dl-2 as well.
	watch, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer watch.Close(ctx)
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'WITH%' AND strpos(query, $1) > 0`,
			st.table).Scan(&waiting))
		return waiting == 1
	}, 10*time.Second, 5*time.Millisecond)
	_, err = tx.Exec(ctx, `UPDATE `+st.table+` SET queue = 'tx' WHERE job_id = 'dl-2'`)
	require.NoError(t, err, "the group, not this transaction, is aborted")
	require.NoError(t, tx.Commit(ctx))

	a := <-done
	require.NoError(t, errors.Join(a.errs...))
	for _, jid := range []string{"dl-1", "dl-2"} {
		r, err := st.Get(ctx, jid)
		require.NoError(t, err)
		require.Equal(t, `{"v":1}`, r.ItemJSON, "%s: the push was applied", jid)
		if jid == "dl-1" {
			// The retried upsert of dl-1 waited for the transaction, which
			// held dl-1 until it committed.
			require.Equal(t, "q", r.Queue, "%s: the push landed after the transaction", jid)
		} else {
			// dl-2's retried upsert and the transaction's update of dl-2
			// both wait for the aborted group; PostgreSQL may wake either
			// first, and both orders are correct.
			require.Contains(t, []string{"q", "tx"}, r.Queue, jid)
		}
	}
	var deadlocksAfter int64
	require.NoError(t, admin.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&deadlocksAfter))
	require.Greater(t, deadlocksAfter, deadlocksBefore, "PostgreSQL reported a deadlock")
}

// The delete that replaced a job's lock (DeleteInsteadOfLock) removes the
// row whatever its lock, in a group with locked deletes and locks.
func TestPostgresDeleteInPlaceOfTheLockRemovesTheRowWhateverItsLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, table := pgtest.Backends[0].URL(t), uniqueTable()
	setup := openStore(t, url, table)
	_, err := setup.Migrate(ctx)
	require.NoError(t, err)
	for _, jid := range []string{"free", "held", "locked"} {
		upsert(t, setup, UpsertParams{JobID: jid, JobClass: "K", ItemJSON: `{}`, Queue: "q", InsertedAt: testNow, AssumeDeadAt: testNow.Add(time.Minute)})
	}
	for _, jid := range []string{"held", "locked"} {
		found, err := lock(ctx, setup, LockParams{JobID: jid, LockedBy: "other", LockedAt: testNow, AssumeDeadAt: testNow.Add(time.Hour)})
		require.NoError(t, err)
		require.True(t, found)
	}
	free, held, missing := &Op{}, &Op{}, &Op{}
	free.SetLock(LockParams{JobID: "free", LockedBy: "me", LockedAt: testNow}, true)
	held.SetLock(LockParams{JobID: "held", LockedBy: "me", LockedAt: testNow}, true)
	missing.SetLock(LockParams{JobID: "missing", LockedBy: "me", LockedAt: testNow}, true)
	locked := &Op{}
	locked.SetDelete(DeleteParams{JobID: "locked", LockedBy: "me", LockedAt: testNow}) // not its lock: kept
	// Queued in a store whose writer has not started yet: no group takes
	// them before they are replaced.
	s := openStore(t, url, table)
	s.gc.mu.Lock()
	for _, op := range []*Op{free, held, missing, locked} {
		s.gc.queue = append(s.gc.queue, op)
		s.gc.countQueued(op, 1)
		if s.gc.pending == nil {
			s.gc.pending = &gcWait{done: make(chan struct{})}
		}
		op.group.Store(s.gc.pending)
	}
	s.gc.mu.Unlock()
	for _, op := range []*Op{free, held, missing} {
		require.True(t, s.Group().DeleteInsteadOfLock(op, nil), op.JID())
	}
	require.NoError(t, s.gc.enqueue()) // starts the writer
	for jid, want := range map[*Op]bool{free: true, held: true, missing: false, locked: false} {
		ok, err := s.Group().Wait(ctx, jid)
		require.NoError(t, err)
		require.Equal(t, want, ok, jid.JID())
	}
	for jid, want := range map[string]bool{"free": false, "held": false, "locked": true} {
		r, err := s.Get(ctx, jid)
		require.NoError(t, err)
		require.Equal(t, want, r != nil, jid)
	}
}
