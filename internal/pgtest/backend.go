package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

// The databases Main created for its test binary.
var created struct {
	n    int
	urls []string
	err  error // why they could not be created
}

// Main is a TestMain for the packages whose tests run against storage
// databases: it creates n PostgreSQL databases named after prefix (see
// Create), runs the tests, drops the databases, checks that no goroutine
// leaked when the tests passed, and returns the exit code.
func Main(m *testing.M, prefix string, n int) int {
	urls, drop, err := Create(prefix, n)
	created.n, created.urls, created.err = n, urls, err
	code := m.Run()
	drop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

// Databases returns the URLs of the databases Main created, failing the
// test when PostgreSQL is not available.
func Databases(t testing.TB) []string {
	t.Helper()
	if created.err != nil {
		t.Fatalf("PostgreSQL is required for this test: %v", created.err)
	}
	return created.urls
}

// Backend is a kind of storage database a suite runs against.
type Backend struct {
	Name string
	// Unreachable is a URL of that kind that cannot be connected to.
	Unreachable string
	urls        func(t testing.TB) []string
}

// URLs returns the backend's databases for a test, as many as Main
// created: the PostgreSQL ones, or SQLite files in t.TempDir().
func (b Backend) URLs(t testing.TB) []string { return b.urls(t) }

// URL returns the backend's first database for a test.
func (b Backend) URL(t testing.TB) string { return b.urls(t)[0] }

// Backends are PostgreSQL (the databases of Main) and SQLite.
var Backends = []Backend{
	{
		Name:        "postgres",
		urls:        Databases,
		Unreachable: "postgres://postgres@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=2",
	},
	{
		Name: "sqlite",
		urls: func(t testing.TB) []string {
			dir := t.TempDir()
			urls := make([]string, max(created.n, 1))
			for i := range urls {
				urls[i] = fmt.Sprintf("sqlite:%s", filepath.Join(dir, fmt.Sprintf("db%d.db", i+1)))
			}
			return urls
		},
		Unreachable: "sqlite:/nonexistent-gojob-dir/durable.db",
	},
}

// EachBackend runs f as a parallel subtest per backend.
func EachBackend(t *testing.T, f func(t *testing.T, be Backend)) {
	for _, be := range Backends {
		t.Run(be.Name, func(t *testing.T) {
			t.Parallel()
			f(t, be)
		})
	}
}

var tableSeq atomic.Int64

// UniqueTable names a table for one test, prefix_PID_N, so the tests of a
// binary share its databases.
func UniqueTable(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid()%100000, tableSeq.Add(1))
}
