package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/pgtest"
)

// TestStoreSuite is the conformance suite every store must pass.
func TestStoreSuite(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		ctx := context.Background()
		t0 := testNow

		t.Run("upsert_and_get", func(t *testing.T) {
			t.Parallel()
			s := openTestStore(t, be)
			upsert(t, s, UpsertParams{JobID: "j1", JobClass: "C", ItemJSON: `{"class":"C"}`, Queue: "q", InsertedAt: t0, AssumeDeadAt: t0.Add(time.Minute)})
			r, err := s.Get(ctx, "j1")
			require.NoError(t, err)
			require.Equal(t, "C", r.JobClass)
			require.Equal(t, `{"class":"C"}`, r.ItemJSON)
			require.Equal(t, "q", r.Queue)
			require.True(t, Micro(t0).Equal(r.InsertedAt))
			require.True(t, Micro(t0.Add(time.Minute)).Equal(r.AssumeDeadAt), "%v", r.AssumeDeadAt)
			require.Nil(t, r.LockedBy)
			require.Nil(t, r.LockedAt)
			require.Nil(t, r.MissingAt)
			none, err := s.Get(ctx, "nope")
			require.NoError(t, err)
			require.Nil(t, none)

			// A second push of the jid refreshes the row and clears lock and strike.
			ok, err := lock(ctx, s, LockParams{JobID: "j1", LockedBy: "host:1:abc", LockedAt: t0, AssumeDeadAt: t0.Add(time.Hour)})
			require.NoError(t, err)
			require.True(t, ok)
			upsert(t, s, UpsertParams{JobID: "j1", JobClass: "C", ItemJSON: `{"v":2}`, Queue: "q2", InsertedAt: t0.Add(time.Hour), AssumeDeadAt: t0.Add(2 * time.Minute)})
			r, err = s.Get(ctx, "j1")
			require.NoError(t, err)
			require.Equal(t, `{"v":2}`, r.ItemJSON)
			require.Equal(t, "q2", r.Queue)
			require.True(t, Micro(t0).Equal(r.InsertedAt), "inserted_at is kept")
			require.True(t, Micro(t0.Add(2*time.Minute)).Equal(r.AssumeDeadAt))
			require.Nil(t, r.LockedBy)
			require.Nil(t, r.LockedAt)
		})

		t.Run("lock_unlock_delete", func(t *testing.T) {
			t.Parallel()
			s := openTestStore(t, be)
			ok, err := lock(ctx, s, LockParams{JobID: "absent", LockedBy: "x", LockedAt: t0, AssumeDeadAt: t0})
			require.NoError(t, err)
			require.False(t, ok)
			upsert(t, s, UpsertParams{JobID: "j", JobClass: "C", ItemJSON: "{}", Queue: "q", InsertedAt: t0, AssumeDeadAt: t0, MissingAt: &t0})
			lockedAt := t0.Add(123456789 * time.Nanosecond) // sub-microsecond digits are dropped consistently
			ok, err = lock(ctx, s, LockParams{JobID: "j", LockedBy: "h:1:n", LockedAt: lockedAt, AssumeDeadAt: lockedAt.Add(time.Minute)})
			require.NoError(t, err)
			require.True(t, ok)
			r, _ := s.Get(ctx, "j")
			require.Equal(t, "h:1:n", *r.LockedBy)
			require.True(t, Micro(lockedAt).Equal(*r.LockedAt))
			require.Nil(t, r.MissingAt, "a lock clears the strike")

			// Another lock (other identity) does not match.
			ok, err = s.Unlock(ctx, UnlockParams{JobID: "j", LockedBy: "other", LockedAt: lockedAt, AssumeDeadAt: t0, ItemJSON: "{}"})
			require.NoError(t, err)
			require.False(t, ok)
			ok, err = s.DeleteLocked(ctx, DeleteParams{JobID: "j", LockedBy: "h:1:n", LockedAt: lockedAt.Add(time.Second)})
			require.NoError(t, err)
			require.False(t, ok)

			ok, err = s.Unlock(ctx, UnlockParams{JobID: "j", LockedBy: "h:1:n", LockedAt: lockedAt, AssumeDeadAt: t0.Add(time.Hour), ItemJSON: `{"error_class":"E"}`})
			require.NoError(t, err)
			require.True(t, ok)
			r, _ = s.Get(ctx, "j")
			require.Nil(t, r.LockedBy)
			require.Nil(t, r.LockedAt)
			require.Equal(t, `{"error_class":"E"}`, r.ItemJSON)
			require.True(t, Micro(t0.Add(time.Hour)).Equal(r.AssumeDeadAt))

			ok, err = lock(ctx, s, LockParams{JobID: "j", LockedBy: "h:1:n", LockedAt: lockedAt, AssumeDeadAt: t0})
			require.NoError(t, err)
			require.True(t, ok)
			ok, err = s.DeleteLocked(ctx, DeleteParams{JobID: "j", LockedBy: "h:1:n", LockedAt: lockedAt})
			require.NoError(t, err)
			require.True(t, ok)
			r, _ = s.Get(ctx, "j")
			require.Nil(t, r)
		})

		t.Run("heartbeat_and_delete", func(t *testing.T) {
			t.Parallel()
			s := openTestStore(t, be)
			ok, err := s.Heartbeat(ctx, HeartbeatParams{JobID: "j", AssumeDeadAt: t0})
			require.NoError(t, err)
			require.False(t, ok)
			upsert(t, s, UpsertParams{JobID: "j", JobClass: "C", ItemJSON: "{}", Queue: "q", InsertedAt: t0, AssumeDeadAt: t0})
			ok, err = s.Heartbeat(ctx, HeartbeatParams{JobID: "j", AssumeDeadAt: t0.Add(time.Hour)})
			require.NoError(t, err)
			require.True(t, ok)
			r, _ := s.Get(ctx, "j")
			require.True(t, Micro(t0.Add(time.Hour)).Equal(r.AssumeDeadAt))
			ok, err = s.DeleteJob(ctx, "j")
			require.NoError(t, err)
			require.True(t, ok)
			ok, err = s.DeleteJob(ctx, "j")
			require.NoError(t, err)
			require.False(t, ok)
		})

		t.Run("list_due_pages", func(t *testing.T) {
			t.Parallel()
			s := openTestStore(t, be)
			// 7 due rows, two pairs with equal deadlines, and 2 not due.
			deadlines := []time.Duration{-5, -4, -4, -3, -2, -2, 0, 1, 2}
			for i, dd := range deadlines {
				upsert(t, s, UpsertParams{JobID: fmt.Sprintf("j%d", i), JobClass: "C", ItemJSON: "{}", Queue: "q",
					InsertedAt: t0, AssumeDeadAt: t0.Add(dd * time.Minute)})
			}
			// Pages of 2 end between the rows of each pair.
			for limit := 1; limit <= 4; limit++ {
				var got []string
				var after *Row
				for {
					page, err := s.ListDue(ctx, ListDueParams{Now: t0, Limit: limit, After: after})
					require.NoError(t, err)
					for _, r := range page {
						got = append(got, r.JobID)
					}
					if len(page) < limit {
						break
					}
					after = page[len(page)-1]
				}
				require.Equal(t, []string{"j0", "j1", "j2", "j3", "j4", "j5", "j6"}, got, "pages of %d", limit)
			}
		})

		t.Run("touch_and_claim_compare_and_set", func(t *testing.T) {
			t.Parallel()
			s := openTestStore(t, be)
			read := t0.Add(-time.Minute + 987*time.Microsecond)
			upsert(t, s, UpsertParams{JobID: "j", JobClass: "C", ItemJSON: "{}", Queue: "q", InsertedAt: t0, AssumeDeadAt: read})
			rows, err := s.ListDue(ctx, ListDueParams{Now: t0, Limit: 10})
			require.NoError(t, err)
			require.Len(t, rows, 1)
			seen := rows[0].AssumeDeadAt

			ok, err := touch(ctx, s, TouchParams{JobID: "j", Expect: seen.Add(time.Microsecond), AssumeDeadAt: t0.Add(time.Hour)})
			require.NoError(t, err)
			require.False(t, ok, "a stale read changes nothing")
			ok, err = touch(ctx, s, TouchParams{JobID: "j", Expect: seen, AssumeDeadAt: t0.Add(time.Hour), MissingAt: &t0})
			require.NoError(t, err)
			require.True(t, ok)
			r, _ := s.Get(ctx, "j")
			require.True(t, Micro(t0).Equal(*r.MissingAt))
			ok, err = touch(ctx, s, TouchParams{JobID: "j", Expect: t0.Add(time.Hour), AssumeDeadAt: t0.Add(2 * time.Hour)})
			require.NoError(t, err)
			require.True(t, ok)
			r, _ = s.Get(ctx, "j")
			require.Nil(t, r.MissingAt, "touch without MissingAt clears it")

			ok, err = s.Claim(ctx, ClaimParams{JobID: "j", Expect: t0.Add(time.Hour)})
			require.NoError(t, err)
			require.False(t, ok)
			ok, err = s.Claim(ctx, ClaimParams{JobID: "j", Expect: t0.Add(2 * time.Hour)})
			require.NoError(t, err)
			require.True(t, ok)
			require.NoError(t, s.Restore(ctx, r))
			back, _ := s.Get(ctx, "j")
			require.Equal(t, r, back)
			// restore never overwrites a row pushed meanwhile.
			upsert(t, s, UpsertParams{JobID: "k", JobClass: "C", ItemJSON: `{"new":true}`, Queue: "q", InsertedAt: t0, AssumeDeadAt: t0})
			old := *back
			old.JobID = "k"
			require.NoError(t, s.Restore(ctx, &old))
			k, _ := s.Get(ctx, "k")
			require.Equal(t, `{"new":true}`, k.ItemJSON)
		})

		t.Run("status", func(t *testing.T) {
			t.Parallel()
			s := openTestStore(t, be)
			st, err := s.Status(ctx, t0)
			require.NoError(t, err)
			require.Equal(t, int64(0), st.Total)
			require.Nil(t, st.NextDue)
			add := func(id string, dead time.Duration, missing bool) {
				p := UpsertParams{JobID: id, JobClass: "C", ItemJSON: "{}", Queue: "q", InsertedAt: t0, AssumeDeadAt: t0.Add(dead)}
				if missing {
					p.MissingAt = &t0
				}
				upsert(t, s, p)
			}
			add("waiting1", time.Hour, false)
			add("waiting2", time.Minute, false)
			add("locked", time.Minute, false)
			_, err = lock(ctx, s, LockParams{JobID: "locked", LockedBy: "h", LockedAt: t0, AssumeDeadAt: t0.Add(time.Minute)})
			require.NoError(t, err)
			add("overdue", -time.Minute, false)
			add("missing1", time.Minute, true)
			add("missing2", -time.Minute, true)
			st, err = s.Status(ctx, t0)
			require.NoError(t, err)
			require.Equal(t, be.Name, s.Kind())
			require.Equal(t, Counts{Total: 6, Locked: 1, Waiting: 2, Missing: 2, Overdue: 1,
				NextDue: ptr(Micro(t0.Add(-time.Minute)))}, *st)
		})

		t.Run("migrate_adds_missing_at_and_is_idempotent", func(t *testing.T) {
			t.Parallel()
			url := be.URL(t)
			table := uniqueTable()
			// The table as Amigo created it before missing_at existed.
			old := `CREATE TABLE "` + table + `" ("job_id" text NOT NULL UNIQUE, "job_class" text NOT NULL, "job_item_json" text NOT NULL, "queue" text NOT NULL, "inserted_at" timestamptz DEFAULT now() NOT NULL, "assume_dead_at" timestamptz NOT NULL, "locked_by" text, "locked_at" timestamptz)`
			if be.Name == "sqlite" {
				old = `CREATE TABLE "` + table + `" ("job_id" text NOT NULL UNIQUE, "job_class" text NOT NULL, "job_item_json" text NOT NULL, "queue" text NOT NULL, "inserted_at" text NOT NULL, "assume_dead_at" text NOT NULL, "locked_by" text, "locked_at" text)`
			}
			rawExec(t, url, old)
			s := openStore(t, url, table)
			res, err := s.Migrate(ctx)
			require.NoError(t, err)
			require.Equal(t, MigrateOutcome{AddedMissingAt: true, AddedIndex: true}, *res)
			res, err = s.Migrate(ctx)
			require.NoError(t, err)
			require.Equal(t, MigrateOutcome{}, *res)
			upsert(t, s, UpsertParams{JobID: "j", JobClass: "C", ItemJSON: "{}", Queue: "q", InsertedAt: t0, AssumeDeadAt: t0, MissingAt: &t0})
			r, err := s.Get(ctx, "j")
			require.NoError(t, err)
			require.NotNil(t, r.MissingAt)

			fresh := openStore(t, url, uniqueTable())
			res, err = fresh.Migrate(ctx)
			require.NoError(t, err)
			require.True(t, res.Created)
		})

		t.Run("unreachable_is_a_connection_error", func(t *testing.T) {
			t.Parallel()
			s, err := Open(be.Unreachable, testOptions(uniqueTable()))
			require.NoError(t, err, "opening is lazy")
			defer s.Close()
			_, err = s.Upsert(ctx, UpsertParams{JobID: "j", JobClass: "C", ItemJSON: "{}", Queue: "q", InsertedAt: t0, AssumeDeadAt: t0})
			require.Error(t, err)
			require.True(t, s.IsConnError(err), "%T %v", err, err)
		})

		t.Run("sql_error_is_not_a_connection_error", func(t *testing.T) {
			t.Parallel()
			s := openStore(t, be.URL(t), "no_such_table_"+uniqueTable())
			_, err := s.Upsert(ctx, UpsertParams{JobID: "j", JobClass: "C", ItemJSON: "{}", Queue: "q", InsertedAt: t0, AssumeDeadAt: t0})
			require.Error(t, err)
			require.False(t, s.IsConnError(err), "%v", err)
		})
	})
}

