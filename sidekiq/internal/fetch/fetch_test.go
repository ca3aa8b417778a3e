package fetch

import (
	"context"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/internal/resp"
	"github.com/gojob/gojob/sidekiq/wire"
)

// fetchBundle is a fetch Config on a private redis-server whose Process
// records each job it is given.
type fetchBundle struct {
	rs    *redistest.Server
	pool  *redis.Pool
	conn  redis.Conn
	cfg   *Config
	quiet chan struct{}

	mu   sync.Mutex
	runs map[string]int // raw payload → times processed
	// hook, when set, runs inside Process.
	hook func(u Unit)
	// took, when set, is what Process reports a job took (the pace that
	// fetching ahead follows, ahead.go) in place of the time it did take:
	// a loaded machine's pauses then change no test's pace.
	took func(u Unit) time.Duration
}

func newFetchBundle(t *testing.T, rs *redistest.Server, mod func(*Config)) *fetchBundle {
	t.Helper()
	if rs == nil {
		rs = redistest.Start(t)
	}
	pool := rs.Pool(t)
	conn := pool.Get()
	t.Cleanup(func() { conn.Close() })
	writes, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b := &fetchBundle{rs: rs, pool: pool, conn: conn, quiet: make(chan struct{}), runs: map[string]int{}}
	log := zerolog.New(zerolog.NewTestWriter(t))
	outage := &redisx.OutageLog{Log: &log}
	b.cfg = &Config{
		Pool: pool,
		// Corkable, as sidekiq.Dialer's connections are: the rounds are
		// then written as in production, one write each.
		Dial: func(ctx context.Context) (redis.Conn, error) {
			return resp.DialCorkable(ctx, 0, (&net.Dialer{}).DialContext, func(ctx context.Context, opts ...redis.DialOption) (redis.Conn, error) {
				return redis.DialContext(ctx, "unix", rs.Socket, opts...)
			})
		},
		Order:       NewOrder([]wire.QueueWeight{{Name: "default"}}, wire.Version6),
		Concurrency: 4,
		Pipeline:    DefaultPipeline,
		Quiet:       b.quiet,
		Process: func(_ int, u Unit) time.Duration {
			start := time.Now()
			b.mu.Lock()
			b.runs[string(u.Raw)]++
			hook, took := b.hook, b.took
			b.mu.Unlock()
			if hook != nil {
				hook(u)
			}
			if took != nil {
				return took(u)
			}
			return time.Since(start)
		},
		Writes: &redisx.Retrier{Pool: pool, Ctx: writes, Outage: outage},
		Outage: outage,
		Logger: log,
	}
	if mod != nil {
		mod(b.cfg)
	}
	return b
}

// start starts f and, when the test ends, quiets it and waits for it.
func (b *fetchBundle) start(t *testing.T, f Fetcher) {
	t.Helper()
	f.Start()
	t.Cleanup(func() {
		b.quietNow()
		f.Wait()
	})
}

func (b *fetchBundle) quietNow() {
	select {
	case <-b.quiet:
	default:
		close(b.quiet)
	}
}

func (b *fetchBundle) processed() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.runs {
		n += c
	}
	return n
}

func (b *fetchBundle) queue(t *testing.T, name string) []string {
	t.Helper()
	vals, err := redis.Strings(b.conn.Do("LRANGE", contract.QueueKey(name), 0, -1))
	require.NoError(t, err)
	return vals
}

// Requeue gives unfinished jobs back with one RPUSH per queue, the last
// given popped first.
func TestRequeuePushesBackOnePerQueue(t *testing.T) {
	t.Parallel()
	b := newFetchBundle(t, nil, nil)
	mon := b.rs.StartMonitor(t)
	f := NewBRPOP(b.cfg)
	require.NoError(t, f.Requeue([]Unit{{Queue: "a", Raw: []byte("a1")}, {Queue: "b", Raw: []byte("b1")}, {Queue: "a", Raw: []byte("a2")}}))
	require.Equal(t, []string{`"RPUSH" "queue:a" "a1" "a2"`, `"RPUSH" "queue:b" "b1"`}, mon.Lines(t))
	require.Equal(t, []string{"a1", "a2"}, b.queue(t, "a"))
	require.NoError(t, f.Requeue(nil))
}

// Thread ids are distinct and as long as Ruby's: the pid's length in base
// 36 (3 or 4 characters for the pids of a Linux host below 1,679,616).
func TestTIDsAreDistinctAndRubySized(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	width := len(strconv.FormatInt(int64(os.Getpid()), 36))
	for i := range 100 {
		tid := TIDFor(i)
		require.Regexp(t, `^[0-9a-z]+$`, tid)
		require.InDelta(t, width, len(tid), 1, tid)
		require.False(t, seen[tid], tid)
		seen[tid] = true
	}
}
