package wire_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/rubyfloat"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The wire fixtures in testdata/ruby-fixtures: 6.4.1/ is captured from real
// Ruby Sidekiq by capture.sh; 7.3.10/ and 8.1.7/ are cut by
// captured_7_3_10.rb and captured_8_1_7.rb from captures of real Ruby
// Sidekiq, copied verbatim in <version>/capture/ (8.1.7/ adds two
// hand-written payloads of an upgraded cluster). Each directory's
// manifest.json lists its files; the "expect" blocks hold Ruby's own reading
// of each value. These tests need neither Ruby nor Redis; the tests that
// compare what gojob writes with them live beside the writers (sidekiq,
// maintenance).
const fixturesRoot = "../../testdata/ruby-fixtures"

type fixtureManifest struct {
	SidekiqVersion string            `json:"sidekiq_version"`
	Source         string            `json:"source"`
	Capture        *fixtureCapture   `json:"capture"`
	Fixtures       []fixtureEntry    `json:"fixtures"`
	Observations   []json.RawMessage `json:"observations"`

	dir     string
	version wire.Version
}

type fixtureEntry struct {
	File       string          `json:"file"`
	Kind       string          `json:"kind"`
	ProducedBy string          `json:"produced_by"`
	Source     string          `json:"source"`
	Group      string          `json:"group"`
	Redis      *fixtureRedis   `json:"redis"`
	Expect     json.RawMessage `json:"expect"`
}

// fixtureCapture pins the verbatim copy of a capture (capture/).
type fixtureCapture struct {
	CopiedFrom string            `json:"copied_from"`
	SHA256     map[string]string `json:"sha256"`
}

type fixtureRedis struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Field string `json:"field"`
	Score string `json:"score"`
	// Delay is perform_in/perform_at's delay in seconds (schedule).
	Delay *float64 `json:"delay"`
}

type jobExpect struct {
	Class              *string                    `json:"class"`
	Queue              *string                    `json:"queue"`
	JID                *string                    `json:"jid"`
	Wrapped            *string                    `json:"wrapped"`
	ErrorClass         *string                    `json:"error_class"`
	ErrorMessage       *string                    `json:"error_message"`
	Args               json.RawMessage            `json:"args"`
	RetryPresent       bool                       `json:"retry_present"`
	Retry              json.RawMessage            `json:"retry"`
	RetryEnabled       bool                       `json:"retry_enabled"`
	RetryMax           *int                       `json:"retry_max"`
	RetryCount         *int                       `json:"retry_count"`
	BacktraceAll       bool                       `json:"backtrace_all"`
	BacktraceLimit     int                        `json:"backtrace_limit"`
	Timestamps         map[string]timestampExpect `json:"timestamps"`
	ErrorBacktraceForm string                     `json:"error_backtrace_form"`
	ErrorBacktrace     []string                   `json:"error_backtrace"`
	Keys               []string                   `json:"keys"`
	RubyReencode       *string                    `json:"ruby_reencode"`
}

type timestampExpect struct {
	Lexical string `json:"lexical"`
	UnixNS  int64  `json:"unix_ns"`
}

type processInfoExpect struct {
	Identity     string   `json:"identity"`
	Hostname     string   `json:"hostname"`
	PID          int      `json:"pid"`
	Concurrency  *int     `json:"concurrency"`
	Tag          *string  `json:"tag"`
	Queues       []string `json:"queues"`
	Version      *string  `json:"version"`
	Embedded     *bool    `json:"embedded"`
	Keys         []string `json:"keys"`
	RubyReencode *string  `json:"ruby_reencode"`
}

type workExpect struct {
	Queue           string   `json:"queue"`
	PayloadIsString bool     `json:"payload_is_string"`
	JID             string   `json:"jid"`
	Keys            []string `json:"keys"`
	RubyReencode    *string  `json:"ruby_reencode"`
}

type formatExpect struct {
	Format string `json:"format"`
}

var jidRE = regexp.MustCompile(`^[0-9a-f]{24}$`)

