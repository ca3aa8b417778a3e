package durable

import (
	"context"
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
