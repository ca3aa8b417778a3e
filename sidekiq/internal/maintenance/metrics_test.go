package maintenance

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubyfixtures"
	"github.com/gojob/gojob/internal/rubytest"
	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
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
		v     wire.Version
		at    time.Time
		jKeys []string
		hKey  string
	}{
		// The 7.3.10 capture of docs/sidekiq-wire.md#metrics (its process started at 1795296821).
		{wire.Version7, time.Unix(1795296821, 0), []string{"j|20261121|21:33"}, "HardJob-21-21:33"},
		{wire.Version{Major: 7}, time.Date(2026, 11, 5, 9, 5, 59, 0, time.UTC), []string{"j|20261105|9:5"}, "HardJob-05-09:5"},
		// Local times are converted to UTC (04:07 EST = 09:07 UTC).
		{wire.Version7, time.Date(2026, 11, 5, 4, 7, 0, 0, est), []string{"j|20261105|9:7"}, "HardJob-05-09:7"},
		{wire.Version7, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), []string{"j|20260101|0:0"}, "HardJob-01-00:0"},
		// The 8.x examples of docs/sidekiq-wire.md#metrics.
		{wire.Version8, time.Date(2026, 11, 21, 21, 3, 0, 0, time.UTC), []string{"j|261121|21:0", "j|261121|21:03"}, "h|HardJob-21-21:3"},
		{wire.Version{Major: 8}, time.Date(2026, 11, 5, 9, 5, 0, 0, time.UTC), []string{"j|261105|9:0", "j|261105|9:05"}, "h|HardJob-5-9:5"},
		{wire.Version8, time.Date(2026, 11, 5, 4, 59, 0, 0, est), []string{"j|261105|9:5", "j|261105|9:59"}, "h|HardJob-5-9:59"},
		{wire.Version8, time.Date(2030, 12, 31, 23, 40, 0, 0, time.UTC), []string{"j|301231|23:4", "j|301231|23:40"}, "h|HardJob-31-23:40"},
	}
	for _, c := range cases {
		keys, ttls := contract.MetricsKeys(c.v, c.at)
		require.Equal(t, c.jKeys, keys, "%s at %s", c.v, c.at)
		if len(keys) == 2 {
			require.Equal(t, []int{259200, 28800}, ttls)
		} else {
			require.Equal(t, []int{28800}, ttls)
		}
		require.Equal(t, c.hKey, contract.HistogramKey(c.v, "HardJob", c.at), "%s at %s", c.v, c.at)
	}
}

// A recorder keeps Ruby's order (ExecutionTracker#track): the counters
// and histograms in the order they were first touched, "|ms" before "|p"
// for a success and "|f" before "|p" for a failure. A failed flush puts
// its counts back ahead of what came since.
func TestJobMetricsKeepRubysOrder(t *testing.T) {
	t.Parallel()
	var none *JobMetrics // every method is a no-op
	none.Record(0, "A", time.Second, false)
	none.restore(newMetricsSnap())
	require.Nil(t, none.take())

	m := NewJobMetrics(1)
	require.Nil(t, m.take(), "nothing recorded")
	m.Record(0, "A", 1500*time.Microsecond, false) // 1 ms, truncated
	m.Record(0, "B", time.Minute, true)            // failures add no time
	m.Record(0, "A", -time.Second, false)          // clock went back: 0 ms
	m.Record(0, "B", 25*time.Millisecond, false)
	snap := m.take()
	require.Nil(t, m.take())
	require.Equal(t, []string{"A|ms", "A|p", "B|f", "B|p", "B|ms"}, snap.order)
	require.Equal(t, map[string]int64{"A|ms": 1, "A|p": 2, "B|f": 1, "B|p": 2, "B|ms": 25}, snap.counters)
	require.Equal(t, []string{"A", "B"}, snap.gramOrder)
	require.Equal(t, int64(2), snap.grams["A"][0])
	require.Equal(t, int64(1), snap.grams["B"][1])

	m.Record(0, "C", 0, true)
	m.Record(0, "A", 0, false)
	m.restore(snap)
	got := m.take()
	require.Equal(t, []string{"A|ms", "A|p", "B|f", "B|p", "B|ms", "C|f", "C|p"}, got.order)
	require.Equal(t, int64(3), got.counters["A|p"])
	require.Equal(t, int64(3), got.grams["A"][0])
}

