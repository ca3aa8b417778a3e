package maintenance

import (
	"cmp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gomodule/redigo/redis"
)

// Job metrics of Sidekiq 7.0+ (docs/sidekiq-wire.md#metrics; Ruby's
// lib/sidekiq/metrics/tracking.rb and shared.rb). Ruby records them in a server middleware and
// flushes them on the :beat event; the Web UI's Metrics tab reads them. gojob
// records each job in memory (one mutex, no Redis command) and writes the
// counts after each beat's process hash, as Ruby does, and at shutdown. A
// beat in a 6.x format drops them: 6.x writes no metrics. The format for
// all readers writes both the 7.x and the 8.x keys below, since 8.x Web
// UIs read no 7.x key (docs/version-follow.md).
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

// histogramLimits are the exclusive upper limits in ms of the first 25
// histogram buckets (contract.HistogramLimits); the 26th takes the rest.
var histogramLimits = contract.HistogramLimits

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

// metricsSnap is the counts since the last flush, in Ruby's order: the
// counters ("<Class>|ms", "|f", "|p") and the histograms in the order they
// were first touched (ExecutionTracker's @jobs and @grams are Ruby hashes,
// which keep insertion order).
type metricsSnap struct {
	counters  map[string]int64
	order     []string
	grams     map[string]*[histogramBuckets]int64
	gramOrder []string
}

func newMetricsSnap() *metricsSnap {
	return &metricsSnap{counters: map[string]int64{}, grams: map[string]*[histogramBuckets]int64{}}
}

func (m *metricsSnap) count(key string, n int64) {
	if _, ok := m.counters[key]; !ok {
		m.order = append(m.order, key)
	}
	m.counters[key] += n
}

func (m *metricsSnap) gram(class string) *[histogramBuckets]int64 {
	g := m.grams[class]
	if g == nil {
		g = &[histogramBuckets]int64{}
		m.grams[class] = g
		m.gramOrder = append(m.gramOrder, class)
	}
	return g
}

// merge adds o, which is older: its keys come first.
func (m *metricsSnap) merge(o *metricsSnap) {
	n := newMetricsSnap()
	for _, src := range []*metricsSnap{o, m} {
		for _, k := range src.order {
			n.count(k, src.counters[k])
		}
		for _, c := range src.gramOrder {
			g := n.gram(c)
			for i, v := range src.grams[c] {
				g[i] += v
			}
		}
	}
	*m = *n
}

// JobMetrics accumulates the per-class metrics between flushes. A nil
// *JobMetrics records nothing. A job's Record costs one map lookup by
// class and no allocation: the counters' names are built at the flush.
// Records go to shards (the server's slots), each with its own lock on
// its own cache lines, so that slots on different cores do not contend
// for one lock on every job; a global sequence taken at each first touch
// of a counter keeps Ruby's key order across the shards at the flush.
type JobMetrics struct {
	shards []metricsShard
	// seq numbers the first touches of counters and histograms.
	seq atomic.Int64

	mu sync.Mutex
	// pending is a failed flush's counts, older than the shards'.
	pending *metricsSnap
}

// metricsShard is one shard's tracker, padded to its own cache lines.
type metricsShard struct {
	mu  sync.Mutex
	cur *tracker
	_   [112]byte
}

// NewJobMetrics returns an empty recorder with n shards (at least one).
func NewJobMetrics(n int) *JobMetrics {
	m := &JobMetrics{shards: make([]metricsShard, max(n, 1))}
	for i := range m.shards {
		m.shards[i].cur = newTracker()
	}
	return m
}

// The counters of a class, in the order of their names' suffixes.
const (
	kindMS = iota // "|ms"
	kindF         // "|f"
	kindP         // "|p"
)

var kindSuffix = [3]string{"|ms", "|f", "|p"}

// classCounts is one class's counters and histogram since the last flush.
type classCounts struct {
	name    string
	n       [3]int64
	touched [3]bool
	gram    *[histogramBuckets]int64
	gramSeq int64 // the histogram's first touch (JobMetrics.seq)
}

// counterRef names one counter of a class, with its first touch.
type counterRef struct {
	c    *classCounts
	kind int
	seq  int64
}

// tracker is what Record writes into.
type tracker struct {
	classes   map[string]*classCounts
	order     []counterRef
	gramOrder []*classCounts
}

func newTracker() *tracker { return &tracker{classes: map[string]*classCounts{}} }

func (t *tracker) add(c *classCounts, kind int, n int64, seq *atomic.Int64) {
	if !c.touched[kind] {
		c.touched[kind] = true
		t.order = append(t.order, counterRef{c, kind, seq.Add(1)})
	}
	c.n[kind] += n
}

