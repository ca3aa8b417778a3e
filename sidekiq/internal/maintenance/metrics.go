package maintenance

import (
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gomodule/redigo/redis"
)

// Job metrics of Sidekiq 7.0+ (docs/sidekiq-wire.md#metrics; Ruby's
// lib/sidekiq/metrics/tracking.rb and shared.rb). Ruby records them in a server middleware and
// flushes them on the :beat event; the Web UI's Metrics tab reads them. gojob
// records each job in memory (one mutex, no Redis command) and writes the
// counts in the heartbeat's stats pipeline and at shutdown. A 6.x target has
// no metrics: nothing is recorded or written.
//
// Per flush, with now = the flush time in UTC (Ruby buckets by flush time,
// not by job time):
//
//   - histogram, per class with at least one successful run:
//     BITFIELD <hkey> OVERFLOW SAT INCRBY u16 #<i> <n> … (only buckets with
//     n > 0), then EXPIRE <hkey> 28800. <hkey> is `<Class>-%d-%H:%-M` for
//     7.x, `h|<Class>-%-d-%-H:%-M` for 8.0+.
//   - counters: HINCRBY j|<bucket> <Class>|ms / <Class>|f / <Class>|p, then
//     EXPIRE. 7.x: one bucket `%Y%m%d|%-H:%-M`, TTL 8 h. 8.0+: the 10-minute
//     bucket (`%y%m%d|%-H:%M` without its last character, TTL 72 h), then the
//     1-minute bucket `%y%m%d|%-H:%M` (TTL 8 h).
//
// "|p" counts executions, "|f" failures, "|ms" the milliseconds of the
// successful runs only; Ruby creates "|ms" on the first success (even at 0
// ms) and "|f" on the first failure, and so does gojob. Class is
// `wrapped || class`. Jobs whose class has no handler are not counted (Ruby
// fails in constantize, before the middleware chain).

// Metrics TTLs in seconds (tracking.rb SHORT_TERM, MID_TERM; shared.rb
// HISTOGRAM_TTL).
const (
	metricsShortTTL = 8 * 60 * 60      // j|<minute> and the histograms
	metricsMidTTL   = 3 * 24 * 60 * 60 // 8.0+ j|<10 minutes>
)

// histogramLimits are the exclusive upper limits in ms of the first 25
// histogram buckets (shared.rb BUCKET_INTERVALS); the 26th takes the rest.
var histogramLimits = [...]int64{
	20, 30, 45, 65, 100,
	150, 225, 335, 500, 750,
	1100, 1700, 2500, 3800, 5750,
	8500, 13000, 20000, 30000, 45000,
	65000, 100000, 150000, 225000, 335000,
}

// histogramBuckets is the number of u16 counters in a histogram key.
const histogramBuckets = len(histogramLimits) + 1

// histogramBucket is the bucket of a run of ms milliseconds: the first whose
// limit is greater than ms (Histogram#record_time: `break idx if ms <
// BUCKET_INTERVALS[idx]`), so 19 ms → #0 and 20 ms → #1.
func histogramBucket(ms int64) int {
	for i, lim := range histogramLimits {
		if ms < lim {
			return i
		}
	}
	return len(histogramLimits)
}

// metricsKeys returns the j|… hash keys a flush at now writes, in Ruby's
// order, with their TTLs.
func metricsKeys(v wire.Version, now time.Time) (keys []string, ttls []int) {
	now = now.UTC()
	if !v.AtLeast(8, 0, 0) {
		// %Y%m%d|%-H:%-M
		b := make([]byte, 0, 24)
		b = append(b, "j|"...)
		b = now.AppendFormat(b, "20060102")
		b = append(b, '|')
		b = strconv.AppendInt(b, int64(now.Hour()), 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(now.Minute()), 10)
		return []string{string(b)}, []int{metricsShortTTL}
	}
	// %y%m%d|%-H:%M; the 10-minute bucket drops the last character.
	b := make([]byte, 0, 24)
	b = append(b, "j|"...)
	b = now.AppendFormat(b, "060102")
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(now.Hour()), 10)
	b = append(b, ':')
	b = now.AppendFormat(b, "04")
	minute := string(b)
	return []string{minute[:len(minute)-1], minute}, []int{metricsMidTTL, metricsShortTTL}
}

