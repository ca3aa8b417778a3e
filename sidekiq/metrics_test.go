package sidekiq

// The job metrics of 7.0+ as the server records and flushes them; the key
// formats and the recorder are tested in internal/maintenance.

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
)

// metricsBundle is a server whose handler "advances" the fake clock by
// args[0] ms, so that run times are exact, and fails when args[1] is
// "fail". Concurrency 1 keeps the runs from overlapping on the clock.
type metricsBundle struct {
	*srvBundle
	started chan string
}

func newMetricsServer(t *testing.T, cfg ServerConfig) *metricsBundle {
	t.Helper()
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	b := &metricsBundle{srvBundle: newTestServer(t, cfg), started: make(chan string, 100)}
	run := func(ctx context.Context, job *wire.Job) error {
		args := job.Args()
		if len(args) == 0 { // ActiveJob payload: fixed 0 ms
			return nil
		}
		ms, _ := args[0].Int()
		b.clk.Advance(time.Duration(ms) * time.Millisecond)
		if s, _ := args[1].Str(); s == "fail" {
			return fmt.Errorf("failed after %d ms", ms)
		}
		return nil
	}
	for _, c := range []string{"HardJob", "FailOnly", "MyAjJob"} {
		b.srv.Handle(c, HandlerFunc(run), nil)
	}
	b.srv.Handle("Slow", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		b.started <- job.JID()
		<-ctx.Done()
		return ctx.Err()
	}), nil)
	return b
}

var metricsJID atomic.Int64

func (b *metricsBundle) job(t *testing.T, class string, ms int, outcome string) {
	t.Helper()
	b.push(t, "default", fmt.Sprintf(`{"retry":false,"queue":"default","args":[%d,%q],"class":%q,"jid":"%024x","created_at":1795296573.1,"enqueued_at":1795296573.2}`,
		ms, outcome, class, metricsJID.Add(1)))
}

func (b *metricsBundle) activeJob(t *testing.T) {
	t.Helper()
	b.push(t, "default", fmt.Sprintf(`{"retry":false,"queue":"default","class":%q,"wrapped":"MyAjJob","args":[],"jid":"%024x","created_at":1795296573.1,"enqueued_at":1795296573.2}`,
		contract.ActiveJobWrapper, metricsJID.Add(1)))
}

// pushMix pushes 8 jobs: HardJob runs of 19, 20, 5 and 400000 ms and one
// failure, a failing FailOnly, an ActiveJob-wrapped MyAjJob (0 ms) and a
// class without a handler (not tracked, as Ruby fails before the
// middleware).
func (b *metricsBundle) pushMix(t *testing.T) {
	b.job(t, "HardJob", 19, "ok")
	b.job(t, "HardJob", 20, "ok")
	b.job(t, "HardJob", 1000, "fail")
	b.job(t, "HardJob", 5, "ok")
	b.job(t, "HardJob", 400000, "ok")
	b.job(t, "FailOnly", 7, "fail")
	b.activeJob(t)
	b.job(t, "NoHandler", 0, "ok")
}

// The hash every flush of pushMix writes to each j| bucket.
var mixCounts = map[string]string{
	"HardJob|ms": "400044", "HardJob|f": "1", "HardJob|p": "5",
	"FailOnly|f": "1", "FailOnly|p": "1",
	"MyAjJob|ms": "0", "MyAjJob|p": "1",
}

