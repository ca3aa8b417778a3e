package compat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/rubyfixtures"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// pcTrickyArgs are Go args whose Ruby JSON form differs from what naive Go
// encoders write: raw unicode and line separators, unescaped "<>&/",
// control characters, floats that must keep ".0" or use Ruby's exponent
// form, -0.0, integers beyond int64, nested ordered objects and empties.
func pcTrickyArgs(t *testing.T) []any {
	t.Helper()
	big1, ok := new(big.Int).SetString("12345678901234567890123456789", 10)
	require.True(t, ok)
	big2 := new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 70))
	inner := rubyjson.NewMap()
	inner.Set("z", rubyjson.ArrayValue(rubyjson.IntValue(1), rubyjson.ArrayValue(rubyjson.FloatValue(2.5))))
	inner.Set("é", rubyjson.Value{})
	inner.Set("", rubyjson.ObjectValue(nil))
	outer := rubyjson.NewMap()
	outer.Set("b", rubyjson.ObjectValue(inner))
	outer.Set("a", rubyjson.FloatValue(1))
	return []any{
		"é", "😀 emoji", "\u2028\u2029", "<>&/", "\x00\x01\x1f\x7f\t\n\r\b\f\"\\", "",
		3.5, 1.0, 0.1, 1e20, 1.5e-07, 123456789.123456789, math.Copysign(0, -1), 1e15, 1e16,
		1000000000000000.1, 0.0001, 0.00001, 5e-324, math.MaxFloat64,
		big1, big2, uint64(math.MaxUint64), int64(math.MinInt64), 0, -1,
		outer, nil, true, false, []any{}, map[string]any{}, []any{[]any{}, map[string]any{"k": 2.0}},
	}
}

// pcGoRetryJob builds, in Go, a job as Ruby's JobRetry leaves it in the
// retry set after a first failure with backtrace: true (key order as Ruby
// writes it), in the 6.4 format.
func pcGoRetryJob(t *testing.T, queue string, failedAt time.Time, lines []string, args ...any) *wire.Job {
	t.Helper()
	vals := make([]rubyjson.Value, len(args))
	for i, a := range args {
		v, err := rubyjson.FromGo(a)
		require.NoError(t, err)
		vals[i] = v
	}
	m := rubyjson.NewMap()
	m.Set("retry", rubyjson.BoolValue(true))
	m.Set("queue", rubyjson.StringValue(queue))
	m.Set("backtrace", rubyjson.BoolValue(true))
	m.Set("class", rubyjson.StringValue("PcGoWorker"))
	m.Set("args", rubyjson.ArrayValue(vals...))
	job := wire.JobFromMap(m)
	job.Set("jid", rubyjson.StringValue(contract.NewJID()))
	job.Set("created_at", contract.TimestampValue(failedAt.Add(-90*time.Second+123456789), wire.Version6))
	job.Set("enqueued_at", contract.TimestampValue(failedAt.Add(-60*time.Second+987654321), wire.Version6))
	job.Set("error_message", rubyjson.StringValue("boom é \u2028 <>&"))
	job.Set("error_class", rubyjson.StringValue("RuntimeError"))
	job.Set("failed_at", contract.TimestampValue(failedAt, wire.Version6))
	contract.SetRetryCount(job, 0)
	contract.SetErrorBacktrace(job, lines, wire.Version6)
	return job
}

// pcBacktrace is a backtrace long enough for several MIME base64 lines.
var pcBacktrace = []string{
	"/app/jobs/pc_go_worker.rb:12:in `perform'",
	"/usr/share/rubygems-integration/all/gems/sidekiq-6.4.1/lib/sidekiq/processor.rb:196:in `execute_job'",
	`é "quoted" \ back <>& ` + "\u2028\t",
	"",
}

