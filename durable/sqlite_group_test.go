package durable

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A bulk push's rows get their rowids in push order, not in jid order, so
// the rows of jobs fetched one after another share table pages.
func TestSQLiteBulkPushInsertsRowsInPushOrder(t *testing.T) {
	t.Parallel()
	_, s, _ := openSQLiteFile(t, "order.db")
	ctx := context.Background()
	var ups []upsertParams
	var pushed []string
	for i := range 50 {
		jid := fmt.Sprintf("j%02d", (i*37)%50) // not sorted
		pushed = append(pushed, jid)
		ups = append(ups, upsertParams{JobID: jid, JobClass: "C", ItemJSON: "{}", Queue: "q", InsertedAt: testNow, AssumeDeadAt: testNow})
	}
	_, errs := s.upsertMany(ctx, ups)
	for _, err := range errs {
		require.NoError(t, err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT job_id FROM `+s.table+` ORDER BY rowid`)
	require.NoError(t, err)
	defer rows.Close()
	var stored []string
	for rows.Next() {
		var jid string
		require.NoError(t, rows.Scan(&jid))
		stored = append(stored, jid)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, pushed, stored)
}

// The group writes run under no context deadline, so SQLite's own wait
// for another process's lock must end within OpTimeout.
func TestSQLiteBusyTimeoutIsNoLongerThanOpTimeout(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		op   time.Duration
		want int
	}{{300 * time.Millisecond, 300}, {0, 5000}, {time.Minute, 5000}} {
		d, err := New(&Config{URLs: []string{"sqlite:" + filepath.Join(t.TempDir(), "busy.db")}, Table: uniqueTable(), OpTimeout: c.op})
		require.NoError(t, err)
		var got int
		require.NoError(t, d.stores[0].(*sqlStore).db.QueryRowContext(context.Background(), `PRAGMA busy_timeout`).Scan(&got))
		require.Equal(t, c.want, got, "OpTimeout %v", c.op)
		require.NoError(t, d.Close())
	}
}
