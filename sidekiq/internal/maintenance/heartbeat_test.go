package maintenance

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubyfixtures"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/wire"
)

type beatBundle struct {
	rs       *redistest.Server
	conn     redis.Conn
	hb       *Heartbeat
	counters *Counters
	work     []Work
	quiet    atomic.Bool
	signals  chan string
}

func newBeatBundle(t *testing.T, v wire.Version, mod func(*HeartbeatConfig)) *beatBundle {
	t.Helper()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	conn := pool.Get()
	t.Cleanup(func() { conn.Close() })
	b := &beatBundle{rs: rs, conn: conn, counters: &Counters{}, signals: make(chan string, 4)}
	log := zerolog.New(zerolog.NewTestWriter(t))
	cfg := &HeartbeatConfig{
		Pool:   pool,
		Format: contract.FixedFormat(v),
		Clock:  clocktest.NewFake(time.Unix(1795296573, 0)),
		Logger: log,
		Outage: &redisx.OutageLog{Log: &log},
		Info: &ProcessInfo{Identity: "host:1:abc", Hostname: "host", Concurrency: 4,
			Queues: []wire.QueueWeight{{Name: "a", Weight: 3}, {Name: "b"}}},
		Counters: b.counters,
		Metrics:  NewJobMetrics(1),
		Work:     func() []Work { return b.work },
		Quiet:    b.quiet.Load,
		OnSignal: func(sig string) { b.signals <- sig },
	}
	if mod != nil {
		mod(cfg)
	}
	hb, err := NewHeartbeat(cfg)
	require.NoError(t, err)
	b.hb = hb
	return b
}

func TestNewHeartbeatValidates(t *testing.T) {
	t.Parallel()
	_, err := NewHeartbeat(nil)
	require.Error(t, err)
	_, err = NewHeartbeat(&HeartbeatConfig{Pool: &redis.Pool{}})
	require.ErrorContains(t, err, "needs Pool, Format, Outage, Info")
}

func TestHeartbeatIntervalPerVersion(t *testing.T) {
	t.Parallel()
	require.Equal(t, 5*time.Second, newBeatBundle(t, wire.Version6, nil).hb.Interval())
	require.Equal(t, 10*time.Second, newBeatBundle(t, wire.Version7, nil).hb.Interval())
	require.Equal(t, time.Second, newBeatBundle(t, wire.Version7, func(c *HeartbeatConfig) { c.Interval = time.Second }).hb.Interval())
}

// The heartbeat's Redis traffic per version (docs/sidekiq-wire.md#heartbeat):
// 6.4.1 one MULTI with the stats and the work hash (EXPIRE even when idle),
// HMSET; 7.0.0-7.2.2 the work hash in a pipeline, one HSET per thread and
// always an EXPIRE, HMSET in 7.0.x; 7.2.3+ a MULTI without EXPIRE when
// idle, HSET.
func TestHeartbeatTrafficPerVersion(t *testing.T) {
	t.Parallel()
	cases := []struct {
		v    wire.Version
		cmds []string // command names of an idle beat after one processed job
	}{
		{wire.Version6, []string{"multi", "incrby", "incrby", "expire", "incrby", "incrby", "expire", "unlink", "expire", "exec",
			"ping", "multi", "sadd", "exists", "hmset", "expire", "rpop", "exec"}},
		{wire.Version{Major: 7}, []string{"incrby", "incrby", "expire", "incrby", "incrby", "expire", "unlink", "expire",
			"ping", "multi", "sadd", "exists", "hmset", "expire", "rpop", "exec"}},
		{wire.Version{Major: 7, Minor: 2, Patch: 2}, []string{"incrby", "incrby", "expire", "incrby", "incrby", "expire", "unlink", "expire",
			"ping", "multi", "sadd", "exists", "hset", "expire", "rpop", "exec"}},
		{wire.Version7, []string{"incrby", "incrby", "expire", "incrby", "incrby", "expire", "multi", "unlink", "exec",
			"ping", "multi", "sadd", "exists", "hset", "expire", "rpop", "exec"}},
	}
	for _, c := range cases {
		t.Run(c.v.String(), func(t *testing.T) {
			b := newBeatBundle(t, c.v, nil)
			b.counters.Add(0, 1, 0)
			mon := b.rs.StartMonitor(t)
			require.NoError(t, b.hb.Beat(context.Background()))
			require.Equal(t, c.cmds, redistest.Names(mon.Lines(t)))
			h, err := redis.StringMap(b.conn.Do("HGETALL", "host:1:abc"))
			require.NoError(t, err)
			require.NotContains(t, h, "concurrency", "a hash field only from 8.1.2")
			require.Equal(t, "0", h["busy"])
			require.Equal(t, "false", h["quiet"])
		})
	}
}

