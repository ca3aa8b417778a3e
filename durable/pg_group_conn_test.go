package durable

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A group connection the server closed while it sat idle (a restart, an
// idle timeout, an administrator) is found dead by a ping and replaced
// before the next group is sent, so that group lands as it would through
// database/sql.
func TestGroupConnectionClosedByTheServerIsReplacedBeforeTheNextGroup(t *testing.T) {
	t.Parallel()
	urls := pgDatabases(t)
	b := setup(t, bundleOpts{urls: []string{urls[0]}})
	ctx := context.Background()
	_, err := b.client.Enqueue(ctx, "", "DurableJob", 1)
	require.NoError(t, err)

	st := b.d.stores[0].(*sqlStore)
	c := <-st.pgGroup.idle
	pid := c.PgConn().PID()
	st.pgGroup.idle <- c
	admin, err := pgx.Connect(ctx, urls[0])
	require.NoError(t, err)
	defer admin.Close(ctx)
	var terminated bool
	require.NoError(t, admin.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&terminated))
	require.True(t, terminated)

	time.Sleep(1100 * time.Millisecond) // idle for more than a second: pinged first
	res, err := b.client.Enqueue(ctx, "", "DurableJob", 2)
	require.NoError(t, err)
	require.Zero(t, b.d.pend.len(), "no write left pending")
	require.NotNil(t, b.rowIn(t, 0, res.JID), "the push's row")
	require.NotEqual(t, pid, (<-st.pgGroup.idle).PgConn().PID(), "a new connection")
}

// The group statement's arrays are written in PostgreSQL's binary format
// by gojob (pg_group_encode.go): text of any length and alphabet, times to
// the microsecond, NULLs among the missing_at values, and empty arrays for
// the kinds a group lacks, all land as the single-row statements would
// write them.
func TestGroupStatementWritesTextTimesAndNullsExactly(t *testing.T) {
	t.Parallel()
	urls := pgDatabases(t)
	b := setup(t, bundleOpts{urls: []string{urls[0]}})
	st := b.d.stores[0].(*sqlStore)
	ctx := context.Background()
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.FixedZone("x", 3600))
	missing := time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	long := strings.Repeat("é✓\"\\,{}", 5000)
	ups := []upsertParams{
		{JobID: "enc-1", JobClass: "Ünïcode::Job", ItemJSON: `{"args":["` + long + `"]}`, Queue: "q,1", InsertedAt: at, AssumeDeadAt: at.Add(time.Minute)},
		{JobID: "enc-2", JobClass: "", ItemJSON: "{}", Queue: "", InsertedAt: at, AssumeDeadAt: at, MissingAt: &missing},
		{JobID: "enc-3", JobClass: "C", ItemJSON: "{}", Queue: "q", InsertedAt: at, AssumeDeadAt: at},
	}
	created, errs := st.upsertMany(ctx, ups)
	for i := range ups {
		require.NoError(t, errs[i])
		require.True(t, created[i], ups[i].JobID)
	}
	for _, up := range ups {
		r, err := st.get(ctx, up.JobID)
		require.NoError(t, err)
		require.NotNil(t, r, up.JobID)
		require.Equal(t, up.JobClass, r.JobClass)
		require.Equal(t, up.ItemJSON, r.ItemJSON)
		require.Equal(t, up.Queue, r.Queue)
		require.True(t, micro(up.InsertedAt).Equal(r.InsertedAt), "%s inserted_at %v", up.JobID, r.InsertedAt)
		require.True(t, micro(up.AssumeDeadAt).Equal(r.AssumeDeadAt), "%s assume_dead_at %v", up.JobID, r.AssumeDeadAt)
		if up.MissingAt == nil {
			require.Nil(t, r.MissingAt, up.JobID)
		} else {
			require.NotNil(t, r.MissingAt, up.JobID)
			require.True(t, micro(*up.MissingAt).Equal(*r.MissingAt), "%s missing_at %v", up.JobID, *r.MissingAt)
		}
	}
	// A later push of the same jid updates the row: not created.
	again := ups[0]
	again.InsertedAt = at.Add(time.Second)
	created, errs = st.upsertMany(ctx, []upsertParams{again})
	require.NoError(t, errs[0])
	require.False(t, created[0])
}
