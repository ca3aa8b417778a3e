package main

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
)

// The program runs its demo on a private Redis and a SQLite file: the
// durable job ran and its row is gone, the batch's three jobs ran and its
// callback once, the periodic job is in sidekiq-cron's keys.
func TestEmbeddedServerRunsEveryFeature(t *testing.T) {
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	db := filepath.Join(t.TempDir(), "embedded.db")
	out := testlog.New(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, run(ctx, rs.URL(), "sqlite:"+db, true, out), out.String())
	log := out.String()
	require.Contains(t, log, "charged account 42 1999 cents")
	require.Equal(t, 3, strings.Count(log, "imported "), log)
	require.Equal(t, 1, strings.Count(log, "import done"), log)

	conn := rs.Pool(t).Get()
	defer conn.Close()
	for _, set := range []string{"retry", "dead"} {
		n, err := redis.Int(conn.Do("ZCARD", set))
		require.NoError(t, err)
		require.Zero(t, n, set)
	}
	n, err := redis.Int(conn.Do("EXISTS", "cron_job:default:nightly-report"))
	require.NoError(t, err)
	require.Equal(t, 1, n, "the periodic job in sidekiq-cron 2.x's keys")

	sqlDB, err := sql.Open("sqlite", db)
	require.NoError(t, err)
	defer sqlDB.Close()
	var rows int
	require.NoError(t, sqlDB.QueryRow(`SELECT count(*) FROM durable_jobs`).Scan(&rows))
	require.Zero(t, rows, "the durable job's row is deleted once it succeeded")
}