// Busy work hash with two running jobs: 7.0.0-7.2.2 send one HSET per
// thread, 7.2.3+ one HSET with every pair.
func TestHeartbeatWritesTheWorkHash(t *testing.T) {
	t.Parallel()
	for _, v := range []wire.Version{{Major: 7, Minor: 1}, wire.Version7} {
		t.Run(v.String(), func(t *testing.T) {
			b := newBeatBundle(t, v, nil)
			b.work = []Work{
				{TID: "t1", Queue: "default", Raw: []byte(`{"a":1}`), RunAt: time.Unix(1795296573, 0)},
				{TID: "t2", Queue: "default", Raw: []byte(`{"a":2}`), RunAt: time.Unix(1795296573, 0)},
			}
			mon := b.rs.StartMonitor(t)
			require.NoError(t, b.hb.Beat(context.Background()))
			workKey := contract.WorkKey("host:1:abc", v)
			var hsets []string
			for _, l := range mon.Lines(t) {
				if strings.HasPrefix(strings.ToLower(l), `"hset" "`+strings.ToLower(workKey)) {
					hsets = append(hsets, l)
				}
			}
			if v.AtLeast(7, 2, 3) {
				require.Len(t, hsets, 1)
			} else {
				require.Len(t, hsets, 2)
			}
			work, err := redis.StringMap(b.conn.Do("HGETALL", workKey))
			require.NoError(t, err)
			require.Equal(t, map[string]string{
				"t1": `{"queue":"default","payload":"{\"a\":1}","run_at":1795296573}`,
				"t2": `{"queue":"default","payload":"{\"a\":2}","run_at":1795296573}`,
			}, work)
			busy, _ := redis.String(b.conn.Do("HGET", "host:1:abc", "busy"))
			require.Equal(t, "2", busy)
		})
	}
}

// A signal the Web UI left in <identity>-signals reaches OnSignal; the
// quiet flag is reported.
func TestHeartbeatDeliversSignalsAndReportsQuiet(t *testing.T) {
	t.Parallel()
	b := newBeatBundle(t, wire.Version7, nil)
	_, err := b.conn.Do("LPUSH", "host:1:abc-signals", "TSTP")
	require.NoError(t, err)
	require.NoError(t, b.hb.Beat(context.Background()))
	require.Equal(t, "TSTP", <-b.signals)
	b.quiet.Store(true)
	require.NoError(t, b.hb.Beat(context.Background()))
	q, _ := redis.String(b.conn.Do("HGET", "host:1:abc", "quiet"))
	require.Equal(t, "true", q)
	require.Empty(t, b.signals)
}

// A beat that cannot reach Redis keeps the counts for the next one.
func TestHeartbeatKeepsCountsOnFailedBeat(t *testing.T) {
	t.Parallel()
	b := newBeatBundle(t, wire.Version7, nil)
	b.counters.Add(0, 3, 1)
	b.rs.Kill()
	require.Error(t, b.hb.Beat(context.Background()))
	p, f := b.counters.Pending()
	require.Equal(t, [2]int64{3, 1}, [2]int64{p, f})
}

// Unregister flushes the counts and leaves the registry: SREM processes and
// UNLINK of the work hash; the process hash expires by itself.
func TestHeartbeatUnregister(t *testing.T) {
	t.Parallel()
	b := newBeatBundle(t, wire.Version7, nil)
	require.NoError(t, b.hb.Beat(context.Background()))
	b.counters.Add(0, 2, 1)
	require.NoError(t, b.hb.Unregister(context.Background()))
	st, err := redis.Strings(b.conn.Do("MGET", "stat:processed", "stat:failed"))
	require.NoError(t, err)
	require.Equal(t, []string{"2", "1"}, st)
	n, _ := redis.Int(b.conn.Do("SISMEMBER", contract.KeyProcesses, "host:1:abc"))
	require.Zero(t, n)
}