// histogramKey is the BITFIELD key of class for a flush at now: 7.x
// `<Class>-%d-%H:%-M`, 8.0+ `h|<Class>-%-d-%-H:%-M`.
func histogramKey(v wire.Version, class string, now time.Time) string {
	now = now.UTC()
	b := make([]byte, 0, len(class)+16)
	if v.AtLeast(8, 0, 0) {
		b = append(b, "h|"...)
		b = append(b, class...)
		b = append(b, '-')
		b = strconv.AppendInt(b, int64(now.Day()), 10)
		b = append(b, '-')
		b = strconv.AppendInt(b, int64(now.Hour()), 10)
	} else {
		b = append(b, class...)
		b = now.AppendFormat(b, "-02-15")
	}
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(now.Minute()), 10)
	return string(b)
}

// classMetrics are one class's counts since the last flush.
type classMetrics struct {
	processed int64
	failed    int64
	succeeded int64 // successful runs: "|ms" and the histogram exist when > 0
	ms        int64 // total ms of the successful runs
	hist      [histogramBuckets]int64
}

func (c *classMetrics) add(o *classMetrics) {
	c.processed += o.processed
	c.failed += o.failed
	c.succeeded += o.succeeded
	c.ms += o.ms
	for i, n := range o.hist {
		c.hist[i] += n
	}
}

// JobMetrics accumulates the per-class metrics between flushes. A nil
// *JobMetrics (6.x target) records nothing.
type JobMetrics struct {
	mu      sync.Mutex
	classes map[string]*classMetrics
}

// NewJobMetrics returns the recorder for a target version: nil before 7.0.
func NewJobMetrics(v wire.Version) *JobMetrics {
	if !v.AtLeast(7, 0, 0) {
		return nil
	}
	return &JobMetrics{classes: map[string]*classMetrics{}}
}

// MetricsClass is the class name metrics are kept under: Ruby's
// `hash["wrapped"] || hash["class"]`.
func MetricsClass(job *wire.Job) string {
	if v, ok := job.Get("wrapped"); ok {
		if s, ok := v.Str(); ok {
			return s
		}
	}
	return job.Class()
}

// Record counts one execution of class that took d; a failed run counts in
// "|f" and, as in Ruby, adds neither time nor a histogram entry. Durations
// are whole milliseconds, truncated.
func (m *JobMetrics) Record(class string, d time.Duration, failed bool) {
	if m == nil {
		return
	}
	ms := max(d.Milliseconds(), 0)
	m.mu.Lock()
	c := m.classes[class]
	if c == nil {
		c = &classMetrics{}
		m.classes[class] = c
	}
	c.processed++
	if failed {
		c.failed++
	} else {
		c.succeeded++
		c.ms += ms
		c.hist[histogramBucket(ms)]++
	}
	m.mu.Unlock()
}

// take returns the counts since the last take and starts afresh; nil when
// there is nothing to flush.
func (m *JobMetrics) take() map[string]*classMetrics {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.classes) == 0 {
		return nil
	}
	out := m.classes
	m.classes = make(map[string]*classMetrics, len(out))
	return out
}

// restore adds back the counts of a flush that failed, so the next flush
// writes them.
func (m *JobMetrics) restore(snap map[string]*classMetrics) {
	if m == nil || len(snap) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for class, c := range snap {
		if cur := m.classes[class]; cur != nil {
			cur.add(c)
		} else {
			m.classes[class] = c
		}
	}
}

// sendMetrics queues the commands of a metrics flush at now (see the
// comment at the top of this file) on conn; the caller sends them with
// Do(""). Classes go in name order.
func sendMetrics(conn redis.Conn, v wire.Version, now time.Time, snap map[string]*classMetrics) {
	if len(snap) == 0 {
		return
	}
	classes := make([]string, 0, len(snap))
	for class := range snap {
		classes = append(classes, class)
	}
	sort.Strings(classes)
	for _, class := range classes {
		c := snap[class]
		if c.succeeded == 0 {
			continue // Ruby makes a histogram on the first success only
		}
		key := histogramKey(v, class, now)
		args := []any{key, "OVERFLOW", "SAT"}
		for i, n := range c.hist {
			if n > 0 {
				args = append(args, "INCRBY", "u16", "#"+strconv.Itoa(i), n)
			}
		}
		conn.Send("BITFIELD", args...)
		conn.Send("EXPIRE", key, metricsShortTTL)
	}
	keys, ttls := metricsKeys(v, now)
	for i, key := range keys {
		for _, class := range classes {
			c := snap[class]
			if c.succeeded > 0 {
				conn.Send("HINCRBY", key, class+"|ms", c.ms)
			}
			if c.failed > 0 {
				conn.Send("HINCRBY", key, class+"|f", c.failed)
			}
			conn.Send("HINCRBY", key, class+"|p", c.processed)
		}
		conn.Send("EXPIRE", key, ttls[i])
	}
}
