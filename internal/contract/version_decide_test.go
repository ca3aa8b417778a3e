package contract_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

type decideBundle struct {
	pool *redis.Pool
	conn redis.Conn
	now  time.Time
}

func newDecideBundle(t *testing.T) *decideBundle {
	t.Helper()
	pool := redistest.Start(t).Pool(t)
	conn := pool.Get()
	t.Cleanup(func() { conn.Close() })
	return &decideBundle{pool: pool, conn: conn, now: time.Date(2026, 11, 23, 14, 24, 30, 0, time.UTC)}
}

func (b *decideBundle) do(t *testing.T, args ...any) {
	t.Helper()
	_, err := b.conn.Do(args[0].(string), args[1:]...)
	require.NoError(t, err)
}

// process registers a live process whose info is info.
func (b *decideBundle) process(t *testing.T, id, info string) {
	t.Helper()
	b.do(t, "SADD", "processes", id)
	b.do(t, "HSET", id, "info", info)
}

func (b *decideBundle) decide(t *testing.T) contract.Decision {
	t.Helper()
	d, err := contract.DecideFormat(context.Background(), b.pool, b.now)
	require.NoError(t, err)
	return d
}

// The oldest live Ruby process decides; a process that reports no version
// is 6.x; one in processes without a hash is not live; gojob processes do
// not count, so gojob never follows its own writes.
func TestDecideFormatFollowsTheOldestLiveRubyProcess(t *testing.T) {
	t.Parallel()
	b := newDecideBundle(t)
	b.process(t, "a:1:aaaaaaaaaaaa", `{"hostname":"a","version":"8.1.7"}`)
	b.process(t, "b:2:bbbbbbbbbbbb", `{"hostname":"b","version":"7.3.10"}`)
	b.do(t, "SADD", "processes", "gone:3:cccccccccccc")
	b.process(t, "go:4:dddddddddddd", `{"hostname":"go","version":"7.0.2"}`)
	b.do(t, "ZADD", contract.KeyGojobProcesses, 1795443870, "go:4:dddddddddddd")
	d := b.decide(t)
	require.Equal(t, contract.Format{Version: wire.Version7}, d.Format)
	require.Equal(t, contract.SourceLive, d.Source)
	require.Equal(t, []string{"a:1:aaaaaaaaaaaa=8.1.7", "b:2:bbbbbbbbbbbb=7.3.10"}, d.Ruby)

	b.process(t, "c:5:eeeeeeeeeeee", `{"hostname":"c","tag":""}`)
	d = b.decide(t)
	require.Equal(t, contract.Format{Version: wire.Version6}, d.Format, "6.x reports no version")
}

// With no live Ruby process the record decides; a decision is recorded
// once, and a recorded one is not recorded again.
func TestDecideFormatUsesTheRecordWhenNoRubyProcessIsLive(t *testing.T) {
	t.Parallel()
	b := newDecideBundle(t)
	b.process(t, "r:1:aaaaaaaaaaaa", `{"hostname":"r","version":"7.2.0"}`)
	d := b.decide(t)
	require.Equal(t, wire.Version{Major: 7, Minor: 2}, d.Format.Version)
	require.NoError(t, contract.RecordFormat(context.Background(), b.pool, d, b.now))
	rec, err := redis.String(b.conn.Do("GET", contract.KeyRecordedFormat))
	require.NoError(t, err)
	require.JSONEq(t, `{"version":"7.2.0","source":"live","at":1795443870.0}`, rec)

	b.do(t, "DEL", "r:1:aaaaaaaaaaaa") // the last Ruby process is gone
	d = b.decide(t)
	require.Equal(t, contract.Format{Version: wire.Version{Major: 7, Minor: 2}}, d.Format)
	require.Equal(t, contract.SourceRecorded, d.Source)
	b.do(t, "SET", contract.KeyRecordedFormat, "garbage")
	require.NoError(t, contract.RecordFormat(context.Background(), b.pool, d, b.now.Add(time.Hour)))
	rec, _ = redis.String(b.conn.Do("GET", contract.KeyRecordedFormat))
	require.Equal(t, "garbage", rec, "a recorded decision is not written back")
}