// Slots record into shards of their own; a flush sums a name's counts
// across the shards and keeps the order of the first touch in any of
// them, as one recorder would have.
func TestJobMetricsShardsKeepOneOrder(t *testing.T) {
	t.Parallel()
	m := NewJobMetrics(3)
	m.Record(2, "A", 20*time.Millisecond, false)
	m.Record(0, "B", 0, true)
	m.Record(1, "A", 0, true)
	m.Record(0, "A", 0, false)
	m.Record(1, "B", 0, false)
	m.Record(7, "C", 0, false) // beyond the shards: the first one
	snap := m.take()
	require.Equal(t, []string{"A|ms", "A|p", "B|f", "B|p", "A|f", "B|ms", "C|ms", "C|p"}, snap.order)
	require.Equal(t, map[string]int64{"A|ms": 20, "A|p": 3, "B|f": 1, "B|p": 2, "A|f": 1, "B|ms": 0, "C|ms": 0, "C|p": 1}, snap.counters)
	require.Equal(t, []string{"A", "B", "C"}, snap.gramOrder)
	require.Equal(t, int64(1), snap.grams["A"][0])
	require.Equal(t, int64(1), snap.grams["A"][1])
	require.Nil(t, m.take())
}

// Counters kept per slot add up at the flush and in Pending.
func TestCountersAddUpAcrossShards(t *testing.T) {
	t.Parallel()
	c := NewCounters(2)
	c.Add(0, 1, 0)
	c.Add(1, 2, 1)
	c.Add(5, 1, 1) // beyond the shards: counted all the same
	p, f := c.Pending()
	require.Equal(t, [2]int64{4, 2}, [2]int64{p, f})
	p, f = c.take()
	require.Equal(t, [2]int64{4, 2}, [2]int64{p, f})
	c.restore(p, f)
	p, f = c.take()
	require.Equal(t, [2]int64{4, 2}, [2]int64{p, f})
	p, f = c.take()
	require.Zero(t, p+f)
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
		for _, v := range []wire.Version{wire.Version7, wire.Version8} {
			m := NewJobMetrics(1)
			m.Record(0, "HardJob", time.Duration(i+1)*time.Millisecond, false)
			m.Record(0, "HardJob", 21*time.Millisecond, false)
			m.Record(0, "HardJob", 0, true)
			sendMetrics(conn, contract.Format{Version: v}, at, m.take())
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
	m := NewJobMetrics(1)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Record(0, "HardJob", 3*time.Millisecond, false)
		}
	})
}

// rubyMetrics is what a captured Ruby run's two metrics flushes (beats 2
// and 3) leave: the counter hashes and the histograms, by key.
type rubyMetrics struct {
	version  string
	counters map[string]string // key → fixture of its HGETALL pairs
	grams    map[string]string // key → fixture of its bytes
	beats    [2]float64        // the flush times
	second   []string          // the classes of the second flush, in Ruby's order
}

var (
	// testdata/ruby-fixtures/7.3.10: beat 2 RecJob 1 ms and three
	// failures; beat 3 RecJob 0 ms, SlowJob 12,001 ms.
	rubyMetrics7 = rubyMetrics{"7.3.10",
		map[string]string{"j|20261123|14:24": "metrics_counters.json"},
		map[string]string{"RecJob-23-14:24": "histogram_RecJob.bin", "SlowJob-23-14:24": "histogram_SlowJob.bin"},
		[2]float64{1795443871.836402, 1795443881.838376}, []string{"RecJob", "SlowJob"}}
	// testdata/ruby-fixtures/8.1.7: beat 2 as above; beat 3 SlowJob
	// 12,000 ms, RecJob 0 ms, BtFailJob's second failure.
	rubyMetrics8 = rubyMetrics{"8.1.7",
		map[string]string{"j|261126|11:2": "metrics_counters_10min.json", "j|261126|11:23": "metrics_counters.json"},
		map[string]string{"h|RecJob-26-11:23": "histogram_RecJob.bin", "h|SlowJob-26-11:23": "histogram_SlowJob.bin"},
		[2]float64{1795692216.039336, 1795692226.093094}, []string{"SlowJob", "RecJob", "BtFailJob"}}
)