// pcZAdd writes one member into a sorted set at score.
func pcZAdd(t *testing.T, e *env, key, score string, payload []byte) {
	t.Helper()
	n, err := redis.Int(e.do(t, "ZADD", key, score, payload), nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// pcZMembers returns a sorted set's members with their scores.
func pcZMembers(t *testing.T, e *env, key string) [][2]string {
	t.Helper()
	zs, err := redis.Strings(e.do(t, "ZRANGE", key, 0, -1, "WITHSCORES"), nil)
	require.NoError(t, err)
	var out [][2]string
	for i := 0; i < len(zs); i += 2 {
		out = append(out, [2]string{zs[i], zs[i+1]})
	}
	return out
}

// pcField returns a payload field as its JSON text.
func pcField(t *testing.T, job *wire.Job, key string) string {
	t.Helper()
	v, ok := job.Get(key)
	require.True(t, ok, "payload has no %s", key)
	return string(v.Encode())
}

// TestClientCompatGoPushRubyReads: jobs pushed by gojob's client (Push,
// Enqueue, PushBulk over several 1000-job round trips, scheduled Push and
// PushBulk) are read by Ruby's Sidekiq::Queue and ScheduledSet exactly as Go
// wrote them, Ruby's JSON re-encodes every Go-written value unchanged, and
// the payload shapes match what Ruby's own client writes.
func TestClientCompatGoPushRubyReads(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	pushed := map[string]*wire.Job{} // jid → the job as Go pushed it

	tricky, err := wire.NewJob("PcGoWorker", pcTrickyArgs(t)...)
	require.NoError(t, err)
	tricky.SetQueue("pc_go")
	res, err := e.client.Push(ctx, tricky, nil)
	require.NoError(t, err)
	require.False(t, res.Scheduled)
	pushed[res.JID] = tricky

	res, err = e.client.Enqueue(ctx, "", "PcGoWorker", 1, "two", map[string]any{"three": 3.5})
	require.NoError(t, err)
	plainJID := res.JID
	plain, err := wire.ParseJob(res.Payload)
	require.NoError(t, err)
	pushed[plainJID] = plain

	opts, err := wire.NewJob("PcGoWorker", 1, 2.0, "ü")
	require.NoError(t, err)
	opts.SetQueue("pc_push")
	opts.Set("retry", rubyjson.IntValue(3))
	opts.Set("backtrace", rubyjson.BoolValue(true))
	opts.Set("tags", rubyjson.ArrayValue(rubyjson.StringValue("t1"), rubyjson.StringValue("ü")))
	opts.Set("pc_custom", rubyjson.ArrayValue(rubyjson.FloatValue(1), rubyjson.StringValue("v"), rubyjson.Value{}))
	opts.Set("retry_queue", rubyjson.StringValue("pc_rq"))
	res, err = e.client.Push(ctx, opts, nil)
	require.NoError(t, err)
	pushed[res.JID] = opts

	const nBulk = 2345
	bulk := make([]*wire.Job, nBulk)
	for i := range bulk {
		bulk[i], err = wire.NewJob("PcGoWorker", i, float64(i)+0.5, "é")
		require.NoError(t, err)
		bulk[i].SetQueue("pc_bulk")
	}
	bres, err := e.client.PushBulk(ctx, bulk, nil)
	require.NoError(t, err)
	require.Len(t, bres, nBulk)
	for i, jid := range bres {
		pushed[jid] = bulk[i]
	}

	before := time.Now()
	inJob, err := wire.NewJob("PcGoWorker", "later", 2.0, "\u2028")
	require.NoError(t, err)
	inJob.SetQueue("pc_sched")
	res, err = e.client.Push(ctx, inJob, &sidekiq.PushOpts{In: time.Hour})
	require.NoError(t, err)
	after := time.Now()
	require.True(t, res.Scheduled)
	inJID := res.JID
	pushed[inJID] = inJob

	at := time.Now().Add(2*time.Hour + 250*time.Millisecond)
	atJob, err := wire.NewJob("PcGoWorker", map[string]any{"k": "v"})
	require.NoError(t, err)
	res, err = e.client.Push(ctx, atJob, &sidekiq.PushOpts{At: at})
	require.NoError(t, err)
	require.True(t, res.Scheduled)
	atJID := res.JID
	pushed[atJID] = atJob

	sbulk := make([]*wire.Job, 3)
	for i := range sbulk {
		sbulk[i], err = wire.NewJob("PcGoWorker", i)
		require.NoError(t, err)
	}
	sres, err := e.client.PushBulk(ctx, sbulk, &sidekiq.PushOpts{At: at})
	require.NoError(t, err)
	for i, jid := range sres {
		pushed[jid] = sbulk[i]
	}

	out := e.ruby(t, pcRubyHelpers+`
ruby_push = Sidekiq::Client.push("class" => "PcGoWorker", "queue" => "pc_ruby", "args" => [1])
ruby_bulk = Sidekiq::Client.push_bulk("class" => "PcGoWorker", "queue" => "pc_ruby_bulk", "args" => [[1], [2], [3]])
puts JSON.generate({
  "queues" => Sidekiq::Queue.all.map { |q| [q.name, q.size, q.latency.to_s] },
  "ruby_push" => ruby_push, "ruby_bulk" => ruby_bulk,
  "recs" => pc_all_recs,
})
`)
	var rres struct {
		Queues   [][3]any        `json:"queues"`
		RubyPush string          `json:"ruby_push"`
		RubyBulk []string        `json:"ruby_bulk"`
		Recs     json.RawMessage `json:"recs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rres))
	recs := pcRubyRecs(t, rres.Recs)
	require.Len(t, recs, len(pushed)+4)

	// Sidekiq::Queue.all: the queues set holds every immediate queue and
	// none of the scheduled jobs' queues; sizes and latencies are sane.
	var names []string
	sizes := map[string]int{}
	for _, q := range rres.Queues {
		name := q[0].(string)
		names = append(names, name)
		sizes[name] = int(q[1].(float64))
		lat, err := strconv.ParseFloat(q[2].(string), 64)
		require.NoError(t, err)
		require.True(t, lat >= 0 && lat < 60, "queue %s latency %v", name, lat)
	}
	require.Equal(t, []string{"default", "pc_bulk", "pc_go", "pc_push", "pc_ruby", "pc_ruby_bulk"}, names)
	require.Equal(t, map[string]int{"default": 1, "pc_bulk": nBulk, "pc_go": 1, "pc_push": 1, "pc_ruby": 1, "pc_ruby_bulk": 3}, sizes)

	stored := pcStoredJobs(t, e)
	for jid, want := range pushed {
		r, ok := recs[jid]
		require.True(t, ok, "Ruby does not see Go job %s", jid)
		require.Equal(t, stored[jid][0], r.Value)
		require.True(t, r.Roundtrip, "Ruby re-encodes Go's %s differently: %s", jid, r.Value)
		require.Equal(t, string(want.Bytes()), r.Value, "stored bytes of %s", jid)
		require.Equal(t, pcArgsTree(want), r.Args, "Ruby's args of %s", jid)
		require.Equal(t, pcItemTree(want), r.Item, "Ruby's payload of %s", jid)
		job, err := wire.ParseJob([]byte(r.Value))
		require.NoError(t, err)
		pcRequireAccessors(t, job, r)
		require.Equal(t, "Float", r.CreatedAtClass, jid)
		require.False(t, r.HasAt, jid)
		if stored[jid][1] == "" {
			require.True(t, r.HasEnqueuedAt, jid)
			require.Equal(t, "Float", r.EnqueuedAtClass, jid)
			continue
		}
		require.False(t, r.HasEnqueuedAt, "scheduled job %s has enqueued_at", jid)
		rs, err := strconv.ParseFloat(r.Score, 64)
		require.NoError(t, err)
		ra, err := strconv.ParseFloat(r.At, 64)
		require.NoError(t, err)
		gs, err := contract.ParseScore(stored[jid][1])
		require.NoError(t, err)
		require.Equal(t, gs, rs, "score of %s", jid)
		require.Equal(t, gs, ra, "at of %s", jid)
	}
	require.Equal(t, contract.Score(at), recs[atJID].Score, "At score is Float#to_s of the time")
	inAt, err := strconv.ParseFloat(recs[inJID].At, 64)
	require.NoError(t, err)
	require.True(t, inAt >= contract.EpochSeconds(before.Add(time.Hour))-1e-6 && inAt <= contract.EpochSeconds(after.Add(time.Hour))+1e-6)

	// Key order matches Ruby's Client.push and push_bulk; Enqueue's, Ruby's
	// perform_async (args before class; captured from 6.4.1).
	rubyKeys := recs[rres.RubyPush].Keys
	require.Equal(t, []string{"retry", "queue", "class", "args", "jid", "created_at", "enqueued_at"}, rubyKeys)
	require.Equal(t, performAsyncKeys(t), recs[plainJID].Keys)
	require.Equal(t, rubyKeys, recs[bres[0]].Keys)
	require.Equal(t, recs[rres.RubyBulk[0]].Keys, recs[bres[nBulk-1]].Keys)
	require.Equal(t, rubyKeys[:6], recs[inJID].Keys)

	// Bulk: one created_at for the whole call (as Ruby's push_bulk), one
	// enqueued_at per round trip of 1000, and FIFO order as Ruby's LPUSH.
	created := map[string]bool{}
	for _, jid := range rres.RubyBulk {
		job, err := wire.ParseJob([]byte(recs[jid].Value))
		require.NoError(t, err)
		created[pcField(t, job, "created_at")] = true
	}
	require.Equal(t, 1, len(created), "Ruby's bulk jobs share created_at")
	created = map[string]bool{}
	enqByBatch := map[int]map[string]bool{}
	for i, jid := range bres {
		job, err := wire.ParseJob([]byte(recs[jid].Value))
		require.NoError(t, err)
		created[pcField(t, job, "created_at")] = true
		b := i / 1000
		if enqByBatch[b] == nil {
			enqByBatch[b] = map[string]bool{}
		}
		enqByBatch[b][pcField(t, job, "enqueued_at")] = true
	}
	require.Equal(t, 1, len(created), "Go's bulk jobs share created_at")
	require.Equal(t, 3, len(enqByBatch))
	for b, enq := range enqByBatch {
		require.Equal(t, 1, len(enq), "batch %d shares enqueued_at", b)
	}
	head, err := redis.Strings(e.do(t, "LRANGE", contract.QueueKey("pc_bulk"), -1, -1), nil)
	require.NoError(t, err)
	require.Equal(t, recs[bres[0]].Value, head[0], "the first bulk job is the oldest (fetched first)")
	rhead, err := redis.Strings(e.do(t, "LRANGE", contract.QueueKey("pc_ruby_bulk"), -1, -1), nil)
	require.NoError(t, err)
	require.Equal(t, recs[rres.RubyBulk[0]].Value, rhead[0], "Ruby's first bulk job is the oldest too")
}

// TestClientCompatGoRetryEntryRubyAPI: a retry-set entry written by Go in
// the 6.4 format is found and decoded by Ruby's RetrySet (error fields,
// MIME backtrace, retry_count); Ruby's SortedEntry#retry moves it to its
// queue with retry_count -1 and a new enqueued_at, which Go reads; Ruby's
// SortedEntry#delete removes another Go-written entry.
func TestClientCompatGoRetryEntryRubyAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	failedAt := time.Now().Add(-10 * time.Minute)
	retried := pcGoRetryJob(t, "pc_retry", failedAt, pcBacktrace, 1.5, "é😀\u2028", 1e20, map[string]any{"k": []any{1.0, nil}})
	retriedScore := contract.Score(failedAt.Add(30*time.Second + 123456*time.Microsecond))
	pcZAdd(t, e, contract.KeyRetry, retriedScore, retried.Bytes())
	deleted := pcGoRetryJob(t, "pc_retry", failedAt, []string{"x"}, 2)
	pcZAdd(t, e, contract.KeyRetry, contract.Score(failedAt.Add(45*time.Second)), deleted.Bytes())
	kept := pcGoRetryJob(t, "pc_retry", failedAt, []string{"y"}, 3)
	pcZAdd(t, e, contract.KeyRetry, retriedScore, kept.Bytes()) // same score as the retried one
	require.True(t, strings.Contains(pcField(t, retried, "error_backtrace"), `\n`), "6.4 MIME base64 has line breaks")

	out := e.ruby(t, pcRubyHelpers+fmt.Sprintf(`
rs = Sidekiq::RetrySet.new
j = rs.find_job(%q)
found = pc_rec(j).merge(
  "score" => j.score.to_s, "error_backtrace" => j.error_backtrace, "retry_count" => j["retry_count"],
  "error_message" => j["error_message"], "error_class" => j["error_class"],
  "failed_at" => pc_time(Time.at(j["failed_at"])), "failed_at_class" => j["failed_at"].class.name,
)
before = Time.now.to_f
j.retry
deleted = rs.find_job(%q).delete
puts JSON.generate({
  "found" => found, "before" => before.to_s, "deleted" => deleted, "retry_jids" => rs.map(&:jid),
  "queue" => Sidekiq::Queue.new("pc_retry").map { |r| pc_rec(r) },
})
`, retried.JID(), deleted.JID()))
	var res struct {
		Found struct {
			pcRec
			ErrorBacktrace []string `json:"error_backtrace"`
			RetryCount     int      `json:"retry_count"`
			ErrorMessage   string   `json:"error_message"`
			ErrorClass     string   `json:"error_class"`
			FailedAt       []int64  `json:"failed_at"`
			FailedAtClass  string   `json:"failed_at_class"`
		} `json:"found"`
		Before    string   `json:"before"`
		Deleted   bool     `json:"deleted"`
		RetryJIDs []string `json:"retry_jids"`
		Queue     []pcRec  `json:"queue"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))

	f := res.Found
	require.Equal(t, string(retried.Bytes()), f.Value)
	require.True(t, f.Roundtrip)
	require.Equal(t, retriedScore, f.Score)
	require.Equal(t, pcBacktrace, f.ErrorBacktrace, "Ruby decodes Go's 6.4 error_backtrace")
	require.Equal(t, 0, f.RetryCount)
	require.Equal(t, retried.ErrorMessage(), f.ErrorMessage)
	require.Equal(t, "RuntimeError", f.ErrorClass)
	require.Equal(t, "Float", f.FailedAtClass)
	got, ok := retried.Time("failed_at")
	pcRequireTimeNear(t, f.FailedAt, got, ok, "failed_at")
	parsed, err := wire.ParseJob([]byte(f.Value))
	require.NoError(t, err)
	pcRequireAccessors(t, parsed, f.pcRec)

	require.True(t, res.Deleted)
	require.Equal(t, []string{kept.JID()}, res.RetryJIDs, "retry moved one entry out, delete removed another, the same-score sibling stays")
	members := pcZMembers(t, e, contract.KeyRetry)
	require.Len(t, members, 1)
	require.Equal(t, string(kept.Bytes()), members[0][0], "the sibling keeps its bytes")
	gotScore, err := contract.ParseScore(members[0][1]) // Redis may print 17 digits
	require.NoError(t, err)
	wantScore, err := contract.ParseScore(retriedScore)
	require.NoError(t, err)
	require.Equal(t, wantScore, gotScore, "the sibling keeps its score")

	// Ruby's retry pushed the job through Client.push: same payload, with
	// retry_count decremented and a new enqueued_at.
	vals, err := redis.Strings(e.do(t, "LRANGE", contract.QueueKey("pc_retry"), 0, -1), nil)
	require.NoError(t, err)
	require.Len(t, vals, 1)
	require.Len(t, res.Queue, 1)
	require.Equal(t, vals[0], res.Queue[0].Value)
	back, err := wire.ParseJob([]byte(vals[0]))
	require.NoError(t, err)
	require.Equal(t, vals[0], string(back.Bytes()))
	pcRequireAccessors(t, back, res.Queue[0])
	rc, ok := back.RetryCount()
	require.True(t, ok)
	require.Equal(t, -1, rc)
	want := retried.Clone()
	contract.SetRetryCount(want, -1)
	enq, _ := back.Get("enqueued_at")
	want.Set("enqueued_at", enq)
	require.Equal(t, string(want.Bytes()), vals[0], "Ruby's retry changes only retry_count and enqueued_at")
	oldEnq, _ := retried.Time("enqueued_at")
	newEnq, ok := back.Time("enqueued_at")
	require.True(t, ok)
	before, err := strconv.ParseFloat(res.Before, 64)
	require.NoError(t, err)
	require.True(t, newEnq.After(oldEnq))
	require.True(t, contract.EpochSeconds(newEnq) >= before-1e-6, "enqueued_at is the time of Ruby's retry")
	lines, err := back.ErrorBacktrace()
	require.NoError(t, err)
	require.Equal(t, pcBacktrace, lines)
	queues, err := redis.Strings(e.do(t, "SMEMBERS", contract.KeyQueues), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"pc_retry"}, queues)
}

