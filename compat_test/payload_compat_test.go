package compat_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/rubyfloat"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// pcRubyHelpers is Ruby code shared by the payload and client compat tests:
// pc_type describes a decoded JSON value as a type tree (Ruby class and
// Float#to_s / Integer#to_s text), pc_rec describes one Sidekiq::JobRecord as
// Ruby's API sees it.
const pcRubyHelpers = `
def pc_type(v)
  case v
  when nil then ["nil"]
  when true then ["true"]
  when false then ["false"]
  when Integer then ["Integer", v.to_s]
  when Float then ["Float", v.to_s]
  when String then ["String", v]
  when Array then ["Array", v.map { |e| pc_type(e) }]
  when Hash then ["Hash", v.map { |k, e| [k, pc_type(e)] }]
  else ["Other", v.class.name]
  end
end

def pc_time(t)
  t && [t.to_i, t.nsec]
end

def pc_rec(r)
  it = r.item
  {
    "value" => r.value, "class" => r.klass, "jid" => r.jid, "queue" => r.queue,
    "args" => pc_type(r.args), "item" => pc_type(it), "keys" => it.keys,
    "created_at" => pc_time(r.created_at), "enqueued_at" => pc_time(r.enqueued_at),
    "created_at_class" => it["created_at"].class.name, "enqueued_at_class" => it["enqueued_at"].class.name,
    "retry" => pc_type(it["retry"]), "backtrace" => pc_type(it["backtrace"]),
    "tags" => r.tags, "retry_queue" => it["retry_queue"],
    "has_at" => it.key?("at"), "has_enqueued_at" => it.key?("enqueued_at"),
    "roundtrip" => Sidekiq.dump_json(Sidekiq.load_json(r.value)) == r.value,
  }
end

def pc_all_recs
  recs = []
  Sidekiq::Queue.all.each { |q| q.each { |r| recs << pc_rec(r) } }
  Sidekiq::ScheduledSet.new.each { |r| recs << pc_rec(r).merge("score" => r.score.to_s, "at" => r.at.to_f.to_s) }
  recs
end
`

// pcRec is one job as Ruby's Sidekiq::API reports it (pc_rec).
type pcRec struct {
	Value           string   `json:"value"`
	Class           string   `json:"class"`
	JID             string   `json:"jid"`
	Queue           string   `json:"queue"`
	Args            any      `json:"args"`
	Item            any      `json:"item"`
	Keys            []string `json:"keys"`
	CreatedAt       []int64  `json:"created_at"`
	EnqueuedAt      []int64  `json:"enqueued_at"`
	CreatedAtClass  string   `json:"created_at_class"`
	EnqueuedAtClass string   `json:"enqueued_at_class"`
	Retry           []any    `json:"retry"`
	Backtrace       []any    `json:"backtrace"`
	Tags            []string `json:"tags"`
	RetryQueue      *string  `json:"retry_queue"`
	HasAt           bool     `json:"has_at"`
	HasEnqueuedAt   bool     `json:"has_enqueued_at"`
	Roundtrip       bool     `json:"roundtrip"`
	Score           string   `json:"score"`
	At              string   `json:"at"`
}

// pcTypeTree builds the same type tree as the Ruby pc_type.
func pcTypeTree(v rubyjson.Value) []any {
	switch v.Kind() {
	case rubyjson.Null:
		return []any{"nil"}
	case rubyjson.Bool:
		if b, _ := v.Bool(); b {
			return []any{"true"}
		}
		return []any{"false"}
	case rubyjson.Integer:
		return []any{"Integer", string(v.Encode())}
	case rubyjson.Float:
		return []any{"Float", string(v.Encode())}
	case rubyjson.String:
		s, _ := v.Str()
		return []any{"String", s}
	case rubyjson.Array:
		a, _ := v.Array()
		out := make([]any, 0, len(a))
		for _, e := range a {
			out = append(out, pcTypeTree(e))
		}
		return []any{"Array", out}
	case rubyjson.Object:
		m, _ := v.Map()
		out := make([]any, 0, m.Len())
		for i := 0; i < m.Len(); i++ {
			k, e := m.At(i)
			out = append(out, []any{k, pcTypeTree(e)})
		}
		return []any{"Hash", out}
	}
	return []any{"Other", v.Kind().String()}
}

