package sidekiq

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// srvBundle is a server on a private redis-server, with a fake clock and a
// connection for the test's own reads and writes.
type srvBundle struct {
	srv   *Server
	pool  *redis.Pool
	redis *redistest.Server
	clk   *clocktest.Fake
	conn  redis.Conn
}

// newTestServer builds a server without a poller and with an hourly
// heartbeat, so that a test drives both itself.
func newTestServer(t testing.TB, cfg ServerConfig) *srvBundle {
	t.Helper()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	clk := clocktest.NewFake(time.Unix(1795296573, 0))
	cfg.Pool = pool
	if cfg.Clock == nil {
		cfg.Clock = clk
	}
	cfg.DisablePoller = true
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t))
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = time.Hour
	}
	s, err := NewServer(&cfg)
	require.NoError(t, err)
	conn := pool.Get()
	t.Cleanup(func() { conn.Close() })
	return &srvBundle{srv: s, pool: pool, redis: rs, clk: clk, conn: conn}
}

// start starts the server and stops it when the test ends.
func (b *srvBundle) start(t *testing.T) {
	t.Helper()
	require.NoError(t, b.srv.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b.srv.Stop(ctx)
	})
}

func (b *srvBundle) push(t *testing.T, queue, payload string) {
	t.Helper()
	_, err := b.conn.Do("LPUSH", contract.QueueKey(queue), payload)
	require.NoError(t, err)
}

// beat writes one heartbeat now.
func (b *srvBundle) beat(t *testing.T) {
	t.Helper()
	require.NoError(t, b.srv.maint.heartbeat.Beat(context.Background()))
}

// waitProcessed waits until n jobs have finished since the last flush
// (their metrics are recorded before the processed count moves).
func (b *srvBundle) waitProcessed(t *testing.T, n int64) {
	t.Helper()
	wait.For(t, "jobs processed", func() bool {
		p, _ := b.srv.proc.counters.Pending()
		return p == n
	})
}

// fetchModes are the fetch layouts the shutdown tests run under.
var fetchModes = []string{"basic", "reliable"}

// requireNothingInProgress checks that a stopped reliable server left no
// in-progress list, registry entry or reliable-fetch heartbeat.
func (b *srvBundle) requireNothingInProgress(t *testing.T) {
	t.Helper()
	for _, pattern := range []string{"working:*", "gojob-working:*", "reliable-fetcher-heartbeat-*", contract.KeyWorkingLists} {
		keys, err := redis.Strings(b.conn.Do("KEYS", pattern))
		require.NoError(t, err)
		require.Empty(t, keys, pattern)
	}
}

func zcard(t *testing.T, c redis.Conn, key string) int {
	n, err := redis.Int(c.Do("ZCARD", key))
	require.NoError(t, err)
	return n
}

func TestServerRunsJobAndCountsIt(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 2})
	got := make(chan *wire.Job, 1)
	b.srv.Handle("HardJob", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		got <- job
		return nil
	}), nil)
	b.start(t)
	b.push(t, "default", `{"retry":true,"queue":"default","args":[1,"two"],"class":"HardJob","jid":"aaaaaaaaaaaaaaaaaaaaaaaa","created_at":1795296573.1,"enqueued_at":1795296573.2}`)
	select {
	case j := <-got:
		require.Equal(t, "aaaaaaaaaaaaaaaaaaaaaaaa", j.JID())
	case <-time.After(10 * time.Second):
		t.Fatal("job did not run")
	}
	b.waitProcessed(t, 1)
	b.beat(t)
	n, _ := redis.Int(b.conn.Do("GET", "stat:processed"))
	require.Equal(t, 1, n)
	f, _ := redis.Int(b.conn.Do("GET", "stat:failed"))
	require.Zero(t, f)
}

func TestServerStartsOnce(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{})
	require.Error(t, b.srv.Stop(context.Background()), "stop before start")
	b.start(t)
	require.ErrorIs(t, b.srv.Start(context.Background()), errClosed)
}

func TestNewServerValidates(t *testing.T) {
	t.Parallel()
	_, err := NewServer(nil)
	require.Error(t, err)
	_, err = NewServer(&ServerConfig{})
	require.ErrorContains(t, err, "Pool is required")
	pool := &redis.Pool{}
	_, err = NewServer(&ServerConfig{Pool: pool, Queues: []wire.QueueWeight{{Name: ""}}})
	require.ErrorContains(t, err, "empty queue name")
	_, err = NewServer(&ServerConfig{Pool: pool, Fetch: "fast"})
	require.ErrorContains(t, err, "unknown fetch mode")
	_, err = NewServer(&ServerConfig{Pool: pool, FetchAheadHold: -time.Second})
	require.ErrorContains(t, err, "negative FetchAheadHold")
}