func loadManifests(t *testing.T) []*fixtureManifest {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(fixturesRoot, "*", "manifest.json"))
	require.NoError(t, err)
	var out []*fixtureManifest
	for _, p := range paths {
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		m := &fixtureManifest{dir: filepath.Dir(p)}
		require.NoError(t, json.Unmarshal(data, m), p)
		m.version, err = contract.ParseVersion(m.SidekiqVersion)
		require.NoError(t, err, p)
		require.Equal(t, filepath.Base(m.dir), m.SidekiqVersion, "directory name is the version")
		out = append(out, m)
	}
	versions := make([]string, len(out))
	for i, m := range out {
		versions[i] = m.SidekiqVersion
	}
	require.Subset(t, versions, []string{"6.4.1", "7.3.10", "8.1.7"})
	return out
}

func (m *fixtureManifest) read(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(m.dir, file))
	require.NoError(t, err)
	return data
}

func decodeExpect[T any](t *testing.T, raw json.RawMessage) T {
	t.Helper()
	var e T
	if len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, &e))
	}
	return e
}

// TestFixtures checks every fixture listed in every manifest, by kind.
func TestFixtures(t *testing.T) {
	t.Parallel()
	for _, m := range loadManifests(t) {
		for _, f := range m.Fixtures {
			t.Run(m.SidekiqVersion+"/"+f.File, func(t *testing.T) {
				t.Parallel()
				data := m.read(t, f.File)
				switch f.Kind {
				case "job":
					checkJobFixture(t, m, f, data)
				case "unparsable":
					_, err := wire.ParseJob(data)
					require.Error(t, err)
					var syn *rubyjson.SyntaxError
					require.True(t, errors.As(err, &syn), "want a *rubyjson.SyntaxError, got %v", err)
				case "process_info":
					checkProcessInfo(t, f, data)
				case "work":
					checkWork(t, f, data)
				case "hash_field", "stat":
					checkScalar(t, f, data)
				case "set_members":
					var members []string
					require.NoError(t, json.Unmarshal(data, &members))
					require.NotEmpty(t, members)
				case "log":
					require.NotEmpty(t, data)
				case "monitor":
					checkMonitor(t, data)
				case "process_hash":
					checkProcessHash(t, m, data)
				case "metrics_counters":
					checkMetricsCounters(t, data)
				case "histogram":
					require.Zero(t, len(data)%2, "u16 counters")
					require.LessOrEqual(t, len(data), 2*26, "26 buckets at most")
				default:
					t.Fatalf("fixture kind %q has no test", f.Kind)
				}
			})
		}
	}
}

// TestFixtureManifestsComplete makes sure no fixture file goes untested and
// that every hand-written manifest says so.
func TestFixtureManifestsComplete(t *testing.T) {
	t.Parallel()
	for _, m := range loadManifests(t) {
		listed := map[string]bool{"manifest.json": true}
		for _, f := range m.Fixtures {
			require.False(t, listed[f.File], "%s listed twice", f.File)
			listed[f.File] = true
			require.NotEmpty(t, f.ProducedBy, f.File)
			switch {
			case strings.HasPrefix(m.Source, "hand-written"):
				require.True(t, strings.HasPrefix(f.Source, "hand-written from spec"), "%s/%s must be marked hand-written", m.SidekiqVersion, f.File)
			case m.Capture != nil && strings.HasPrefix(f.Source, "hand-written:"):
				// A case no capture shows; the manifest's source says
				// that some are hand-written.
				require.Contains(t, m.Source, "hand-written", "%s/%s: the manifest must say it holds hand-written entries", m.SidekiqVersion, f.File)
			case m.Capture != nil:
				require.True(t, strings.HasPrefix(f.Source, "captured: capture/"), "%s/%s must name its capture file", m.SidekiqVersion, f.File)
			}
		}
		entries, err := os.ReadDir(m.dir)
		require.NoError(t, err)
		for _, e := range entries {
			if e.IsDir() && e.Name() == "capture" && m.Capture != nil {
				checkCaptureCopy(t, m)
				continue
			}
			require.True(t, listed[e.Name()], "%s/%s is not in the manifest", m.SidekiqVersion, e.Name())
		}
	}
}