// pcArgsTree is the type tree of a job's args.
func pcArgsTree(j *wire.Job) []any {
	v, _ := j.Get("args")
	return pcTypeTree(v)
}

// pcItemTree is the type tree of the whole payload.
func pcItemTree(j *wire.Job) []any {
	return pcTypeTree(rubyjson.ObjectValue(j.Clone().Map()))
}

// pcRubyTime is the [to_i, nsec] pair Ruby prints for a Time.
func pcRubyTime(t *testing.T, p []int64) time.Time {
	t.Helper()
	require.Len(t, p, 2)
	return time.Unix(p[0], p[1])
}

// pcRequireTimeNear requires Go's reading of a timestamp to be within 1 µs
// of Ruby's Time for the same field (float seconds near 1.8e9 have a 238 ns
// resolution; Ruby truncates to ns, Go rounds).
func pcRequireTimeNear(t *testing.T, ruby []int64, got time.Time, ok bool, what string) {
	t.Helper()
	require.True(t, ok, "%s: Go did not read a time", what)
	want := pcRubyTime(t, ruby)
	d := got.Sub(want)
	require.True(t, d <= time.Microsecond && d >= -time.Microsecond, "%s: Go %s, Ruby %s", what, got.UTC().Format(time.RFC3339Nano), want.UTC().Format(time.RFC3339Nano))
}

// pcRequireAccessors compares the typed accessors of a Go-parsed job with
// what Ruby's API reported for it.
func pcRequireAccessors(t *testing.T, job *wire.Job, r pcRec) {
	t.Helper()
	jid := r.JID
	require.Equal(t, r.Class, job.Class(), jid)
	require.Equal(t, r.JID, job.JID(), jid)
	require.Equal(t, r.Queue, job.Queue(), jid)
	require.Equal(t, r.Args, pcArgsTree(job), "args of %s", jid)
	require.Equal(t, r.Item, pcItemTree(job), "payload of %s", jid)
	require.Equal(t, r.Keys, job.Clone().Map().Keys(), "key order of %s", jid)
	if len(r.Tags) == 0 {
		require.Empty(t, contract.Tags(job), jid)
	} else {
		require.Equal(t, r.Tags, contract.Tags(job), jid)
	}
	if r.RetryQueue == nil {
		require.Empty(t, contract.RetryQueue(job), jid)
	} else {
		require.Equal(t, *r.RetryQueue, contract.RetryQueue(job), jid)
	}

	rs := contract.Retry(job)
	switch r.Retry[0] {
	case "nil":
		require.False(t, rs.Present, jid)
	case "true":
		require.Equal(t, contract.RetrySetting{Present: true, Enabled: true}, rs, jid)
	case "false":
		require.Equal(t, contract.RetrySetting{Present: true}, rs, jid)
	case "Integer":
		n, err := strconv.Atoi(r.Retry[1].(string))
		require.NoError(t, err)
		require.Equal(t, contract.RetrySetting{Present: true, Enabled: true, Count: n, HasCount: true}, rs, jid)
	default:
		t.Fatalf("%s: unexpected retry %v", jid, r.Retry)
	}
	all, limit := contract.Backtrace(job)
	switch r.Backtrace[0] {
	case "nil", "false":
		require.False(t, all, jid)
		require.Zero(t, limit, jid)
	case "true":
		require.True(t, all, jid)
	case "Integer":
		n, err := strconv.Atoi(r.Backtrace[1].(string))
		require.NoError(t, err)
		require.False(t, all, jid)
		require.Equal(t, n, limit, jid)
	default:
		t.Fatalf("%s: unexpected backtrace %v", jid, r.Backtrace)
	}

	ca, ok := job.Time("created_at")
	pcRequireTimeNear(t, r.CreatedAt, ca, ok, jid+" created_at")
	if r.EnqueuedAt == nil {
		_, ok := job.Time("enqueued_at")
		require.False(t, ok, "%s: Go reads an enqueued_at Ruby does not see", jid)
	} else {
		ea, ok := job.Time("enqueued_at")
		pcRequireTimeNear(t, r.EnqueuedAt, ea, ok, jid+" enqueued_at")
	}
}