// Start beats every Interval until Stop.
func TestHeartbeatStartStop(t *testing.T) {
	t.Parallel()
	b := newBeatBundle(t, wire.Version7, func(c *HeartbeatConfig) { c.Interval = 10 * time.Millisecond })
	_, err := b.conn.Do("LPUSH", "host:1:abc-signals", "TTIN")
	require.NoError(t, err)
	require.NoError(t, b.hb.Start(context.Background()))
	require.Equal(t, "TTIN", <-b.signals, "a beat of the loop popped the signal")
	require.NoError(t, b.hb.Stop(context.Background()))
	require.NoError(t, b.hb.Stop(context.Background()), "twice")
}

// The format for all readers writes the running jobs under both work-hash
// keys (6.4.1's and 6.4.2+'s) and the 8.1.2+ concurrency field; a switch
// of format removes the key the new one no longer writes, at once.
func TestHeartbeatForAllReadersAndSwitches(t *testing.T) {
	t.Parallel()
	b := newBeatBundle(t, wire.Version7, nil)
	b.hb.cfg.Format.Set(contract.FormatForAll)
	b.work = []Work{{TID: "t1", Queue: "default", Raw: []byte(`{"a":1}`), RunAt: time.Unix(1795296573, 0)}}
	require.NoError(t, b.hb.Beat(context.Background()))
	want := map[string]string{"t1": `{"queue":"default","payload":"{\"a\":1}","run_at":1795296573}`}
	for _, key := range []string{"host:1:abc:work", "host:1:abc:workers"} {
		work, err := redis.StringMap(b.conn.Do("HGETALL", key))
		require.NoError(t, err)
		require.Equal(t, want, work, key)
		require.InDelta(t, 60, ttl(t, b.conn, key), 1, key)
	}
	h, err := redis.StringMap(b.conn.Do("HGETALL", "host:1:abc"))
	require.NoError(t, err)
	require.Equal(t, "4", h["concurrency"])
	require.Contains(t, h["info"], `"version":"7.3.10"`)

	// An older Ruby process joined: 6.4.1 writes only :workers, every 5 s.
	b.hb.cfg.Format.Set(contract.Format{Version: wire.Version6})
	require.Equal(t, 5*time.Second, b.hb.Interval())
	require.NoError(t, b.hb.Beat(context.Background()))
	n, err := redis.Int(b.conn.Do("EXISTS", "host:1:abc:work"))
	require.NoError(t, err)
	require.Zero(t, n, "the 6.4.2+ key went with the switch")
	work, err := redis.StringMap(b.conn.Do("HGETALL", "host:1:abc:workers"))
	require.NoError(t, err)
	require.Equal(t, want, work)
	h, err = redis.StringMap(b.conn.Do("HGETALL", "host:1:abc"))
	require.NoError(t, err)
	require.NotContains(t, h, "concurrency")
	require.NotContains(t, h["info"], `"version"`, "6.4.1's info")

	// At stop both layouts go.
	b.hb.cfg.Format.Set(contract.FormatForAll)
	require.NoError(t, b.hb.Beat(context.Background()))
	require.NoError(t, b.hb.Unregister(context.Background()))
	n, err = redis.Int(b.conn.Do("EXISTS", "host:1:abc:work", "host:1:abc:workers"))
	require.NoError(t, err)
	require.Zero(t, n)
}

func ttl(t *testing.T, c redis.Conn, key string) int {
	t.Helper()
	n, err := redis.Int(c.Do("TTL", key))
	require.NoError(t, err)
	return n
}

// A captured Ruby process (`sidekiq -c 3 -q default,2 -q slow,1 -g
// captag`, testdata/ruby-fixtures/<version>) and its busy beat.
type capturedProcess struct {
	version         string
	v               wire.Version
	pid             int
	identity        string
	startedAt, beat float64 // the boot time, the 2nd beat's time
	tid             string
	runAt           int64
}

var (
	captured7 = capturedProcess{"7.3.10", wire.Version7, 19741, "vm:19741:68474479f68e",
		1795443861.8323052, 1795443871.835928, "eip", 1795443862}
	captured8 = capturedProcess{"8.1.7", wire.Version8, 26685, "vm:26685:c02d7003754a",
		1795692206.0337632, 1795692216.0384848, "lgh", 1795692206}
)

func (c capturedProcess) info() *ProcessInfo {
	return &ProcessInfo{PID: c.pid, Identity: c.identity, Hostname: "vm", Tag: "captag", Concurrency: 3,
		StartedAt: contract.FromEpochSeconds(c.startedAt),
		Queues:    []wire.QueueWeight{{Name: "default", Weight: 2}, {Name: "slow", Weight: 1}}}
}