// checkCaptureCopy makes sure capture/ is the capture the manifest was cut
// from, unchanged: the same files with the same SHA-256.
func checkCaptureCopy(t *testing.T, m *fixtureManifest) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(m.dir, "capture"))
	require.NoError(t, err)
	got := map[string]string{}
	for _, e := range entries {
		data := m.read(t, filepath.Join("capture", e.Name()))
		sum := sha256.Sum256(data)
		got[e.Name()] = hex.EncodeToString(sum[:])
	}
	require.Equal(t, m.Capture.SHA256, got, "capture/ differs from the copy the manifest pins")
}

// monitorLineRE is one redis-cli MONITOR line: time, [db client], arguments.
var monitorLineRE = regexp.MustCompile(`^\d+\.\d+ \[\d+ [^\]]+\]( "(?:[^"\\]|\\.)*")+$`)

func checkMonitor(t *testing.T, data []byte) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	require.NotEmpty(t, lines)
	for _, l := range lines {
		require.Regexp(t, monitorLineRE, l)
	}
}

// checkProcessHash reads a process hash as HGETALL pairs: Ruby's field set
// below 8.1.2 (no concurrency field), an info that reads as process info.
func checkProcessHash(t *testing.T, m *fixtureManifest, data []byte) {
	t.Helper()
	var pairs [][2]string
	require.NoError(t, json.Unmarshal(data, &pairs))
	fields := map[string]string{}
	for _, p := range pairs {
		fields[p[0]] = p[1]
	}
	want := []string{"info", "busy", "beat", "rtt_us", "quiet", "rss"}
	if m.version.AtLeast(8, 1, 2) {
		want = append(want, "concurrency")
	}
	require.ElementsMatch(t, want, slices.Collect(maps.Keys(fields)))
	_, err := rubyjson.ParseObject([]byte(fields["info"]))
	require.NoError(t, err)
	beat, err := strconv.ParseFloat(fields["beat"], 64)
	require.NoError(t, err)
	require.Equal(t, fields["beat"], rubyfloat.Format(beat), "beat is Float#to_s")
	require.Contains(t, []string{"true", "false"}, fields["quiet"])
}

// checkMetricsCounters reads a j| hash as HGETALL pairs: "<Class>|ms|p|f"
// fields with integer values.
func checkMetricsCounters(t *testing.T, data []byte) {
	t.Helper()
	var pairs [][2]string
	require.NoError(t, json.Unmarshal(data, &pairs))
	require.NotEmpty(t, pairs)
	for _, p := range pairs {
		require.Regexp(t, `^[A-Za-z0-9_:]+\|(ms|p|f)$`, p[0])
		_, err := strconv.ParseInt(p[1], 10, 64)
		require.NoError(t, err, p[1])
	}
}

// TestFixtureGroups checks the push_bulk group shares created_at (one
// normalize per call in Ruby).
func TestFixtureGroups(t *testing.T) {
	t.Parallel()
	n := 0
	for _, m := range loadManifests(t) {
		created := map[string][]string{}
		for _, f := range m.Fixtures {
			if f.Group == "" {
				continue
			}
			j, err := wire.ParseJob(m.read(t, f.File))
			require.NoError(t, err)
			v, ok := j.Get("created_at")
			require.True(t, ok)
			created[f.Group] = append(created[f.Group], string(v.Encode()))
			n++
		}
		for g, ts := range created {
			require.Greater(t, len(ts), 1, g)
			for _, x := range ts {
				require.Equal(t, ts[0], x, "group %s shares created_at", g)
			}
		}
	}
	require.NotZero(t, n, "the 6.4.1 capture has a push_bulk group")
}