// pcRubyRecs decodes the output of a Ruby script that printed a JSON array
// of pc_rec records, keyed by jid.
func pcRubyRecs(t *testing.T, raw json.RawMessage) map[string]pcRec {
	t.Helper()
	var recs []pcRec
	require.NoError(t, json.Unmarshal(raw, &recs))
	out := make(map[string]pcRec, len(recs))
	for _, r := range recs {
		_, dup := out[r.JID]
		require.False(t, dup, "jid %s listed twice by Ruby", r.JID)
		out[r.JID] = r
	}
	return out
}

// pcStoredJobs reads every job in every queue and the schedule set, as
// stored bytes with the schedule score ("" for queued jobs).
func pcStoredJobs(t *testing.T, e *env) map[string][2]string {
	t.Helper()
	out := map[string][2]string{}
	add := func(val, score string) {
		job, err := wire.ParseJob([]byte(val))
		require.NoError(t, err)
		_, dup := out[job.JID()]
		require.False(t, dup, "jid %s stored twice", job.JID())
		out[job.JID()] = [2]string{val, score}
	}
	queues, err := redis.Strings(e.do(t, "SMEMBERS", contract.KeyQueues), nil)
	require.NoError(t, err)
	for _, q := range queues {
		vals, err := redis.Strings(e.do(t, "LRANGE", contract.QueueKey(q), 0, -1), nil)
		require.NoError(t, err)
		for _, v := range vals {
			add(v, "")
		}
	}
	zs, err := redis.Strings(e.do(t, "ZRANGE", contract.KeySchedule, 0, -1, "WITHSCORES"), nil)
	require.NoError(t, err)
	for i := 0; i < len(zs); i += 2 {
		add(zs[i], zs[i+1])
	}
	return out
}

