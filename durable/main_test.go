package durable

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/durable/internal/store"
	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/pgtest"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The PostgreSQL tests create two databases of their own (pgtest), one
// table per test inside them.

func TestMain(m *testing.M) {
	if os.Getenv(lossChildEnv) != "" {
		os.Exit(lossChild())
	}
	os.Exit(pgtest.Main(m, "gojob_durable", 2))
}

// uniqueTable names a table for one test, so tests share the databases.
func uniqueTable() string { return pgtest.UniqueTable("dj") }

// testBundle is a Durable on fresh tables, a private Redis, a client with
// the durable middleware and a fake clock.
type testBundle struct {
	d      *Durable
	urls   []string
	clk    *clocktest.Fake
	logs   *testlog.Buffer
	log    zerolog.Logger
	rs     *redistest.Server
	pool   *redis.Pool
	client *sidekiq.Client
	api    *api.API
	conn   redis.Conn
	deaths *deathRecorder
}

type bundleOpts struct {
	urls    []string
	classes map[string]time.Duration
	table   string
	// configure adjusts the Config before New.
	configure func(*Config)
}

var testNow = time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)

func setup(t testing.TB, o bundleOpts) *testBundle {
	t.Helper()
	logs := testlog.New(t)
	log := zerolog.New(logs).With().Timestamp().Logger()
	clk := clocktest.NewFake(testNow)
	if o.classes == nil {
		o.classes = map[string]time.Duration{"DurableJob": 0, "ShortJob": 20 * time.Second}
	}
	if o.table == "" {
		o.table = uniqueTable()
	}
	cfg := &Config{URLs: o.urls, Table: o.table, Classes: o.classes, Clock: clk, Logger: log, ConnectTimeout: 2 * time.Second}
	if o.configure != nil {
		o.configure(cfg)
	}
	d, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	ctx := context.Background()
	if _, err := d.Migrate(ctx); err != nil {
		// Unreachable databases in the list are expected by some tests;
		// every reachable one must be migrated.
		for _, s := range d.stores {
			if _, err := s.Migrate(ctx); err != nil {
				require.True(t, s.IsConnError(err), "migrate %s: %v", s.Name(), err)
			}
		}
	}
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Extensions: []sidekiq.Extension{d}, Pool: pool, Clock: clk})
	require.NoError(t, err)
	deaths := &deathRecorder{}
	admin, err := api.New(&api.Config{Pool: pool, Clock: clk, Client: client, DeathHandlers: []sidekiq.DeathHandler{deaths.record}})
	require.NoError(t, err)
	conn := pool.Get()
	t.Cleanup(func() { conn.Close() })
	return &testBundle{d: d, urls: o.urls, clk: clk, logs: logs, log: log, rs: rs, pool: pool, client: client, api: admin, conn: conn, deaths: deaths}
}

type deathRecorder struct {
	mu   sync.Mutex
	jobs []*wire.Job
	errs []error
}

func (r *deathRecorder) record(_ context.Context, job *wire.Job, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.jobs = append(r.jobs, job.Clone())
	r.errs = append(r.errs, err)
}

func (r *deathRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.jobs)
}

// row returns a job's row, nil when absent.
func (b *testBundle) row(t testing.TB, jid string) *Row {
	t.Helper()
	r, err := b.d.get(context.Background(), jid)
	require.NoError(t, err)
	return r
}

// rowIn returns a job's row in one database.
func (b *testBundle) rowIn(t testing.TB, i int, jid string) *store.Row {
	t.Helper()
	r, err := b.d.stores[i].Get(context.Background(), jid)
	require.NoError(t, err)
	return r
}

// insert writes a row as Amigo's insert_job (through the first database
// that accepts it).
func (b *testBundle) insert(t testing.TB, job *wire.Job, missingAt *time.Time) {
	t.Helper()
	_, err := b.d.insert(context.Background(), &insertParams{Job: job, missingAt: missingAt})
	require.NoError(t, err)
}

// newJob builds a normalized job (jid, queue, retry) without pushing it.
func newJob(t testing.TB, class string, args ...any) *wire.Job {
	t.Helper()
	j, err := wire.NewJob(class, args...)
	require.NoError(t, err)
	if j.JID() == "" {
		j.Set("jid", rubyjson.StringValue(contract.NewJID()))
	}
	if j.Queue() == "" {
		j.SetQueue("default")
	}
	return j
}

func (b *testBundle) reconciler(t testing.TB, notifier failureNotifier) *Reconciler {
	t.Helper()
	r, err := NewReconciler(&ReconcilerConfig{Durable: b.d, API: b.api, FailureNotifier: notifier})
	require.NoError(t, err)
	return r
}

func (b *testBundle) reconcile(t testing.TB, r *Reconciler) *ReconcileResult {
	t.Helper()
	res, err := r.RunOnce(context.Background())
	require.NoError(t, err)
	return res
}

func (b *testBundle) zcard(t testing.TB, key string) int {
	t.Helper()
	n, err := redis.Int(b.conn.Do("ZCARD", key))
	require.NoError(t, err)
	return n
}

func (b *testBundle) llen(t testing.TB, queue string) int {
	t.Helper()
	n, err := redis.Int(b.conn.Do("LLEN", contract.QueueKey(queue)))
	require.NoError(t, err)
	return n
}

// deadJobs returns the dead set's jobs.
func (b *testBundle) deadJobs(t testing.TB) []*wire.Job {
	t.Helper()
	vals, err := redis.ByteSlices(b.conn.Do("ZRANGE", contract.KeyDead, 0, -1))
	require.NoError(t, err)
	var out []*wire.Job
	for _, v := range vals {
		j, err := wire.ParseJob(v)
		require.NoError(t, err)
		out = append(out, j)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// get returns a job's row as the first database that has it holds it, or
// nil.
func (d *Durable) get(ctx context.Context, jid string) (*Row, error) {
	var errs []error
	for _, s := range d.stores {
		r, err := s.Get(ctx, jid)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name(), err))
			continue
		}
		if r != nil {
			return exportRow(r, s.Name()), nil
		}
	}
	return nil, errors.Join(errs...)
}

// activeJID reports whether ctx carries a durable job, and its jid.
func activeJID(ctx context.Context) (jid string, ok bool) {
	a, _ := ctx.Value(activeKey{}).(*activeJob)
	if a == nil {
		return "", false
	}
	return a.jid, true
}

// runOf returns the jobRun of the durable job ctx runs, nil when none.
func runOf(ctx context.Context) *jobRun {
	r, _ := ctx.Value(runKey{}).(*jobRun)
	return r
}