// TestPostgresTableMatchesAmigo checks the columns, types, nullability,
// default and unique constraint Amigo's Sequel DDL produces, in a
// non-default schema.
func TestPostgresTableMatchesAmigo(t *testing.T) {
	t.Parallel()
	url := pgtest.Databases(t)[0]
	schema := "s_" + uniqueTable()
	table := "durable_jobs"
	o := testOptions(table)
	o.Schema = schema
	s, err := Open(url, o)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	_, err = s.Migrate(ctx)
	require.NoError(t, err)
	db, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer db.Close(ctx)
	rows, err := db.Query(ctx, `SELECT column_name, data_type, is_nullable, COALESCE(column_default, '')
FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`, schema, table)
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var name, typ, null, def string
		require.NoError(t, rows.Scan(&name, &typ, &null, &def))
		got = append(got, fmt.Sprintf("%s %s %s %s", name, typ, null, def))
	}
	rows.Close()
	require.NoError(t, rows.Err())
	require.Equal(t, []string{
		"job_id text NO ",
		"job_class text NO ",
		"job_item_json text NO ",
		"queue text NO ",
		"inserted_at timestamp with time zone NO now()",
		"assume_dead_at timestamp with time zone NO ",
		"locked_by text YES ",
		"locked_at timestamp with time zone YES ",
		"missing_at timestamp with time zone YES ",
	}, got)
	var constraint string
	require.NoError(t, db.QueryRow(ctx, `SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
JOIN pg_class t ON t.oid = c.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = $1 AND t.relname = $2 AND c.conname = $3`, schema, table, table+"_job_id_key").Scan(&constraint))
	require.Equal(t, "UNIQUE (job_id)", constraint)
	var indexes []string
	rows, err = db.Query(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = $2 ORDER BY indexname`, schema, table)
	require.NoError(t, err)
	for rows.Next() {
		var def string
		require.NoError(t, rows.Scan(&def))
		indexes = append(indexes, def)
	}
	require.NoError(t, rows.Err())
	// Amigo's unique index, and the reconciler's on (assume_dead_at,
	// job_id) and the outbox's partial one that gojob adds
	// (DueIndexName and outboxIndexName say why).
	require.Len(t, indexes, 3)
	require.Contains(t, indexes[0], "(assume_dead_at, job_id)")
	require.Contains(t, indexes[1], "UNIQUE INDEX")
	require.Contains(t, indexes[2], "WHERE (locked_by = '"+OutboxMark+"'::text)")
}

func TestStoreUpsertReportsCreation(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		s := openTestStore(t, be)
		ctx := context.Background()
		p := UpsertParams{JobID: "j", JobClass: "C", ItemJSON: "{}", Queue: "q", InsertedAt: testNow, AssumeDeadAt: testNow}
		created, err := s.Upsert(ctx, p)
		require.NoError(t, err)
		require.True(t, created)
		p.InsertedAt = testNow.Add(time.Minute)
		created, err = s.Upsert(ctx, p)
		require.NoError(t, err)
		require.False(t, created, "a refresh of the row")
	})
}
