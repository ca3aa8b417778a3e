package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A bulk push's rows get their rowids in push order, not in jid order, so
// the rows of jobs fetched one after another share table pages.
func TestSQLiteBulkPushInsertsRowsInPushOrder(t *testing.T) {
	t.Parallel()
	s, _ := openSQLiteFile(t, "order.db")
	ctx := context.Background()
	var ups []UpsertParams
	var pushed []string
	for i := range 50 {
		jid := fmt.Sprintf("j%02d", (i*37)%50) // not sorted
		pushed = append(pushed, jid)
		ups = append(ups, UpsertParams{JobID: jid, JobClass: "C", ItemJSON: "{}", Queue: "q", InsertedAt: testNow, AssumeDeadAt: testNow})
	}
	_, errs := s.UpsertMany(ctx, ups)
	for _, err := range errs {
		require.NoError(t, err)
	}
	rows, err := s.d.(*sqliteDialect).db.QueryContext(ctx, `SELECT job_id FROM `+s.table+` ORDER BY rowid`)
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
		o := testOptions(uniqueTable())
		o.OpTimeout = c.op
		s, err := Open("sqlite:"+filepath.Join(t.TempDir(), "busy.db"), o)
		require.NoError(t, err)
		var got int
		require.NoError(t, s.(*sqlStore).d.(*sqliteDialect).db.QueryRowContext(context.Background(), `PRAGMA busy_timeout`).Scan(&got))
		require.Equal(t, c.want, got, "OpTimeout %v", c.op)
		require.NoError(t, s.Close())
	}
}

// SQLite's WAL is copied back into the database file by the background
// checkpointer, long before the writer's own automatic checkpoint (10,000
// pages) would do it inside a commit.
func TestSQLiteWALIsCheckpointedInTheBackground(t *testing.T) {
	t.Parallel()
	s, path := openSQLiteFile(t, "ckpt.db")
	ctx := context.Background()
	size := func() int64 {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		return fi.Size()
	}
	before := size()
	for i := range 2 * sqliteCheckpointEvery {
		_, err := s.Upsert(ctx, UpsertParams{JobID: fmt.Sprint("j", i), JobClass: "C", ItemJSON: "{}",
			Queue: "q", InsertedAt: testNow, AssumeDeadAt: testNow})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return size() > before }, 5*time.Second, 10*time.Millisecond,
		"the database file holds the rows (%d bytes before)", before)
}
