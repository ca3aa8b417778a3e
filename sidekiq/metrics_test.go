package sidekiq

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubytest"
)

// Each limit is exclusive: Histogram#record_time breaks at the first
// bucket with ms < limit.
func TestHistogramBucket(t *testing.T) {
	t.Parallel()
	require.Equal(t, 26, histogramBuckets)
	cases := map[int64]int{0: 0, 19: 0, 20: 1, 29: 1, 30: 2, 99: 4, 100: 5, 280: 7, 334999: 24, 335000: 25, 1 << 40: 25}
	for i, lim := range histogramLimits {
		cases[lim-1] = i
		cases[lim] = i + 1
	}
	for ms, want := range cases {
		require.Equal(t, want, histogramBucket(ms), "%d ms", ms)
	}
}

func TestMetricsKeyFormats(t *testing.T) {
	t.Parallel()
	est := time.FixedZone("EST", -5*3600)
	cases := []struct {
		v     Version
		at    time.Time
		jKeys []string
		hKey  string
	}{
		// The 7.3.10 capture of spec §7.8 (its process started at 1795296821).
		{Version7, time.Unix(1795296821, 0), []string{"j|20261121|21:33"}, "HardJob-21-21:33"},
		{Version{7, 0, 0}, time.Date(2026, 11, 5, 9, 5, 59, 0, time.UTC), []string{"j|20261105|9:5"}, "HardJob-05-09:5"},
		// Local times are converted to UTC (04:07 EST = 09:07 UTC).
		{Version7, time.Date(2026, 11, 5, 4, 7, 0, 0, est), []string{"j|20261105|9:7"}, "HardJob-05-09:7"},
		{Version7, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), []string{"j|20260101|0:0"}, "HardJob-01-00:0"},
		// The 8.x examples of spec §7.8.
		{Version8, time.Date(2026, 11, 21, 21, 3, 0, 0, time.UTC), []string{"j|261121|21:0", "j|261121|21:03"}, "h|HardJob-21-21:3"},
		{Version{8, 0, 0}, time.Date(2026, 11, 5, 9, 5, 0, 0, time.UTC), []string{"j|261105|9:0", "j|261105|9:05"}, "h|HardJob-5-9:5"},
		{Version8, time.Date(2026, 11, 5, 4, 59, 0, 0, est), []string{"j|261105|9:5", "j|261105|9:59"}, "h|HardJob-5-9:59"},
		{Version8, time.Date(2030, 12, 31, 23, 40, 0, 0, time.UTC), []string{"j|301231|23:4", "j|301231|23:40"}, "h|HardJob-31-23:40"},
	}
	for _, c := range cases {
		keys, ttls := metricsKeys(c.v, c.at)
		require.Equal(t, c.jKeys, keys, "%s at %s", c.v, c.at)
		if len(keys) == 2 {
			require.Equal(t, []int{259200, 28800}, ttls)
		} else {
			require.Equal(t, []int{28800}, ttls)
		}
		require.Equal(t, c.hKey, histogramKey(c.v, "HardJob", c.at), "%s at %s", c.v, c.at)
	}
}

func TestJobMetricsRecordTakeRestore(t *testing.T) {
	t.Parallel()
	require.Nil(t, newJobMetrics(Version6))
	var none *jobMetrics // 6.x: every method is a no-op
	none.record("A", time.Second, false)
	none.restore(map[string]*classMetrics{"A": {processed: 1}})
	require.Nil(t, none.take())

	m := newJobMetrics(Version{7, 0, 0})
	require.Nil(t, m.take(), "nothing recorded")
	m.record("A", 1500*time.Microsecond, false) // 1 ms, truncated
	m.record("A", -time.Second, false)          // clock went back: 0 ms
	m.record("A", time.Minute, true)            // failures add no time
	snap := m.take()
	require.Nil(t, m.take())
	want := &classMetrics{processed: 3, failed: 1, succeeded: 2, ms: 1}
	want.hist[0] = 2
	require.Equal(t, map[string]*classMetrics{"A": want}, snap)

	// A failed flush puts its counts back under what came since.
	m.record("A", 25*time.Millisecond, false)
	m.record("B", 0, true)
	m.restore(snap)
	got := m.take()
	wantA := &classMetrics{processed: 4, failed: 1, succeeded: 3, ms: 26}
	wantA.hist[0], wantA.hist[1] = 2, 1
	require.Equal(t, map[string]*classMetrics{"A": wantA, "B": {processed: 1, failed: 1}}, got)
}

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
	run := func(ctx context.Context, job *Job) error {
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
		b.srv.HandleFunc(c, run)
	}
	b.srv.HandleFunc("Slow", func(ctx context.Context, job *Job) error {
		b.started <- job.JID()
		<-ctx.Done()
		return ctx.Err()
	})
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
		ActiveJobWrapperClass, metricsJID.Add(1)))
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