func TestMetricsFlushPerVersion(t *testing.T) {
	t.Parallel()
	// 04:05:42 EST: the buckets are in UTC, 09:05.
	flushAt := time.Date(2026, 11, 5, 4, 5, 42, 0, time.FixedZone("EST", -5*3600))
	cases := []struct {
		v       wire.Version
		buckets map[string]int // j| key → TTL
		hists   [2]string      // HardJob, MyAjJob
	}{
		{wire.Version{Major: 7}, map[string]int{"j|20261105|9:5": 28800}, [2]string{"HardJob-05-09:5", "MyAjJob-05-09:5"}},
		{wire.Version7, map[string]int{"j|20261105|9:5": 28800}, [2]string{"HardJob-05-09:5", "MyAjJob-05-09:5"}},
		{wire.Version{Major: 8}, map[string]int{"j|261105|9:0": 259200, "j|261105|9:05": 28800}, [2]string{"h|HardJob-5-9:5", "h|MyAjJob-5-9:5"}},
		{wire.Version8, map[string]int{"j|261105|9:0": 259200, "j|261105|9:05": 28800}, [2]string{"h|HardJob-5-9:5", "h|MyAjJob-5-9:5"}},
	}
	for _, c := range cases {
		t.Run(c.v.String(), func(t *testing.T) {
			t.Parallel()
			b := newMetricsServer(t, ServerConfig{Version: c.v})
			b.pushMix(t)
			b.start(t)
			b.waitProcessed(t, 8)
			// The hot path wrote nothing.
			require.Zero(t, redistest.CommandCalls(t, b.conn, "hincrby"))
			require.Zero(t, redistest.CommandCalls(t, b.conn, "bitfield"))

			b.clk.Set(flushAt)
			b.beat(t)
			var want []string
			for key, wantTTL := range c.buckets {
				got, err := redis.StringMap(b.conn.Do("HGETALL", key))
				require.NoError(t, err)
				require.Equal(t, mixCounts, got, key)
				require.InDelta(t, wantTTL, ttl(t, b.conn, key), 2, key)
				want = append(want, key)
			}
			// 19 and 5 ms in #0, 20 ms in #1, 400 s in the last; the
			// failure adds nothing. MyAjJob: one 0 ms run.
			require.Equal(t, hist(map[int]int64{0: 2, 1: 1, 25: 1}), histogram(t, b.conn, c.hists[0]))
			require.Equal(t, hist(map[int]int64{0: 1}), histogram(t, b.conn, c.hists[1]))
			for _, h := range c.hists {
				require.InDelta(t, 28800, ttl(t, b.conn, h), 2, h)
				want = append(want, h)
			}
			sort.Strings(want)
			// No histogram for FailOnly (no success), nothing for NoHandler.
			require.Equal(t, want, metricKeys(t, b.conn, b.srv.Identity()))

			// A beat with nothing new writes no metrics.
			hincrby := redistest.CommandCalls(t, b.conn, "hincrby")
			b.beat(t)
			require.Equal(t, hincrby, redistest.CommandCalls(t, b.conn, "hincrby"))

			// The next flush in the same minute adds to the same keys.
			b.job(t, "HardJob", 100, "ok")
			b.waitProcessed(t, 1)
			b.clk.Set(flushAt.Add(10 * time.Second))
			b.beat(t)
			for key := range c.buckets {
				got, err := redis.StringMap(b.conn.Do("HGETALL", key))
				require.NoError(t, err)
				require.Equal(t, "400144", got["HardJob|ms"])
				require.Equal(t, "6", got["HardJob|p"])
				require.Equal(t, "1", got["HardJob|f"])
			}
			require.Equal(t, hist(map[int]int64{0: 2, 1: 1, 5: 1, 25: 1}), histogram(t, b.conn, c.hists[0]))
			require.Equal(t, want, metricKeys(t, b.conn, b.srv.Identity()))
		})
	}
}

// A 6.x target keeps no metrics and writes none, at beats or at exit.
func TestMetricsNotWrittenFor6(t *testing.T) {
	t.Parallel()
	b := newMetricsServer(t, ServerConfig{Version: wire.Version6})
	b.pushMix(t)
	b.start(t)
	b.waitProcessed(t, 8)
	b.beat(t)
	n, err := redis.Int(b.conn.Do("GET", "stat:processed"))
	require.NoError(t, err)
	require.Equal(t, 8, n)
	b.job(t, "HardJob", 5, "ok")
	b.waitProcessed(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.srv.Stop(ctx))
	n, err = redis.Int(b.conn.Do("GET", "stat:processed"))
	require.NoError(t, err)
	require.Equal(t, 9, n)
	require.Empty(t, metricKeys(t, b.conn, b.srv.Identity()))
	require.Zero(t, redistest.CommandCalls(t, b.conn, "hincrby"))
	require.Zero(t, redistest.CommandCalls(t, b.conn, "bitfield"))
}