func checkJobFixture(t *testing.T, m *fixtureManifest, f fixtureEntry, data []byte) {
	e := decodeExpect[jobExpect](t, f.Expect)
	j, err := wire.ParseJob(data)
	require.NoError(t, err)

	// Bytes: unchanged jobs move their original bytes; re-encoding the
	// payload (Map().Encode) is Ruby's generate (identical for everything
	// Ruby wrote).
	require.Equal(t, string(data), string(j.Bytes()))
	want := string(data)
	if e.RubyReencode != nil {
		want = *e.RubyReencode
		require.NotEqual(t, string(data), want)
	}
	require.Equal(t, want, string(j.Map().Encode()))

	obj, err := rubyjson.ParseObject(data)
	require.NoError(t, err)
	require.Equal(t, e.Keys, obj.Keys(), "key order")

	eqPtr := func(name string, want *string, got string) {
		if want != nil {
			require.Equal(t, *want, got, name)
		} else {
			require.Empty(t, got, name)
		}
	}
	eqPtr("class", e.Class, j.Class())
	eqPtr("queue", e.Queue, j.Queue())
	eqPtr("jid", e.JID, j.JID())
	eqPtr("wrapped", e.Wrapped, contract.Wrapped(j))
	eqPtr("error_class", e.ErrorClass, j.ErrorClass())
	eqPtr("error_message", e.ErrorMessage, j.ErrorMessage())
	require.Regexp(t, jidRE, j.JID())
	require.NotEmpty(t, j.Class())
	require.NotEmpty(t, j.Queue())

	wantArgs, err := rubyjson.Parse(e.Args)
	require.NoError(t, err)
	require.Equal(t, string(wantArgs.Encode()), string(rubyjson.ArrayValue(j.Args()...).Encode()), "args")

	r := contract.Retry(j)
	require.Equal(t, e.RetryPresent, r.Present, "retry present")
	require.Equal(t, e.RetryEnabled, r.Enabled, "retry truthy")
	if e.RetryPresent {
		rv, err := rubyjson.Parse(e.Retry)
		require.NoError(t, err)
		require.Equal(t, rv.Kind() == rubyjson.Integer, r.HasCount, "retry is an integer count")
	}
	if e.RetryMax != nil {
		require.Equal(t, *e.RetryMax, contract.RetryMax(r, 25), "max retries")
	}
	rc, ok := j.RetryCount()
	require.Equal(t, e.RetryCount != nil, ok, "retry_count present")
	if ok {
		require.Equal(t, *e.RetryCount, rc)
	}

	all, limit := contract.Backtrace(j)
	require.Equal(t, e.BacktraceAll, all, "backtrace: true")
	require.Equal(t, e.BacktraceLimit, limit, "backtrace: N")

	checkTimestamps(t, m, j, e)
	checkErrorBacktrace(t, m, j, e, all, limit)
	if f.Redis != nil && f.Redis.Type == "zset" {
		checkScore(t, m, f, j)
	}
}

func checkTimestamps(t *testing.T, m *fixtureManifest, j *wire.Job, e jobExpect) {
	for _, key := range []string{"created_at", "enqueued_at", "failed_at", "retried_at", "discarded_at"} {
		te, want := e.Timestamps[key]
		v, has := j.Get(key)
		require.Equal(t, want, has, "%s present", key)
		if !has {
			continue
		}
		switch te.Lexical {
		case "float":
			require.Equal(t, rubyjson.Float, v.Kind(), key)
		case "integer":
			require.Equal(t, rubyjson.Integer, v.Kind(), key)
		default:
			t.Fatalf("%s: unknown lexical type %q", key, te.Lexical)
		}
		// ≤7.x writes only float seconds; 8.x payloads may mix (old float
		// fields kept from 7.x, new int ms fields).
		if !contract.MillisecondTimestamps(m.version) {
			require.Equal(t, "float", te.Lexical, "%s in a %s payload", key, m.SidekiqVersion)
		}
		got, ok := j.Time(key)
		require.True(t, ok, key)
		require.Equal(t, te.UnixNS, got.UnixNano(), "%s: Go reads %s, Ruby %s", key, got.UTC(), time.Unix(0, te.UnixNS).UTC())
	}
	if ca, ok := j.Time("created_at"); ok {
		ct, _ := j.Time("created_at")
		require.Equal(t, ct, ca)
	}
	if _, ok := e.Timestamps["failed_at"]; ok {
		fa, ok := j.Time("failed_at")
		require.True(t, ok)
		ca, ok := j.Time("created_at")
		require.True(t, ok)
		require.False(t, fa.Before(ca), "failed_at after created_at")
	}
	if _, ok := e.Timestamps["retried_at"]; ok {
		_, ok := j.Time("retried_at")
		require.True(t, ok)
		require.NotNil(t, e.RetryCount)
		require.GreaterOrEqual(t, *e.RetryCount, 1, "retried_at comes with the second failure")
	}
}