// monitorArgs drops the time and client of a captured MONITOR line and
// lower-cases the command name (its case is the client library's).
func monitorArgs(line string) string {
	if i := strings.Index(line, `] "`); i >= 0 {
		line = line[i+2:]
	}
	name, rest, _ := strings.Cut(line, " ")
	return strings.ToLower(name) + " " + rest
}

// A 7.3.10 or 8.1.7 heartbeat sends what the captured Ruby beat of that
// release sent, command for command and byte for byte, but for the
// measured rtt_us and rss and gojob's own bookkeeping key beside Ruby's
// (contract.KeyGojobMetricsKeys): the stats pipeline, the work hash in a
// MULTI, PING, the process hash in a MULTI (its fields in Ruby's order),
// then the job metrics in the order Ruby touched them. The process hash has
// the captured field set; the captured HGETALL order itself is Redis's: the
// info value is longer than hash-max-listpack-value, so the hash is a
// hashtable, whose order depends on the server's random hash seed.
func TestHeartbeatMatchesRubyCapture(t *testing.T) {
	t.Parallel()
	for _, c := range []capturedProcess{captured7, captured8} {
		t.Run(c.version, func(t *testing.T) {
			t.Parallel()
			heartbeatMatchesCapture(t, c)
		})
	}
}

func heartbeatMatchesCapture(t *testing.T, c capturedProcess) {
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	clk := clocktest.NewFake(contract.FromEpochSeconds(c.startedAt + 0.0015))
	counters, metrics := &Counters{}, NewJobMetrics(1)
	var work []Work
	log := zerolog.New(zerolog.NewTestWriter(t))
	hb, err := NewHeartbeat(&HeartbeatConfig{Pool: pool, Format: contract.FixedFormat(c.v), Clock: clk, Logger: log,
		Outage: &redisx.OutageLog{Log: &log}, Info: c.info(), Counters: counters, Metrics: metrics,
		Work: func() []Work { return work }, Quiet: func() bool { return false }})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, hb.Beat(ctx)) // the boot beat

	// Beat 2: four jobs done (three failed), SlowJob running.
	var slow struct {
		Payload string `json:"payload"`
	}
	require.NoError(t, json.Unmarshal(rubyfixtures.Read(t, c.version, "work.json"), &slow))
	work = []Work{{TID: c.tid, Queue: "slow", Raw: []byte(slow.Payload), RunAt: time.Unix(c.runAt, 0)}}
	counters.Add(0, 4, 3)
	metrics.Record(0, "RecJob", time.Millisecond, false)
	metrics.Record(0, "BtFailJob", 0, true)
	metrics.Record(0, "DieJob", 0, true)
	metrics.Record(0, "NoRetryJob", 0, true)
	clk.Set(contract.FromEpochSeconds(c.beat))
	mon := rs.StartMonitor(t)
	require.NoError(t, hb.Beat(ctx))
	var got []string
	for _, l := range mon.Lines(t) {
		if !strings.Contains(l, `"`+contract.KeyGojobMetricsKeys+`"`) {
			got = append(got, l)
		}
	}

	var want []string
	for _, l := range strings.Split(strings.TrimSpace(string(rubyfixtures.Read(t, c.version, "heartbeat_busy.monitor"))), "\n") {
		want = append(want, monitorArgs(l))
	}
	measured := regexp.MustCompile(`"(rtt_us|rss)" "\d+"`)
	require.Len(t, got, len(want))
	for i := range want {
		g := measured.ReplaceAllString(monitorArgs(got[i]), `"$1" "N"`)
		w := measured.ReplaceAllString(want[i], `"$1" "N"`)
		require.Equal(t, w, g, "command %d", i)
	}

	fields, err := redis.Strings(conn.Do("HKEYS", c.identity))
	require.NoError(t, err)
	var wantFields []string
	for _, p := range rubyfixtures.Pairs(t, c.version, "process_hash.json") {
		wantFields = append(wantFields, p[0])
	}
	require.ElementsMatch(t, wantFields, fields)
	enc, err := redis.String(conn.Do("OBJECT", "ENCODING", c.identity))
	require.NoError(t, err)
	require.Equal(t, "hashtable", enc)
}