// A beat that cannot reach Redis keeps the metrics for the next one.
func TestMetricsKeptOnFailedFlush(t *testing.T) {
	t.Parallel()
	b := newMetricsServer(t, ServerConfig{Version: wire.Version8})
	b.pushMix(t)
	b.start(t)
	b.waitProcessed(t, 8)
	flushAt := time.Date(2026, 11, 21, 21, 33, 0, 0, time.UTC)
	b.clk.Set(flushAt)

	b.redis.Kill()
	require.Error(t, b.srv.maint.heartbeat.Beat(context.Background()))
	require.Error(t, b.srv.maint.heartbeat.Beat(context.Background()))
	b.redis.Restart(t) // empty

	conn := b.pool.Get()
	defer conn.Close()
	// The pool may hand out a connection broken by the restart first.
	wait.For(t, "a beat after the restart", func() bool { return b.srv.maint.heartbeat.Beat(context.Background()) == nil })
	for _, key := range []string{"j|261121|21:3", "j|261121|21:33"} {
		got, err := redis.StringMap(conn.Do("HGETALL", key))
		require.NoError(t, err)
		require.Equal(t, mixCounts, got, key)
	}
	require.Equal(t, hist(map[int]int64{0: 2, 1: 1, 25: 1}), histogram(t, conn, "h|HardJob-21-21:33"))
	n, err := redis.Int(conn.Do("GET", "stat:processed"))
	require.NoError(t, err)
	require.Equal(t, 8, n)
}

// Stop flushes what the beats have not, including the job abandoned at the
// hard shutdown: a failure without time, as Sidekiq::Shutdown raised
// through Ruby's metrics middleware.
func TestMetricsFlushedAtShutdown(t *testing.T) {
	t.Parallel()
	b := newMetricsServer(t, ServerConfig{Version: wire.Version7, Concurrency: 2, ShutdownTimeout: 50 * time.Millisecond})
	b.job(t, "HardJob", 3, "ok")
	b.start(t)
	b.waitProcessed(t, 1)
	b.job(t, "Slow", 0, "ok")
	<-b.started
	b.clk.Set(time.Date(2026, 11, 21, 21, 33, 41, 0, time.UTC))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.srv.Stop(ctx))

	got, err := redis.StringMap(b.conn.Do("HGETALL", "j|20261121|21:33"))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"HardJob|ms": "3", "HardJob|p": "1", "Slow|f": "1", "Slow|p": "1"}, got)
	require.Equal(t, hist(map[int]int64{0: 1}), histogram(t, b.conn, "HardJob-21-21:33"))
	require.Equal(t, []string{"HardJob-21-21:33", "j|20261121|21:33"}, metricKeys(t, b.conn, b.srv.Identity()))
	// The Slow job went back to its queue.
	n, err := redis.Int(b.conn.Do("LLEN", contract.QueueKey("default")))
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// histogram reads the 26 u16 counters of a histogram key.
func histogram(t *testing.T, c redis.Conn, key string) []int64 {
	t.Helper()
	args := []any{key}
	for i := range 26 {
		args = append(args, "GET", "u16", "#"+strconv.Itoa(i))
	}
	vals, err := redis.Int64s(c.Do("BITFIELD", args...))
	require.NoError(t, err)
	return vals
}

func hist(set map[int]int64) []int64 {
	out := make([]int64, 26)
	for i, n := range set {
		out[i] = n
	}
	return out
}

// metricKeys lists the keys that are neither the process registry nor
// stats, queues or sets: the metrics keys.
func metricKeys(t *testing.T, c redis.Conn, identity string) []string {
	t.Helper()
	all, err := redis.Strings(c.Do("KEYS", "*"))
	require.NoError(t, err)
	var out []string
	for _, k := range all {
		if strings.HasPrefix(k, "stat:") || strings.HasPrefix(k, "gojob-") || strings.HasPrefix(k, "queue") || strings.HasPrefix(k, identity) ||
			k == contract.KeyProcesses || k == contract.KeyRetry || k == contract.KeyDead || k == contract.KeySchedule {
			continue
		}
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func ttl(t *testing.T, c redis.Conn, key string) int {
	t.Helper()
	n, err := redis.Int(c.Do("TTL", key))
	require.NoError(t, err)
	return n
}