func checkErrorBacktrace(t *testing.T, m *fixtureManifest, j *wire.Job, e jobExpect, all bool, limit int) {
	lines, err := j.ErrorBacktrace()
	require.NoError(t, err)
	if e.ErrorBacktrace == nil {
		require.Nil(t, lines)
		require.Empty(t, e.ErrorBacktraceForm)
		return
	}
	require.Equal(t, e.ErrorBacktrace, lines)
	require.True(t, all || limit > 0, "error_backtrace only with backtrace set")
	if limit > 0 {
		require.Len(t, lines, limit)
	}
	wantForm := "mime"
	if contract.StrictBase64Backtrace(m.version) {
		wantForm = "strict"
	}
	require.Equal(t, wantForm, e.ErrorBacktraceForm, "%s writes %s base64", m.SidekiqVersion, wantForm)
	v, _ := j.Get("error_backtrace")
	s, _ := v.Str()
	if wantForm == "mime" {
		requireMIMELayout(t, s)
	} else {
		require.NotContains(t, s, "\n")
	}
}

// checkScore relates a sorted-set member's score to its payload: the retry
// delay formula (docs/sidekiq-wire.md#retries), perform_in's hour, and the time of death.
func checkScore(t *testing.T, m *fixtureManifest, f fixtureEntry, j *wire.Job) {
	require.NotEmpty(t, f.Redis.Score, "zset fixtures record their score")
	score, err := contract.ParseScore(f.Redis.Score)
	require.NoError(t, err)
	at := contract.FromEpochSeconds(score)
	switch f.Redis.Key {
	case "retry":
		count, ok := j.RetryCount()
		require.True(t, ok)
		last, ok := j.Time("retried_at")
		if !ok {
			last, ok = j.Time("failed_at")
			require.True(t, ok)
		}
		base := float64(count*count*count*count + 15)
		jitter := float64(9 * (count + 1)) // ≤7.x: rand(10) * (count + 1)
		if contract.MillisecondTimestamps(m.version) {
			jitter = float64(10*(count+1) - 1) // 8.x: rand(10 * (count + 1))
		}
		delay := at.Sub(last).Seconds()
		require.GreaterOrEqual(t, delay, base-0.001, "retry delay")
		require.LessOrEqual(t, delay, base+jitter+1, "retry delay")
	case "schedule":
		ca, ok := j.Time("created_at")
		require.True(t, ok)
		require.False(t, j.Has("enqueued_at"), "scheduled jobs have no enqueued_at")
		require.False(t, j.Has("at"), "at is removed from the stored job")
		delay := 3600.0 // perform_in(3600) unless the manifest says
		if f.Redis.Delay != nil {
			delay = *f.Redis.Delay
		}
		require.InDelta(t, delay, at.Sub(ca).Seconds(), 1)
	case "dead":
		last, ok := j.Time("retried_at")
		if !ok {
			last, ok = j.Time("failed_at")
		}
		require.True(t, ok)
		require.False(t, at.Before(last.Add(-time.Millisecond)), "died after its last failure")
	default:
		t.Fatalf("unexpected sorted set %q", f.Redis.Key)
	}
}

