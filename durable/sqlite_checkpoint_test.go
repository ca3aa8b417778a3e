package durable

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// SQLite's WAL is copied back into the database file by the background
// checkpointer, long before the writer's own automatic checkpoint (10,000
// pages) would do it inside a commit.
func TestSQLiteWALIsCheckpointedInTheBackground(t *testing.T) {
	t.Parallel()
	d, _, path := openSQLiteFile(t, "ckpt.db")
	ctx := context.Background()
	size := func() int64 {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		return fi.Size()
	}
	before := size()
	for i := range 2 * sqliteCheckpointEvery {
		require.NoError(t, d.stores[0].upsert(ctx, upsertParams{JobID: fmt.Sprint("j", i), JobClass: "C", ItemJSON: "{}",
			Queue: "q", InsertedAt: testNow, AssumeDeadAt: testNow}))
	}
	require.Eventually(t, func() bool { return size() > before }, 5*time.Second, 10*time.Millisecond,
		"the database file holds the rows (%d bytes before)", before)
}