// With neither live processes nor a record, what Ruby left decides: one
// family's evidence picks its version, mixed or no evidence the format
// every reader shows.
func TestDecideFormatReadsWhatRubyLeft(t *testing.T) {
	t.Parallel()
	frames := []string{"app/jobs/fail_job.rb:12:in 'FailJob#level2'", "app/jobs/fail_job.rb:8:in 'FailJob#level1'",
		"sidekiq-7.3.10/lib/sidekiq/processor.rb:220:in 'Sidekiq::Processor#execute_job'"}
	strictBT := contract.EncodeBacktrace(frames, wire.Version7)
	mimeBT := contract.EncodeBacktrace(frames, wire.Version6)
	entry := func(ts, bt string) string {
		j := `{"retry":true,"queue":"default","args":[],"class":"X","jid":"0123456789abcdef01234567","created_at":` + ts + `,"failed_at":` + ts
		if bt != "" {
			j += `,"error_backtrace":` + string(rubyjson.StringValue(bt).Encode())
		}
		return j + "}"
	}
	cases := []struct {
		name   string
		setup  func(t *testing.T, b *decideBundle)
		want   contract.Format
		source string
	}{
		{"nothing", func(*testing.T, *decideBundle) {}, contract.FormatForAll, contract.SourceNone},
		{"7.x metrics of two hours ago", func(t *testing.T, b *decideBundle) {
			b.do(t, "HSET", "j|20261123|12:24", "X|p", 1)
		}, contract.Format{Version: wire.Version7}, contract.SourceEvidence},
		{"7.x metrics of nine hours ago are gone", func(t *testing.T, b *decideBundle) {
			b.do(t, "HSET", "j|20261123|5:24", "X|p", 1)
		}, contract.FormatForAll, contract.SourceNone},
		{"8.x metrics", func(t *testing.T, b *decideBundle) {
			b.do(t, "HSET", "j|261123|14:20", "X|p", 1)
		}, contract.Format{Version: wire.Version8}, contract.SourceEvidence},
		{"8.x millisecond dead entry", func(t *testing.T, b *decideBundle) {
			b.do(t, "ZADD", "dead", 1795443862.5, entry("1795443862324", ""))
		}, contract.Format{Version: wire.Version8}, contract.SourceEvidence},
		{"strict backtrace in retry", func(t *testing.T, b *decideBundle) {
			b.do(t, "ZADD", "retry", 1795443882.5, entry("1795443862.324", strictBT))
		}, contract.Format{Version: wire.Version7}, contract.SourceEvidence},
		{"MIME backtrace in dead", func(t *testing.T, b *decideBundle) {
			b.do(t, "ZADD", "dead", 1795443862.5, entry("1795443862.324", mimeBT))
		}, contract.Format{Version: wire.Version6}, contract.SourceEvidence},
		{"a dying 6.4.1 process's work hash", func(t *testing.T, b *decideBundle) {
			b.do(t, "SADD", "processes", "old:1:aaaaaaaaaaaa")
			b.do(t, "HSET", "old:1:aaaaaaaaaaaa:workers", "abc", "{}")
		}, contract.Format{Version: wire.Version6}, contract.SourceEvidence},
		{"a dying 6.4.1 process and 7.x metrics", func(t *testing.T, b *decideBundle) {
			b.do(t, "SADD", "processes", "old:1:aaaaaaaaaaaa")
			b.do(t, "HSET", "old:1:aaaaaaaaaaaa:workers", "abc", "{}")
			b.do(t, "HSET", "j|20261123|14:24", "X|p", 1)
		}, contract.FormatForAll, contract.SourceEvidence},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newDecideBundle(t)
			c.setup(t, b)
			d := b.decide(t)
			require.Equal(t, c.want, d.Format, "%v", d.Evidence)
			require.Equal(t, c.source, d.Source)
			if c.source == contract.SourceEvidence {
				require.NotEmpty(t, d.Evidence)
			}
		})
	}
}

// A record holds for RecordedFormatTTL; then, with no live Ruby process,
// the format for all readers is written without reading what Ruby left
// (older still). A record set by hand never ages; a for-all record needs
// no aging.
func TestDecideFormatRecordAgesOut(t *testing.T) {
	t.Parallel()
	b := newDecideBundle(t)
	at := contract.Score(b.now.Add(-contract.RecordedFormatTTL - time.Second))
	b.do(t, "ZADD", "dead", 1795443862.5, `{"retry":0,"queue":"default","args":[],"class":"X","jid":"0123456789abcdef01234567","created_at":1795443862324,"failed_at":1795443862324}`)
	b.do(t, "SET", contract.KeyRecordedFormat, `{"version":"6.4.1","source":"live","at":`+at+`}`)
	d := b.decide(t)
	require.Equal(t, contract.FormatForAll, d.Format)
	require.Equal(t, contract.SourceAged, d.Source)
	require.Contains(t, d.Reason(), "6.4.1")
	require.NoError(t, contract.RecordFormat(context.Background(), b.pool, d, b.now))
	rec, _ := redis.String(b.conn.Do("GET", contract.KeyRecordedFormat))
	require.Contains(t, rec, `"6.4.1"`, "an aged record stays as it is")

	b.do(t, "SET", contract.KeyRecordedFormat, `{"version":"7.2.0","source":"evidence","at":`+contract.Score(b.now.Add(-time.Minute))+`}`)
	require.Equal(t, contract.SourceRecorded, b.decide(t).Source, "a recent record holds")

	b.do(t, "SET", contract.KeyRecordedFormat, `{"version":"7.2.0","source":"manual","at":0}`)
	d = b.decide(t)
	require.Equal(t, contract.SourceRecorded, d.Source, "set by hand")
	require.Equal(t, wire.Version{Major: 7, Minor: 2}, d.Format.Version)
}

