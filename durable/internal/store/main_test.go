package store

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gojob/gojob/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The PostgreSQL tests create a database of their own (pgtest), one table
// per test inside it.

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, "gojob_store", 1)) }

// uniqueTable names a table for one test, so tests share the database.
func uniqueTable() string { return pgtest.UniqueTable("st") }

var testNow = time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)

// testOptions are the options the durable package gives a store by
// default, on table.
func testOptions(table string) Options {
	return Options{Schema: "public", Table: table, ConnectTimeout: 2 * time.Second, OpTimeout: 10 * time.Second, MaxConns: 10}
}

// openStore opens a store of url on table, closed at the end of the test.
func openStore(tb testing.TB, url, table string) *sqlStore {
	tb.Helper()
	st, err := Open(url, testOptions(table))
	require.NoError(tb, err)
	tb.Cleanup(func() { st.Close() })
	return st.(*sqlStore)
}

// openTestStore opens one store of a backend on a fresh, migrated table.
func openTestStore(tb testing.TB, be pgtest.Backend) *sqlStore {
	tb.Helper()
	s := openStore(tb, be.URL(tb), uniqueTable())
	_, err := s.Migrate(context.Background())
	require.NoError(tb, err)
	return s
}

// openSQLiteFile opens and migrates a store in a SQLite file of its own
// (tb's temp dir); it returns the store and the file.
func openSQLiteFile(tb testing.TB, name string) (*sqlStore, string) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), name)
	s := openStore(tb, "sqlite:"+path, uniqueTable())
	_, err := s.Migrate(context.Background())
	require.NoError(tb, err)
	return s, path
}

// rawExec runs q on a connection of its own to url, outside any store.
func rawExec(tb testing.TB, url, q string) {
	tb.Helper()
	ctx := context.Background()
	if path, _, ok := SQLitePath(url); ok {
		db, err := sql.Open("sqlite", "file:"+path)
		require.NoError(tb, err)
		defer db.Close()
		_, err = db.ExecContext(ctx, q)
		require.NoError(tb, err)
		return
	}
	c, err := pgx.Connect(ctx, url)
	require.NoError(tb, err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, q)
	require.NoError(tb, err)
}

// upsert writes a row through the group commit.
func upsert(tb testing.TB, s Store, p UpsertParams) {
	tb.Helper()
	_, err := s.Upsert(context.Background(), p)
	require.NoError(tb, err)
}

// lock takes a lock through the group commit, as the durable server
// middleware does.
func lock(ctx context.Context, s Store, p LockParams) (bool, error) {
	op := &Op{}
	op.SetLock(p, false)
	return s.Group().Lock(ctx, op)
}

// touch is TouchMany of one row.
func touch(ctx context.Context, s Store, p TouchParams) (bool, error) {
	changed, err := s.TouchMany(ctx, []TouchParams{p})
	if err != nil {
		return false, err
	}
	return changed[0], nil
}

func ptr[T any](v T) *T { return &v }
