package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gojob/gojob/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The PostgreSQL tests create a database of their own (pgtest), one table
// per test inside it.

var pg struct {
	url string // the test database
	err error  // why it could not be created
}

func TestMain(m *testing.M) {
	urls, drop, err := pgtest.Create("gojob_store", 1)
	pg.err = err
	if len(urls) == 1 {
		pg.url = urls[0]
	}
	code := m.Run()
	drop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// pgDatabase returns the test database's URL, failing the test when
// PostgreSQL is not available.
func pgDatabase(t testing.TB) string {
	t.Helper()
	if pg.err != nil {
		t.Fatalf("durable: PostgreSQL is required for this test: %v", pg.err)
	}
	return pg.url
}

var tableSeq atomic.Int64

// uniqueTable names a table for one test, so tests share the database.
func uniqueTable() string {
	return fmt.Sprintf("st_%d_%d", os.Getpid()%100000, tableSeq.Add(1))
}

// backend is a kind of storage database the suites run against.
type backend struct {
	name string
	// url returns a database of that kind for a test.
	url func(t testing.TB) string
	// unreachable is a URL of that kind that cannot be connected to.
	unreachable string
}

var backends = []backend{
	{
		name:        "postgres",
		url:         pgDatabase,
		unreachable: "postgres://postgres@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=2",
	},
	{
		name:        "sqlite",
		url:         func(t testing.TB) string { return "sqlite:" + filepath.Join(t.TempDir(), "one.db") },
		unreachable: "sqlite:/nonexistent-gojob-dir/durable.db",
	},
}

// eachBackend runs f as a parallel subtest per backend.
func eachBackend(t *testing.T, f func(t *testing.T, be backend)) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			f(t, be)
		})
	}
}

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
func openTestStore(tb testing.TB, be backend) *sqlStore {
	tb.Helper()
	s := openStore(tb, be.url(tb), uniqueTable())
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
