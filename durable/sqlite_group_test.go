package durable

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A bulk push's rows get their rowids in push order, not in jid order, so
// the rows of jobs fetched one after another share table pages.
func TestSQLiteBulkPushInsertsRowsInPushOrder(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "order.db")
	d, err := New(&Config{URLs: []string{"sqlite:" + path}, Table: uniqueTable()})
	require.NoError(t, err)
	defer d.Close()
	ctx := context.Background()
	_, err = d.Migrate(ctx)
	require.NoError(t, err)
	s := d.stores[0].(*sqlStore)
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