// waitProcessed waits until n jobs have finished (their metrics are
// recorded before the processed count moves).
func (b *metricsBundle) waitProcessed(t *testing.T, n int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d jobs processed", n), func() bool { return b.srv.processed.Load() == n })
}

// The hash every flush of pushMix writes to each j| bucket.
var mixCounts = map[string]string{
	"HardJob|ms": "400044", "HardJob|f": "1", "HardJob|p": "5",
	"FailOnly|f": "1", "FailOnly|p": "1",
	"MyAjJob|ms": "0", "MyAjJob|p": "1",
}

func histogram(t *testing.T, c redis.Conn, key string) []int64 {
	t.Helper()
	args := []any{key}
	for i := range histogramBuckets {
		args = append(args, "GET", "u16", "#"+strconv.Itoa(i))
	}
	vals, err := redis.Int64s(c.Do("BITFIELD", args...))
	require.NoError(t, err)
	return vals
}

func hist(set map[int]int64) []int64 {
	out := make([]int64, histogramBuckets)
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
		if strings.HasPrefix(k, "stat:") || strings.HasPrefix(k, "queue") || strings.HasPrefix(k, identity) ||
			k == KeyProcesses || k == KeyRetry || k == KeyDead || k == KeySchedule {
			continue
		}
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func commandCalls(t *testing.T, c redis.Conn, cmd string) int {
	t.Helper()
	info, err := redis.String(c.Do("INFO", "commandstats"))
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

func ttl(t *testing.T, c redis.Conn, key string) int {
	t.Helper()
	n, err := redis.Int(c.Do("TTL", key))
	require.NoError(t, err)
	return n
}

func TestMetricsFlushPerVersion(t *testing.T) {
	t.Parallel()
	// 04:05:42 EST: the buckets are in UTC, 09:05.
	flushAt := time.Date(2026, 11, 5, 4, 5, 42, 0, time.FixedZone("EST", -5*3600))
	cases := []struct {
		v       Version
		buckets map[string]int // j| key → TTL
		hists   [2]string      // HardJob, MyAjJob
	}{
		{Version{7, 0, 0}, map[string]int{"j|20261105|9:5": 28800}, [2]string{"HardJob-05-09:5", "MyAjJob-05-09:5"}},
		{Version7, map[string]int{"j|20261105|9:5": 28800}, [2]string{"HardJob-05-09:5", "MyAjJob-05-09:5"}},
		{Version{8, 0, 0}, map[string]int{"j|261105|9:0": 259200, "j|261105|9:05": 28800}, [2]string{"h|HardJob-5-9:5", "h|MyAjJob-5-9:5"}},
		{Version8, map[string]int{"j|261105|9:0": 259200, "j|261105|9:05": 28800}, [2]string{"h|HardJob-5-9:5", "h|MyAjJob-5-9:5"}},
	}
	for _, c := range cases {
		t.Run(c.v.String(), func(t *testing.T) {
			t.Parallel()
			b := newMetricsServer(t, ServerConfig{Version: c.v})
			b.pushMix(t)
			b.start(t)
			b.waitProcessed(t, 8)
			// The hot path wrote nothing.
			require.Zero(t, commandCalls(t, b.conn, "hincrby"))
			require.Zero(t, commandCalls(t, b.conn, "bitfield"))

			b.clk.Set(flushAt)
			require.NoError(t, b.srv.heartbeat(context.Background()))
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
			hincrby := commandCalls(t, b.conn, "hincrby")
			require.NoError(t, b.srv.heartbeat(context.Background()))
			require.Equal(t, hincrby, commandCalls(t, b.conn, "hincrby"))

			// The next flush in the same minute adds to the same keys.
			b.job(t, "HardJob", 100, "ok")
			b.waitProcessed(t, 1)
			b.clk.Set(flushAt.Add(10 * time.Second))
			require.NoError(t, b.srv.heartbeat(context.Background()))
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
	b := newMetricsServer(t, ServerConfig{Version: Version6})
	require.Nil(t, b.srv.metrics)
	b.pushMix(t)
	b.start(t)
	b.waitProcessed(t, 8)
	require.NoError(t, b.srv.heartbeat(context.Background()))
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
	require.Zero(t, commandCalls(t, b.conn, "hincrby"))
	require.Zero(t, commandCalls(t, b.conn, "bitfield"))
}

// A beat that cannot reach Redis keeps the metrics for the next one.
func TestMetricsKeptOnFailedFlush(t *testing.T) {
	t.Parallel()
	b := newMetricsServer(t, ServerConfig{Version: Version8})
	b.pushMix(t)
	b.start(t)
	b.waitProcessed(t, 8)
	flushAt := time.Date(2026, 11, 21, 21, 33, 0, 0, time.UTC)
	b.clk.Set(flushAt)

	b.redis.Kill()
	require.Error(t, b.srv.heartbeat(context.Background()))
	require.Error(t, b.srv.heartbeat(context.Background()))
	b.redis.Restart(t) // empty

	conn := b.pool.Get()
	defer conn.Close()
	// The pool may hand out a connection broken by the restart first.
	waitFor(t, "a beat after the restart", func() bool { return b.srv.heartbeat(context.Background()) == nil })
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
	b := newMetricsServer(t, ServerConfig{Version: Version7, Concurrency: 2, ShutdownTimeout: 50 * time.Millisecond})
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
	n, err := redis.Int(b.conn.Do("LLEN", QueueKey("default")))
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// Ruby Sidekiq here is 6.4.1, which has no metrics, so this reads gojob's
// keys the way 7.x/8.x do, with Ruby's own strftime and the format strings
// of tracking.rb, shared.rb and query.rb (8.x query.rb builds the 10-minute
// key from the minute's first digit rather than by dropping a character).
func TestMetricsKeysReadWithRubyFormats(t *testing.T) {
	t.Parallel()
	rubytest.Require(t)
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	conn := rs.Pool(t).Get()
	defer conn.Close()
	times := []time.Time{
		time.Date(2026, 11, 5, 9, 5, 7, 0, time.UTC),
		time.Date(2026, 11, 21, 21, 33, 41, 0, time.UTC),
		time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC),
	}
	var epochs []string
	for i, at := range times {
		for _, v := range []Version{Version7, Version8} {
			m := newJobMetrics(v)
			m.record("HardJob", time.Duration(i+1)*time.Millisecond, false)
			m.record("HardJob", 21*time.Millisecond, false)
			m.record("HardJob", 0, true)
			sendMetrics(conn, v, at, m.take())
			_, err := conn.Do("")
			require.NoError(t, err)
		}
		epochs = append(epochs, strconv.FormatInt(at.Unix(), 10))
	}
	out := rubytest.Run(t, rs.URL(), `
gets = (0..25).flat_map { |i| ["GET", "u16", "##{i}"] }
res = [`+strings.Join(epochs, ",")+`].map do |epoch|
  t = Time.at(epoch).utc
  m = t.min
  mins = (m < 10) ? "0" : m.to_s[0]
  Sidekiq.redis do |c|
    {
      "j7" => c.hgetall(t.strftime("j|%Y%m%d|%-H:%-M")),
      "h7" => c.bitfield("HardJob-#{t.strftime("%d-%H:%-M")}", *gets),
      "j8" => c.hgetall(t.strftime("j|%y%m%d|%-H:%M")),
      "j8_10" => c.hgetall(t.strftime("j|%y%m%d|%-H:#{mins}")),
      "h8" => c.call("BITFIELD_RO", "h|HardJob-#{t.strftime("%-d-%-H:%-M")}", *gets),
    }
  end
end
print JSON.generate(res)
`)
	var got []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Len(t, got, len(times))
	for i := range times {
		counts := map[string]any{"HardJob|ms": fmt.Sprint(i + 1 + 21), "HardJob|f": "1", "HardJob|p": "3"}
		h := make([]any, histogramBuckets)
		for j := range h {
			h[j] = float64(0)
		}
		h[0], h[1] = float64(1), float64(1)
		want := map[string]any{"j7": counts, "j8": counts, "j8_10": counts, "h7": h, "h8": h}
		require.Equal(t, want, got[i], times[i])
	}
}

// The hot path: one mutex and a map lookup per job.
func BenchmarkJobMetricsRecord(b *testing.B) {
	m := newJobMetrics(Version8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.record("HardJob", 3*time.Millisecond, false)
		}
	})
}