// parseAsRuby parses a JSON object and checks that it re-encodes as Ruby's
// parse + generate does (the file itself, or reencode) and, when given,
// its key order.
func parseAsRuby(t *testing.T, data []byte, reencode *string, keys []string) *rubyjson.Map {
	t.Helper()
	obj, err := rubyjson.ParseObject(data)
	require.NoError(t, err)
	want := string(data)
	if reencode != nil {
		want = *reencode
	}
	require.Equal(t, want, string(obj.Encode()))
	if keys != nil {
		require.Equal(t, keys, obj.Keys())
	}
	return obj
}

func checkProcessInfo(t *testing.T, f fixtureEntry, data []byte) {
	e := decodeExpect[processInfoExpect](t, f.Expect)
	obj := parseAsRuby(t, data, e.RubyReencode, e.Keys)
	str := func(k string) string {
		v, _ := obj.Get(k)
		s, _ := v.Str()
		return s
	}
	require.Equal(t, e.Identity, str("identity"))
	require.Equal(t, e.Hostname, str("hostname"))
	pid, _ := obj.Get("pid")
	n, ok := pid.Int()
	require.True(t, ok)
	require.Equal(t, e.PID, int(n))
	require.Regexp(t, `^`+regexp.QuoteMeta(e.Hostname)+`:`+strconv.Itoa(e.PID)+`:[0-9a-f]{12}$`, e.Identity)
	started, _ := obj.Get("started_at")
	require.Equal(t, rubyjson.Float, started.Kind(), "started_at is float seconds in every version")
	if e.Concurrency != nil {
		c, _ := obj.Get("concurrency")
		n, ok := c.Int()
		require.True(t, ok)
		require.Equal(t, *e.Concurrency, int(n))
	} else {
		require.False(t, obj.Has("concurrency"))
	}
	if e.Tag != nil {
		require.Equal(t, *e.Tag, str("tag"))
	}
	q, _ := obj.Get("queues")
	qa, ok := q.Array()
	require.True(t, ok)
	var queues []string
	for _, v := range qa {
		s, _ := v.Str()
		queues = append(queues, s)
	}
	require.Equal(t, e.Queues, queues)
	if e.Version != nil {
		require.Equal(t, *e.Version, str("version"))
	} else {
		require.False(t, obj.Has("version"), "6.4 info has no version")
	}
	if e.Embedded != nil {
		v, _ := obj.Get("embedded")
		b, ok := v.Bool()
		require.True(t, ok)
		require.Equal(t, *e.Embedded, b)
	}
}

func checkWork(t *testing.T, f fixtureEntry, data []byte) {
	e := decodeExpect[workExpect](t, f.Expect)
	obj := parseAsRuby(t, data, e.RubyReencode, e.Keys)
	q, _ := obj.Get("queue")
	qs, _ := q.Str()
	require.Equal(t, e.Queue, qs)
	runAt, _ := obj.Get("run_at")
	require.Equal(t, rubyjson.Integer, runAt.Kind(), "run_at is integer seconds")
	p, _ := obj.Get("payload")
	payload, ok := p.Str()
	require.Equal(t, e.PayloadIsString, ok, "payload is a JSON string inside JSON")
	require.True(t, ok)
	j, err := wire.ParseJob([]byte(payload))
	require.NoError(t, err)
	require.Equal(t, payload, string(j.Map().Encode()))
	require.Equal(t, e.JID, j.JID())
	require.Equal(t, e.Queue, j.Queue())
	n, _ := runAt.Int()
	ea, ok := j.Time("enqueued_at")
	require.True(t, ok)
	require.InDelta(t, float64(ea.Unix()), float64(n), 60, "run_at is seconds, near enqueued_at")
}