// TestClientCompatRescheduleKeepsOneMember: Ruby's SortedEntry#reschedule
// re-encodes the member (ZINCRBY set delta dump_json(item)); for Go-written
// retry and schedule entries that re-encoding is byte-identical, so exactly
// one member remains with the new score (docs/sidekiq-wire.md#json-generation). A payload written by Go's
// encoding/json, the control, shows the hazard: a second member appears.
func TestClientCompatRescheduleKeepsOneMember(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	now := time.Now()

	retry := pcGoRetryJob(t, "pc_q", now.Add(-time.Minute), pcBacktrace, 1.0, 1e20, 0.1, "é\u2028<>&/", []any{2.5, math.Copysign(0, -1)})
	pcZAdd(t, e, contract.KeyRetry, contract.Score(now.Add(time.Minute)), retry.Bytes())

	sched, err := wire.NewJob("PcGoWorker", 1.0, 1e20, 1.5e-07, "é😀\u2028\u2029<>&/", map[string]any{"f": 3.0})
	require.NoError(t, err)
	res, err := e.client.Push(ctx, sched, &sidekiq.PushOpts{At: now.Add(time.Hour)})
	require.NoError(t, err)
	require.True(t, res.Scheduled)

	// The control: what Go's encoding/json writes for a similar job.
	naive, err := json.Marshal(map[string]any{"class": "PcGoWorker", "args": []any{1.0, "<>\u2028"}, "jid": "0123456789abcdef01234567", "queue": "default", "retry": true})
	require.NoError(t, err)
	pcZAdd(t, e, contract.KeySchedule, contract.Score(now.Add(3*time.Hour)), naive)

	newRetry := now.Add(2 * time.Hour).Truncate(time.Millisecond)
	newSched := now.Add(5 * time.Hour).Truncate(time.Millisecond)
	newNaive := now.Add(6 * time.Hour).Truncate(time.Millisecond)
	e.ruby(t, fmt.Sprintf(`
Sidekiq::RetrySet.new.find_job(%q).reschedule(%s)
Sidekiq::ScheduledSet.new.find_job(%q).reschedule(%s)
Sidekiq::ScheduledSet.new.find_job("0123456789abcdef01234567").reschedule(%s)
`, retry.JID(), contract.Score(newRetry), res.JID, contract.Score(newSched), contract.Score(newNaive)))

	near := func(score string, want time.Time) {
		t.Helper()
		f, err := contract.ParseScore(score)
		require.NoError(t, err)
		require.InDelta(t, contract.EpochSeconds(want), f, 1e-6)
	}
	members := pcZMembers(t, e, contract.KeyRetry)
	require.Len(t, members, 1, "reschedule of the Go retry entry left %d members", len(members))
	require.Equal(t, string(retry.Bytes()), members[0][0])
	near(members[0][1], newRetry)

	var ours, others [][2]string
	for _, m := range pcZMembers(t, e, contract.KeySchedule) {
		if strings.Contains(m[0], res.JID) {
			ours = append(ours, m)
		} else {
			others = append(others, m)
		}
	}
	require.Len(t, ours, 1, "reschedule of the Go scheduled job left %d members", len(ours))
	require.Equal(t, string(res.Payload), ours[0][0])
	near(ours[0][1], newSched)

	require.Len(t, others, 2, "the encoding/json control should show the re-serialization duplicate (docs/sidekiq-wire.md#json-generation)")
	if others[0][0] != string(naive) {
		others[0], others[1] = others[1], others[0]
	}
	require.Equal(t, string(naive), others[0][0], "the original stays")
	near(others[0][1], now.Add(3*time.Hour))
	require.Equal(t, "{\"args\":[1,\"<>\u2028\"],\"class\":\"PcGoWorker\",\"jid\":\"0123456789abcdef01234567\",\"queue\":\"default\",\"retry\":true}", others[1][0], "Ruby adds its re-encoding")
	delta, err := contract.ParseScore(others[1][1])
	require.NoError(t, err)
	require.InDelta(t, 3*3600, delta, 1e-3, "the duplicate's score is the delta")
}