// TestPayloadCompatRubyPushGoReads: every payload Ruby's client writes
// (perform_async, Client.push with options, push_bulk, perform_in/at, class
// sidekiq_options) is parsed by Go, re-encoded byte for byte, and read by the
// typed accessors exactly as Ruby's API reads it.
func TestPayloadCompatRubyPushGoReads(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := e.ruby(t, pcRubyHelpers+`
class PcWorker
  include Sidekiq::Worker
  def perform(*); end
end

class PcOptsWorker
  include Sidekiq::Worker
  sidekiq_options queue: "pc_opts", retry: 5, backtrace: 2, "pc_opt" => {"x" => [1.0, nil]}
  def perform(*); end
end

args = [
  "é", "😀 emoji", "\u2028\u2029", "<>&/", "\x00\x01\x1f\x7f\t\n\r\b\f\"\\", "",
  3.5, 1.0, 0.1, 1e20, 1.5e-07, 123456789.123456789, -0.0, 1e15, 1e16, 999999999999999.9, 0.0001, 0.00001,
  5e-324, 1.7976931348623157e308, 2**64, -(2**70), 12345678901234567890123456789, 0, -1,
  {"a" => {"b" => [1, [2.5, [3]]], "é" => nil, "" => {}}}, nil, true, false, [], {}, [[], {}],
]
jids = {}
jids["async"] = PcWorker.perform_async(*args)
jids["opts_async"] = PcOptsWorker.perform_async("x", 2.0)
jids["push"] = Sidekiq::Client.push("class" => "PcWorker", "queue" => "pc_push", "args" => [1, 2.0, "ü"],
  "retry" => 3, "backtrace" => true, "tags" => ["t1", "ü"], "pc_custom" => {"k" => [1.0, "v", nil]}, "retry_queue" => "pc_rq")
jids["push_noretry"] = Sidekiq::Client.push("class" => PcWorker, "args" => [], "retry" => false, "backtrace" => 7)
jids["bulk"] = Sidekiq::Client.push_bulk("class" => PcWorker, "queue" => "pc_bulk", "args" => [[1], [2.5], ["é"], [{"h" => [nil]}]])
jids["bulk_at"] = Sidekiq::Client.push_bulk("class" => PcWorker, "args" => [[1], [2]], "at" => Time.now.to_f + 100)
jids["in"] = PcWorker.perform_in(3600, "later", 2.0, "\u2028")
jids["at"] = PcWorker.set(queue: "pc_sched").perform_at(Time.now + 7200.25, {"k" => "v"})
puts JSON.generate({"jids" => jids, "recs" => pc_all_recs})
`)
	var res struct {
		JIDs map[string]json.RawMessage `json:"jids"`
		Recs json.RawMessage            `json:"recs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	recs := pcRubyRecs(t, res.Recs)
	stored := pcStoredJobs(t, e)
	require.Len(t, stored, 12)
	require.Len(t, recs, len(stored), "Ruby's API and Redis disagree on the job count")

	for jid, sv := range stored {
		val, score := sv[0], sv[1]
		job, err := wire.ParseJob([]byte(val))
		require.NoError(t, err)
		require.Equal(t, val, string(job.Bytes()), "Go re-encoding of Ruby's payload differs")
		require.Equal(t, val, string(job.Bytes()))
		r, ok := recs[jid]
		require.True(t, ok, "Ruby does not list jid %s", jid)
		require.Equal(t, r.Value, val)
		require.True(t, r.Roundtrip, jid)
		pcRequireAccessors(t, job, r)
		if score != "" {
			require.False(t, job.Has("at"), "scheduled payload keeps at")
			require.False(t, job.Has("enqueued_at"), "6.4 scheduled payload has no enqueued_at")
			gs, err := contract.ParseScore(score)
			require.NoError(t, err)
			rs, err := strconv.ParseFloat(r.Score, 64)
			require.NoError(t, err)
			require.Equal(t, rs, gs, "score of %s", jid)
		}
	}

	// Reference facts about Ruby 6.4.1 that gojob's client copies.
	var bulk []string
	require.NoError(t, json.Unmarshal(res.JIDs["bulk"], &bulk))
	require.Len(t, bulk, 4)
	var created, enqueued []string
	for _, jid := range bulk {
		j, err := wire.ParseJob([]byte(stored[jid][0]))
		require.NoError(t, err)
		ca, _ := j.Get("created_at")
		ea, _ := j.Get("enqueued_at")
		created = append(created, string(ca.Encode()))
		enqueued = append(enqueued, string(ea.Encode()))
		require.Equal(t, []string{"retry", "queue", "class", "args", "jid", "created_at", "enqueued_at"}, j.Clone().Map().Keys())
	}
	require.Len(t, slices.Compact(created), 1, "Ruby's push_bulk jobs share created_at")
	require.Len(t, slices.Compact(enqueued), 1, "Ruby's push_bulk jobs share enqueued_at")
	var async string
	require.NoError(t, json.Unmarshal(res.JIDs["async"], &async))
	require.Equal(t, []string{"retry", "queue", "args", "class", "jid", "created_at", "enqueued_at"}, recs[async].Keys)
	var optsAsync string
	require.NoError(t, json.Unmarshal(res.JIDs["opts_async"], &optsAsync))
	require.Equal(t, []string{"retry", "queue", "backtrace", "pc_opt", "args", "class", "jid", "created_at", "enqueued_at"}, recs[optsAsync].Keys)
	var in string
	require.NoError(t, json.Unmarshal(res.JIDs["in"], &in))
	require.Equal(t, []string{"retry", "queue", "class", "args", "jid", "created_at"}, recs[in].Keys)
}

// pcEdgeFloats are float64 values around Float#to_s's notation switches and
// other corners.
func pcEdgeFloats() []float64 {
	fs := []float64{
		0, 1, 0.1, 0.2, 0.3, 1.0 / 3, 2.0 / 3, 3.5, 1.5e-07, 123456789.123456789, 1e20, 1e21, 1e22, 1e23,
		1795296573.1651707, 1795296573.0, 1795296573.5, 9007199254740993, 4503599627370496.5,
		math.MaxFloat64, math.SmallestNonzeroFloat64, 2.2250738585072014e-308, 2.225073858507201e-308,
		math.Float64frombits(0x000FFFFFFFFFFFFF), math.Float64frombits(1), math.Float64frombits(0x0010000000000000),
		100, 12345678, 999999999999999.9, 123456789012345.6, 1234567890123456, 0.000123456, 0.001,
	}
	for _, base := range []float64{1e-5, 1e-4, 1e-3, 1e14, 1e15, 1e16, 1e17} {
		fs = append(fs, base, math.Nextafter(base, 0), math.Nextafter(base, math.Inf(1)),
			base*9.999999999999999, base*0.9999999, base*1.0000001)
	}
	for e := -1074; e <= 1023; e += 7 {
		fs = append(fs, math.Ldexp(1, e))
	}
	for e := 40; e <= 60; e++ {
		p := math.Ldexp(1, e)
		fs = append(fs, p, p+1, p-1, p+2)
	}
	for i := 1; i <= 20; i++ {
		fs = append(fs, float64(i), float64(i)*1e15, float64(i)*1e-5)
	}
	return fs
}

// pcRandomFloats returns n random finite floats: random bit patterns,
// log-uniform magnitudes around the notation switches, whole numbers and
// epoch times with ms/µs/ns fractions.
func pcRandomFloats(rng *rand.Rand, n int) []float64 {
	out := make([]float64, 0, n)
	for len(out) < n {
		var f float64
		switch rng.IntN(4) {
		case 0:
			f = math.Float64frombits(rng.Uint64())
		case 1:
			f = math.Pow(10, -6+rng.Float64()*24)
		case 2:
			f = float64(rng.Int64N(1 << 60))
		default:
			f = 1.7e9 + rng.Float64()*2e8
			switch rng.IntN(3) {
			case 0:
				f = math.Round(f*1e3) / 1e3
			case 1:
				f = math.Round(f*1e6) / 1e6
			}
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		if rng.IntN(2) == 0 {
			f = -f
		}
		out = append(out, f)
	}
	return out
}

// pcRandomString returns a random valid UTF-8 string mixing ASCII, control
// characters, JSON/HTML specials, 2/3/4-byte runes and the line separators.
func pcRandomString(rng *rand.Rand) string {
	var b strings.Builder
	n := rng.IntN(24)
	for i := 0; i < n; i++ {
		var r rune
		switch p := rng.IntN(100); {
		case p < 30:
			r = rune(0x20 + rng.IntN(0x5f))
		case p < 40:
			r = rune(rng.IntN(0x20))
			if rng.IntN(4) == 0 {
				r = 0x7f
			}
		case p < 50:
			r = rune(`"\/<>&'`[rng.IntN(7)])
		case p < 62:
			r = rune(0x80 + rng.IntN(0x780))
		case p < 78:
			for r = rune(0x800 + rng.IntN(0xF800)); r >= 0xD800 && r < 0xE000; r = rune(0x800 + rng.IntN(0xF800)) {
			}
		case p < 85:
			r = []rune{0x2028, 0x2029, 0xFEFF, 0xFFFD, 0xFFFE, 0xFFFF, 0x10FFFF, 0x85, 0xA0}[rng.IntN(9)]
		default:
			r = rune(0x10000 + rng.IntN(0x100000))
		}
		b.WriteRune(r)
	}
	return b.String()
}