func checkScalar(t *testing.T, f fixtureEntry, data []byte) {
	e := decodeExpect[formatExpect](t, f.Expect)
	s := string(data)
	switch e.Format {
	case "integer":
		n, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
		require.GreaterOrEqual(t, n, int64(0))
	case "float":
		x, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err)
		require.Equal(t, s, rubyfloat.Format(x), "Ruby Float#to_s form")
		require.Contains(t, s, ".")
	case "bool":
		require.Contains(t, []string{"true", "false"}, s)
	default:
		t.Fatalf("unknown scalar format %q", e.Format)
	}
}

// requireMIMELayout checks Ruby's Base64.encode64 layout: the strict
// encoding cut into 60-character lines, each followed by "\n".
func requireMIMELayout(t *testing.T, s string) {
	t.Helper()
	require.True(t, strings.HasSuffix(s, "\n"), "trailing newline")
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i, l := range lines {
		if i < len(lines)-1 {
			require.Len(t, l, 60, "line %d", i)
		} else {
			require.NotEmpty(t, l)
			require.LessOrEqual(t, len(l), 60, "last line")
		}
	}
	strict := strings.Join(lines, "")
	_, err := base64.StdEncoding.DecodeString(strict)
	require.NoError(t, err)
	require.Equal(t, int(math.Ceil(float64(len(strict))/60)), len(lines))
}

// capturedBacktraces returns the error_backtrace strings of the 6.4.1
// captures, with their decoded lines.
func capturedBacktraces(t *testing.T) (raw []string, decoded [][]string) {
	t.Helper()
	for _, m := range loadManifests(t) {
		if m.version != wire.Version6 {
			continue
		}
		for _, f := range m.Fixtures {
			if f.Kind != "job" {
				continue
			}
			j, err := wire.ParseJob(m.read(t, f.File))
			require.NoError(t, err)
			v, ok := j.Get("error_backtrace")
			if !ok {
				continue
			}
			s, _ := v.Str()
			lines, err := wire.DecodeBacktrace(s)
			require.NoError(t, err)
			raw = append(raw, s)
			decoded = append(decoded, lines)
		}
	}
	require.NotEmpty(t, raw, "the 6.4.1 capture has error_backtrace values")
	return raw, decoded
}

func TestEncodeBacktraceMIMELayout(t *testing.T) {
	t.Parallel()
	raw, decoded := capturedBacktraces(t)
	multiLine := false
	for i, s := range raw {
		requireMIMELayout(t, s)
		multiLine = multiLine || strings.Count(s, "\n") > 1
		zraw, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(s, "\n", ""))
		require.NoError(t, err)
		require.Equal(t, []byte{0x78, 0x9c}, zraw[:2], "zlib stream, default level")

		enc := contract.EncodeBacktrace(decoded[i], wire.Version6)
		requireMIMELayout(t, enc)
		require.NotEqual(t, enc, contract.EncodeBacktrace(decoded[i], wire.Version7), "6.x and 7.3 differ in layout")
		got, err := wire.DecodeBacktrace(enc)
		require.NoError(t, err)
		require.Equal(t, decoded[i], got)
	}
	require.True(t, multiLine, "a captured backtrace spans several 60-char lines")
}

func TestBacktraceRoundTrip(t *testing.T) {
	t.Parallel()
	_, decoded := capturedBacktraces(t)
	cases := append(slices.Clone(decoded),
		[]string{"one line"},
		[]string{"é 😀 \u2028 <>&/", "\"quoted\" \\ back", "tab\tnl\n"},
		[]string{strings.Repeat("x", 500), ""},
	)
	for _, v := range []wire.Version{wire.Version6, wire.Version7, wire.Version8} {
		for _, lines := range cases {
			enc := contract.EncodeBacktrace(lines, v)
			if contract.StrictBase64Backtrace(v) {
				require.NotContains(t, enc, "\n")
				_, err := base64.StdEncoding.DecodeString(enc)
				require.NoError(t, err)
			} else {
				requireMIMELayout(t, enc)
			}
			got, err := wire.DecodeBacktrace(enc)
			require.NoError(t, err)
			require.Equal(t, lines, got, "version %s", v)
		}
	}
}