// TestClientCompatTimestampFormats: a Version8 client writes integer
// milliseconds; a Version6 client writes float seconds that keep ".0" at a
// whole second, and Ruby 6.4 reads those as the exact Time (and the
// scheduled score as the exact run time).
func TestClientCompatTimestampFormats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	whole := time.Unix(time.Now().Add(-time.Hour).Unix(), 0)
	sec := strconv.FormatInt(whole.Unix(), 10)

	c6, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: e.pool, Version: wire.Version6, Clock: clocktest.NewFake(whole)})
	require.NoError(t, err)
	r6, err := c6.Enqueue(ctx, "pc_v6", "PcGoWorker", 1)
	require.NoError(t, err)
	require.Contains(t, string(r6.Payload), `"created_at":`+sec+`.0,"enqueued_at":`+sec+`.0}`)
	j6, err := wire.NewJob("PcGoWorker", 2)
	require.NoError(t, err)
	s6, err := c6.Push(ctx, j6, &sidekiq.PushOpts{In: time.Hour})
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(string(s6.Payload), `"created_at":`+sec+`.0}`), string(s6.Payload))
	score, err := redis.String(e.do(t, "ZSCORE", contract.KeySchedule, s6.Payload), nil)
	require.NoError(t, err)
	require.Equal(t, strconv.FormatInt(whole.Unix()+3600, 10), score)

	msTime := whole.Add(166 * time.Millisecond)
	ms := strconv.FormatInt(msTime.UnixMilli(), 10)
	c8, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: e.pool, Version: wire.Version8, Clock: clocktest.NewFake(msTime)})
	require.NoError(t, err)
	r8, err := c8.Enqueue(ctx, "pc_v8", "PcGoWorker", 1)
	require.NoError(t, err)
	require.Contains(t, string(r8.Payload), `"created_at":`+ms+`,"enqueued_at":`+ms+`}`)
	j8, err := wire.ParseJob(r8.Payload)
	require.NoError(t, err)
	ca, ok := j8.Time("created_at")
	require.True(t, ok)
	require.True(t, ca.Equal(msTime))

	frac := time.Unix(whole.Unix(), 165170700)
	cf, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: e.pool, Version: wire.Version6, Clock: clocktest.NewFake(frac)})
	require.NoError(t, err)
	rf, err := cf.Enqueue(ctx, "pc_v6f", "PcGoWorker", 1)
	require.NoError(t, err)

	goBefore := time.Now()
	out := e.ruby(t, pcRubyHelpers+`
res = {}
%w[pc_v6 pc_v8 pc_v6f].each do |name|
  q = Sidekiq::Queue.new(name)
  r = q.first
  res[name] = pc_rec(r).merge("latency" => q.latency.to_s, "raw_created" => r["created_at"].to_s, "raw_enqueued" => r["enqueued_at"].to_s)
end
e = Sidekiq::ScheduledSet.new.first
res["sched"] = pc_rec(e).merge("score" => e.score.to_s, "at" => pc_time(e.at))
puts JSON.generate(res)
`)
	goAfter := time.Now()
	var res map[string]struct {
		pcRec
		Latency     string  `json:"latency"`
		RawCreated  string  `json:"raw_created"`
		RawEnqueued string  `json:"raw_enqueued"`
		AtTime      []int64 `json:"at"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))

	v6 := res["pc_v6"]
	require.Equal(t, r6.Payload, []byte(v6.Value))
	require.Equal(t, "Float", v6.CreatedAtClass)
	require.Equal(t, "Float", v6.EnqueuedAtClass)
	require.Equal(t, []int64{whole.Unix(), 0}, v6.CreatedAt, "Ruby reads the exact second")
	require.Equal(t, []int64{whole.Unix(), 0}, v6.EnqueuedAt)
	require.Equal(t, sec+".0", v6.RawCreated)
	lat, err := strconv.ParseFloat(v6.Latency, 64)
	require.NoError(t, err)
	require.True(t, lat >= goBefore.Sub(whole).Seconds()-1e-3 && lat <= goAfter.Sub(whole).Seconds()+1e-3, "Ruby latency %v", lat)

	vf := res["pc_v6f"]
	require.Equal(t, rf.Payload, []byte(vf.Value))
	jf, err := wire.ParseJob(rf.Payload)
	require.NoError(t, err)
	pcRequireAccessors(t, jf, vf.pcRec)
	require.Equal(t, pcField(t, jf, "created_at"), vf.RawCreated)

	sched := res["sched"]
	require.False(t, sched.HasEnqueuedAt)
	require.Equal(t, []int64{whole.Unix() + 3600, 0}, sched.AtTime, "Ruby reads the exact run time")
	require.Equal(t, []int64{whole.Unix(), 0}, sched.CreatedAt)

	// The 8.x format is integer ms, which Ruby 6.4 parses as an Integer
	// (and would misread as seconds: Version8 is for 8.x readers only).
	v8 := res["pc_v8"]
	require.Equal(t, r8.Payload, []byte(v8.Value))
	require.Equal(t, "Integer", v8.CreatedAtClass)
	require.Equal(t, "Integer", v8.EnqueuedAtClass)
	require.Equal(t, ms, v8.RawCreated)
	require.Equal(t, msTime.UnixMilli(), v8.CreatedAt[0])
	require.Equal(t, performAsyncKeys(t), v8.Keys)
}

// performAsyncKeys is the key order of a perform_async payload captured
// from Ruby Sidekiq 6.4.1.
func performAsyncKeys(t *testing.T) []string {
	t.Helper()
	m, err := rubyjson.ParseObject(rubyfixtures.Read(t, "6.4.1", "perform_async_simple.json"))
	require.NoError(t, err)
	return m.Keys()
}