// flushCaptured replays the captured run's two flushes in format f.
func flushCaptured(t *testing.T, conn redis.Conn, f contract.Format, r rubyMetrics) {
	t.Helper()
	flush := func(at float64, record func(m *JobMetrics)) {
		m := NewJobMetrics(1)
		record(m)
		sendMetrics(conn, f, contract.FromEpochSeconds(at), m.take())
		_, err := conn.Do("")
		require.NoError(t, err)
	}
	flush(r.beats[0], func(m *JobMetrics) {
		m.Record(0, "RecJob", time.Millisecond, false)
		m.Record(0, "BtFailJob", 0, true)
		m.Record(0, "DieJob", 0, true)
		m.Record(0, "NoRetryJob", 0, true)
	})
	flush(r.beats[1], func(m *JobMetrics) {
		for _, class := range r.second {
			switch class {
			case "RecJob":
				m.Record(0, "RecJob", 0, false)
			case "SlowJob":
				ms := time.Duration(map[string]int{"7.3.10": 12001, "8.1.7": 12000}[r.version])
				m.Record(0, "SlowJob", ms*time.Millisecond, false)
			case "BtFailJob":
				m.Record(0, "BtFailJob", 0, true)
			}
		}
	})
}

// requireRubyMetrics checks that Redis holds the captured run's metrics
// keys, field order, values and histogram bytes.
func requireRubyMetrics(t *testing.T, conn redis.Conn, r rubyMetrics) {
	t.Helper()
	for key, file := range r.counters {
		var got [][2]string
		flat, err := redis.Strings(conn.Do("HGETALL", key))
		require.NoError(t, err)
		for i := 0; i+1 < len(flat); i += 2 {
			got = append(got, [2]string{flat[i], flat[i+1]})
		}
		require.Equal(t, rubyfixtures.Pairs(t, r.version, file), got, key)
		require.Equal(t, key, rubyfixtures.Find(t, r.version, file).Redis.Key)
	}
	for key, file := range r.grams {
		h, err := redis.Bytes(conn.Do("GET", key))
		require.NoError(t, err, key)
		require.Equal(t, rubyfixtures.Read(t, r.version, file), h, key)
		require.Equal(t, key, rubyfixtures.Find(t, r.version, file).Redis.Key)
	}
}

// The flushes of the captured beats 2 and 3 leave what Ruby 7.3.10 and
// 8.1.7 left: the counter hashes with their fields in the captured order
// and values, and the histograms byte for byte.
func TestMetricsMatchRubyCapture(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v wire.Version
		r rubyMetrics
	}{{wire.Version7, rubyMetrics7}, {wire.Version8, rubyMetrics8}} {
		t.Run(c.r.version, func(t *testing.T) {
			t.Parallel()
			conn := redistest.Start(t).Pool(t).Get()
			defer conn.Close()
			flushCaptured(t, conn, contract.Format{Version: c.v}, c.r)
			requireRubyMetrics(t, conn, c.r)
		})
	}
}

// The format for all readers writes both 7.x's keys and 8.x's, so that
// the Metrics tab of every Web UI from 7.0 to 8.x shows a lone gojob's
// jobs: replaying either captured run leaves what that Ruby left, and the
// other family's keys beside them.
func TestMetricsForAllReadersMatchBothCaptures(t *testing.T) {
	t.Parallel()
	for _, r := range []rubyMetrics{rubyMetrics7, rubyMetrics8} {
		t.Run(r.version, func(t *testing.T) {
			t.Parallel()
			conn := redistest.Start(t).Pool(t).Get()
			defer conn.Close()
			flushCaptured(t, conn, contract.FormatForAll, r)
			requireRubyMetrics(t, conn, r)
			at := contract.FromEpochSeconds(r.beats[1])
			var want []string
			for _, v := range []wire.Version{wire.Version7, wire.Version8} {
				keys, _ := contract.MetricsKeys(v, at)
				want = append(want, keys...)
				for _, class := range []string{"RecJob", "SlowJob"} {
					want = append(want, contract.HistogramKey(v, class, at))
				}
			}
			want = append(want, contract.KeyGojobMetricsKeys)
			got, err := redis.Strings(conn.Do("KEYS", "*"))
			require.NoError(t, err)
			require.ElementsMatch(t, want, got)
			marked, err := redis.Strings(conn.Do("ZRANGE", contract.KeyGojobMetricsKeys, 0, -1))
			require.NoError(t, err)
			var jkeys []string
			for _, v := range []wire.Version{wire.Version7, wire.Version8} {
				keys, _ := contract.MetricsKeys(v, at)
				jkeys = append(jkeys, keys...)
			}
			require.ElementsMatch(t, jkeys, marked, "gojob marks the j| keys it wrote")
		})
	}
}