// snapOf returns the trackers' counts with their names, nil when empty:
// the counters and the histograms in the order of their first touch in
// any tracker, a name's counts summed across them.
func snapOf(ts []*tracker) *metricsSnap {
	var order []counterRef
	var grams []*classCounts
	for _, t := range ts {
		order = append(order, t.order...)
		grams = append(grams, t.gramOrder...)
	}
	if len(order) == 0 {
		return nil
	}
	slices.SortFunc(order, func(a, b counterRef) int { return cmp.Compare(a.seq, b.seq) })
	slices.SortFunc(grams, func(a, b *classCounts) int { return cmp.Compare(a.gramSeq, b.gramSeq) })
	s := newMetricsSnap()
	for _, r := range order {
		s.count(r.c.name+kindSuffix[r.kind], r.c.n[r.kind])
	}
	for _, c := range grams {
		g := s.gram(c.name)
		for i, v := range c.gram {
			g[i] += v
		}
	}
	return s
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
// are whole milliseconds, truncated. The keys are touched in Ruby's order
// (ExecutionTracker#track): "|ms" and the histogram, or "|f"; then "|p".
func (m *JobMetrics) Record(shard int, class string, d time.Duration, failed bool) {
	if m == nil {
		return
	}
	ms := max(d.Milliseconds(), 0)
	sh := &m.shards[0]
	if shard > 0 && shard < len(m.shards) {
		sh = &m.shards[shard]
	}
	sh.mu.Lock()
	t := sh.cur
	c := t.classes[class]
	if c == nil {
		c = &classCounts{name: class}
		t.classes[class] = c
	}
	if failed {
		t.add(c, kindF, 1, &m.seq)
	} else {
		if c.gram == nil {
			c.gram = &[histogramBuckets]int64{}
			c.gramSeq = m.seq.Add(1)
			t.gramOrder = append(t.gramOrder, c)
		}
		c.gram[histogramBucket(ms)]++
		t.add(c, kindMS, ms, &m.seq)
	}
	t.add(c, kindP, 1, &m.seq)
	sh.mu.Unlock()
}

// take returns the counts since the last take and starts afresh; nil when
// there is nothing to flush.
func (m *JobMetrics) take() *metricsSnap {
	if m == nil {
		return nil
	}
	var ts []*tracker
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		if len(sh.cur.order) > 0 {
			ts = append(ts, sh.cur)
			sh.cur = newTracker()
		}
		sh.mu.Unlock()
	}
	cur := snapOf(ts)
	m.mu.Lock()
	old := m.pending
	m.pending = nil
	m.mu.Unlock()
	switch {
	case old == nil:
		return cur
	case cur == nil:
		return old
	}
	cur.merge(old)
	return cur
}

// restore adds back the counts of a flush that failed, so the next flush
// writes them.
func (m *JobMetrics) restore(snap *metricsSnap) {
	if m == nil || snap == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending == nil {
		m.pending = snap
		return
	}
	m.pending.merge(snap)
}

// sendMetrics queues the commands of a metrics flush at now (see the
// comment at the top of this file) for each version whose keys format f
// writes (contract.MetricsVersions: both 7.x's and 8.x's for all readers)
// on conn; the caller sends them with Do(""). Histograms and counters go in
// the order they were first touched. Last, the j| keys go into
// contract.KeyGojobMetricsKeys, so that no gojob takes them for Ruby's
// (docs/version-follow.md).
func sendMetrics(conn redis.Conn, f contract.Format, now time.Time, snap *metricsSnap) {
	versions := contract.MetricsVersions(f)
	if snap == nil || len(versions) == 0 {
		return
	}
	mark := []any{contract.KeyGojobMetricsKeys}
	for _, v := range versions {
		for _, class := range snap.gramOrder {
			key := contract.HistogramKey(v, class, now)
			args := []any{key, "OVERFLOW", "SAT"}
			for i, n := range snap.grams[class] {
				if n > 0 {
					args = append(args, "INCRBY", "u16", "#"+strconv.Itoa(i), n)
				}
			}
			conn.Send("BITFIELD", args...)
			conn.Send("EXPIRE", key, contract.MetricsShortTTL)
		}
		keys, ttls := contract.MetricsKeys(v, now)
		for i, key := range keys {
			for _, k := range snap.order {
				conn.Send("HINCRBY", key, k, snap.counters[k])
			}
			conn.Send("EXPIRE", key, ttls[i])
			mark = append(mark, contract.Score(now), key)
		}
	}
	conn.Send("ZADD", mark...)
	conn.Send("ZREMRANGEBYSCORE", contract.KeyGojobMetricsKeys, "-inf",
		"("+contract.Score(now.Add(-contract.MetricsShortTTL*time.Second)))
}