// A decision from live processes rewrites the record's time once a minute
// at most, so that the record's age is the time since they were last seen.
func TestRecordFormatRefreshesLiveRecords(t *testing.T) {
	t.Parallel()
	b := newDecideBundle(t)
	b.process(t, "r:1:aaaaaaaaaaaa", `{"hostname":"r","version":"7.3.10"}`)
	record := func(at time.Time) string {
		t.Helper()
		d, err := contract.DecideFormat(context.Background(), b.pool, at)
		require.NoError(t, err)
		require.NoError(t, contract.RecordFormat(context.Background(), b.pool, d, at))
		rec, err := redis.String(b.conn.Do("GET", contract.KeyRecordedFormat))
		require.NoError(t, err)
		return rec
	}
	first := record(b.now)
	require.Equal(t, first, record(b.now.Add(30*time.Second)))
	require.JSONEq(t, `{"version":"7.3.10","source":"live","at":`+contract.Score(b.now.Add(90*time.Second))+`}`,
		record(b.now.Add(90*time.Second)))
}

// Metrics keys gojob wrote (contract.KeyGojobMetricsKeys) are not evidence:
// a Redis holding only gojob's own 8.x keys shows nothing; a 7.x key of
// the same minute that Ruby wrote still counts.
func TestDecideFormatIgnoresGojobsOwnMetrics(t *testing.T) {
	t.Parallel()
	b := newDecideBundle(t)
	keys, _ := contract.MetricsKeys(wire.Version8, b.now)
	for _, k := range keys {
		b.do(t, "HSET", k, "X|p", 1)
		b.do(t, "ZADD", contract.KeyGojobMetricsKeys, contract.Score(b.now), k)
	}
	d := b.decide(t)
	require.Equal(t, contract.SourceNone, d.Source, "%v", d.Evidence)
	require.Equal(t, contract.FormatForAll, d.Format)

	k7, _ := contract.MetricsKeys(wire.Version7, b.now.Add(-time.Hour))
	b.do(t, "HSET", k7[0], "X|p", 1)
	d = b.decide(t)
	require.Equal(t, contract.SourceEvidence, d.Source)
	require.Equal(t, contract.Format{Version: wire.Version7}, d.Format)
	require.Equal(t, []string{"7.x metrics keys in 1 of the last 480 minutes"}, d.Evidence)
}

// Retry and dead entries whose jid gojob marked (contract.KeyGojobEntries)
// are not evidence; an unmarked one is.
func TestDecideFormatIgnoresGojobsOwnEntries(t *testing.T) {
	t.Parallel()
	b := newDecideBundle(t)
	own := `{"retry":0,"queue":"default","args":[],"class":"X","jid":"0000000000000000000000aa","created_at":1795443862324,"failed_at":1795443862324}`
	b.do(t, "ZADD", "dead", 1795443862.5, own)
	b.do(t, "ZADD", contract.KeyGojobEntries, 1795443862.5, "0000000000000000000000aa")
	d := b.decide(t)
	require.Equal(t, contract.SourceNone, d.Source, "%v", d.Evidence)

	b.do(t, "ZADD", "dead", 1795443863.5, `{"retry":0,"queue":"default","args":[],"class":"X","jid":"0000000000000000000000bb","created_at":1795443862324,"failed_at":1795443862324}`)
	d = b.decide(t)
	require.Equal(t, contract.SourceEvidence, d.Source)
	require.Equal(t, []string{"8.x millisecond failed_at in dead entry 0000000000000000000000bb"}, d.Evidence)
}

// The evidence script names the keys it reads itself: they are the
// contract's.
func TestEvidenceScriptReadsTheContractsKeys(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("lua/evidence.lua")
	require.NoError(t, err)
	for _, k := range []string{contract.KeyGojobMetricsKeys, contract.KeyRetry, contract.KeyDead, contract.KeyGojobEntries} {
		require.Contains(t, string(b), "'"+k+"'")
	}
}