// pcEscapeASCII writes s as a JSON string with every non-ASCII rune as a
// \u escape (surrogate pairs above U+FFFF) in random hex case, and '/'
// sometimes as "\/": what ASCII-only JSON writers (Python, JS) emit.
func pcEscapeASCII(rng *rand.Rand, s string) string {
	var b strings.Builder
	b.WriteByte('"')
	u := func(r rune) {
		h := fmt.Sprintf("\\u%04x", r)
		if rng.IntN(2) == 0 {
			h = `\u` + strings.ToUpper(h[2:])
		}
		b.WriteString(h)
	}
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '/' && rng.IntN(2) == 0:
			b.WriteString(`\/`)
		case r == '\n' && rng.IntN(2) == 0:
			b.WriteString(`\n`)
		case r < 0x20 || r >= 0x7f:
			if r > 0xFFFF {
				r -= 0x10000
				u(0xD800 + r>>10)
				u(0xDC00 + r&0x3FF)
			} else {
				u(r)
			}
		case rng.IntN(10) == 0:
			u(r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// pcNumberText writes f in one of several JSON number spellings.
func pcNumberText(rng *rand.Rand, f float64) string {
	var s string
	switch rng.IntN(6) {
	case 0:
		s = strconv.FormatFloat(f, 'e', -1, 64)
	case 1:
		s = strconv.FormatFloat(f, 'E', rng.IntN(25), 64)
	case 2:
		s = strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
	case 3:
		s = strconv.FormatFloat(f, 'g', 17+rng.IntN(10), 64)
	case 4:
		s = strconv.FormatFloat(f, 'f', 1+rng.IntN(30), 64)
	default:
		s = strconv.FormatFloat(f, 'e', -1, 64)
		s = strings.Replace(s, "e+", "e", 1)
	}
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}

// TestPayloadCompatFloatAndStringFormatting is a property test against one
// Ruby process: Float#to_s and JSON.generate of thousands of exact float64
// bit patterns, JSON.generate of random strings (as values and as keys),
// and JSON.parse→generate of documents with escapes and number spellings,
// all compared with rubyjson.
func TestPayloadCompatFloatAndStringFormatting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))

	floats := pcEdgeFloats()
	for _, f := range slices.Clone(floats) {
		floats = append(floats, -f)
	}
	floats = append(floats, pcRandomFloats(rng, 4000)...)
	var fhex strings.Builder
	for _, f := range floats {
		fmt.Fprintf(&fhex, "%016x\n", math.Float64bits(f))
	}

	stringsIn := []string{"", "é", "😀", "\u2028\u2029", "<>&/", "\x00\x01\x1f\x7f", "\"\\", "\t\n\r\b\f", "\u0085\u00a0\ufeff"}
	for i := 0; i < 2500; i++ {
		stringsIn = append(stringsIn, pcRandomString(rng))
	}
	var shex strings.Builder
	for _, s := range stringsIn {
		require.True(t, utf8.ValidString(s))
		shex.WriteString("x" + hex.EncodeToString([]byte(s)) + "\n") // "x": keeps "" a word
	}

	docs := []string{
		`["\u00e9","\u00E9","\/","a\/b","\"\\\b\f\n\r\t"]`,
		`["\ud83d\ude00","\uD83D\uDE00","x\ud83d\ude00y"]`,
		`["\u2028\u2029","\u0000\u001f\u007f","\u003c\u003e\u0026"]`,
		`{"a":1,"b":2,"a":3}`, `{"\u00e9":"\u00e9","é":"x"}`,
		` [ 1 , { "k" : [ ] , "l" : { } } , true , false , null ] `,
		`[1E3,-0,-0.0,0.1e1,1.0e+16,1e-7,1E-4,0e0,12345678901234567890123,-12345678901234567890123]`,
		`[0.1000000000000000055511151231257827,1.00000000000000011102230246251565404236316680908203125,9007199254740993]`,
		`[1795296573.1651707,1795296573.165170669555664,1.7952965731651707e9,1795296573166]`,
		`{"retry":true,"queue":"default","args":[1,"two",{"three":3.5}],"class":"HardJob","jid":"2192851646718f18b780163c","created_at":1795296573.1651707,"enqueued_at":1795296573.165405}`,
	}
	for i := 0; i < 1500; i++ {
		s := pcRandomString(rng)
		var strJSON string
		if rng.IntN(2) == 0 {
			b, err := json.Marshal(s) // Go's encoding/json: \u003c, \u2028, \u0000 escapes
			require.NoError(t, err)
			strJSON = string(b)
		} else {
			strJSON = pcEscapeASCII(rng, s)
		}
		f := pcRandomFloats(rng, 1)[0]
		num := pcNumberText(rng, f)
		if v, err := strconv.ParseFloat(num, 64); err != nil || math.IsInf(v, 0) {
			num = "0.5" // Ruby parses out-of-range numbers as Infinity and refuses to write them
		}
		ws := []string{"", " ", "\n", "\t ", "\r\n"}[rng.IntN(5)]
		switch rng.IntN(3) {
		case 0:
			docs = append(docs, "["+ws+strJSON+","+ws+num+ws+"]")
		case 1:
			docs = append(docs, "{"+strJSON+":"+ws+"["+num+","+strconv.FormatInt(rng.Int64()>>rng.IntN(63), 10)+"]}")
		default:
			docs = append(docs, `{"k":`+strJSON+`,"k2":{"n":`+num+`},"k":`+ws+strJSON+"}")
		}
	}
	var dhex strings.Builder
	for _, d := range docs {
		dhex.WriteString(hex.EncodeToString([]byte(d)) + "\n")
	}

	out := e.ruby(t, `
floats = <<~F.split.map { |h| [h].pack("H*").unpack1("G") }
`+fhex.String()+`F
strs = <<~S.split.map { |h| [h[1..]].pack("H*").force_encoding(Encoding::UTF_8) }
`+shex.String()+`S
docs = <<~D.split.map { |h| [h].pack("H*").force_encoding(Encoding::UTF_8) }
`+dhex.String()+`D
res = {
  "floats" => floats.map { |f| [f.to_s, JSON.generate([f])] },
  "strings" => strs.map { |s| raise "invalid #{s.inspect}" unless s.valid_encoding?; [JSON.generate([s]).unpack1("H*"), JSON.generate({s => 1}).unpack1("H*")] },
  "docs" => docs.map { |d| begin; JSON.generate(JSON.parse(d)).unpack1("H*"); rescue => e; "ERR #{e.class}: #{e.message}"; end },
}
puts JSON.generate(res)
`)
	var res struct {
		Floats  [][2]string `json:"floats"`
		Strings [][2]string `json:"strings"`
		Docs    []string    `json:"docs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))

	require.Len(t, res.Floats, len(floats))
	bad := 0
	for i, f := range floats {
		got := rubyfloat.Format(f)
		if got != res.Floats[i][0] || "["+got+"]" != res.Floats[i][1] || string(rubyjson.FloatValue(f).Encode()) != res.Floats[i][0] {
			t.Errorf("float %016x: Go %q, Ruby to_s %q, JSON.generate %q", math.Float64bits(f), got, res.Floats[i][0], res.Floats[i][1])
			if bad++; bad > 20 {
				t.FailNow()
			}
		}
	}

	require.Len(t, res.Strings, len(stringsIn))
	for i, s := range stringsIn {
		want, err := hex.DecodeString(res.Strings[i][0])
		require.NoError(t, err)
		got := rubyjson.ArrayValue(rubyjson.StringValue(s)).Encode()
		require.Equal(t, string(want), string(got), "string %q", s)
		wantKey, err := hex.DecodeString(res.Strings[i][1])
		require.NoError(t, err)
		m := rubyjson.NewMap()
		m.Set(s, rubyjson.IntValue(1))
		require.Equal(t, string(wantKey), string(m.Encode()), "key %q", s)
	}

	require.Len(t, res.Docs, len(docs))
	for i, d := range docs {
		require.False(t, strings.HasPrefix(res.Docs[i], "ERR"), "Ruby rejected %q: %s", d, res.Docs[i])
		want, err := hex.DecodeString(res.Docs[i])
		require.NoError(t, err)
		v, err := rubyjson.Parse([]byte(d))
		require.NoError(t, err, "doc %q", d)
		require.Equal(t, string(want), string(v.Encode()), "parse→generate of %q", d)
	}
}
