package compat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubyfloat"
	"github.com/gojob/gojob/internal/rubytest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// apiRubyTemplate builds, with Ruby Sidekiq 6.4.1 itself, a realistic
// state: queues (perform_async, Client.push), a schedule set (perform_in),
// a retry set (JobRetry#global on failing jobs, plus three members sharing
// one score), a dead set (exhausted retry: 0 jobs, DeadSet#kill, an
// unparsable string), stats (a heartbeat flush) and a process (a real
// Launcher heartbeat with two busy threads, plus a stale id). It then
// prints Ruby's API view of it with Time.now frozen at %[1]s.
const apiRubyTemplate = `
require "date"
require "sidekiq/job_retry"
require "sidekiq/launcher"
class HardJob
  include Sidekiq::Worker
  def perform(*); end
end
Sidekiq.redis { |c| c.flushdb }
5.times { |i| HardJob.perform_async(i, "two", {"three" => 3.5}) }
HardJob.set(queue: "critical").perform_async("c1")
HardJob.set(queue: "critical").perform_async("c2")
Sidekiq::Client.push("class" => "Other", "args" => ["é", nil, 1.0e+20], "queue" => "low")
Sidekiq.redis { |c| c.sadd("queues", "empty") }
60.times { |i| HardJob.perform_in(100 + i * 7, i) }

jr = Sidekiq::JobRetry.new
fail_job = lambda do |i, retry_opt, extra = {}|
  msg = Sidekiq.dump_json({"retry" => retry_opt, "queue" => "default", "class" => "FailJob", "args" => [i, "é"],
    "jid" => SecureRandom.hex(12), "created_at" => Time.now.to_f, "enqueued_at" => Time.now.to_f}.merge(extra))
  begin
    jr.global(msg, "default") { raise ArgumentError, "boom #{i} é" }
  rescue Sidekiq::JobRetry::Handled
  end
end
70.times { |i| fail_job.call(i, true, i.zero? ? {"backtrace" => 2} : {}) }
2.times { |i| fail_job.call(70 + i, 5, {"retry_count" => 2, "failed_at" => Time.now.to_f - 100, "retry_queue" => "low"}) }
sib_score = Time.now.to_f + 1000
sib_jids = 3.times.map { SecureRandom.hex(12) }
sib_jids.each_with_index do |jid, i|
  Sidekiq.redis { |c| c.zadd("retry", sib_score.to_s, Sidekiq.dump_json({"retry" => true, "queue" => "default",
    "class" => "FailJob", "args" => [i], "jid" => jid, "created_at" => Time.now.to_f, "enqueued_at" => Time.now.to_f,
    "error_message" => "sib", "error_class" => "RuntimeError", "failed_at" => Time.now.to_f, "retry_count" => i})) }
end

5.times { |i| fail_job.call(100 + i, 0) }
Sidekiq::DeadSet.new.kill(Sidekiq.dump_json({"retry" => true, "queue" => "critical", "class" => "HardJob", "args" => [],
  "jid" => SecureRandom.hex(12), "created_at" => Time.now.to_f, "retry_count" => 2}), notify_failure: false)
Sidekiq::DeadSet.new.kill("not json {", notify_failure: false)

Sidekiq::Processor::PROCESSED.incr(12)
Sidekiq::Processor::FAILURE.incr(4)
Sidekiq.redis { |c| c.set("stat:processed:#{(Time.now.utc.to_date - 2).strftime("%%Y-%%m-%%d")}", 7) }
opts = Sidekiq.options.merge(concurrency: 4, queues: %%w[default critical default], tag: "apitag", labels: ["lbl"])
launcher = Sidekiq::Launcher.new(opts)
Sidekiq::Processor::WORKER_STATE.set("t1", {queue: "default", payload: Sidekiq.redis { |c| c.lindex("queue:default", 0) }, run_at: Time.now.to_i - 5})
Sidekiq::Processor::WORKER_STATE.set("t2", {queue: "critical", payload: Sidekiq.redis { |c| c.lindex("queue:critical", 0) }, run_at: Time.now.to_i - 9})
launcher.send(:❤)
Sidekiq.redis { |c| c.sadd("processes", "gone-host:1:000000000000") }

FROZEN = %[1]s
module APIFrozenNow
  def now = Time.at(FROZEN)
end
Time.singleton_class.prepend(APIFrozenNow)

def api_entries(set) = set.map { |e| {"value" => e.value, "score" => e.score.to_s, "jid" => e.jid.to_s, "args" => e.args} }
st = Sidekiq::Stats.new
r = {
  "stats" => {"processed" => st.processed, "failed" => st.failed, "scheduled" => st.scheduled_size,
    "retries" => st.retry_size, "dead" => st.dead_size, "processes" => st.processes_size, "enqueued" => st.enqueued,
    "busy" => st.workers_size, "latency" => st.default_queue_latency, "queues" => st.queues},
  "history" => Sidekiq::Stats::History.new(5).then { |h| {"processed" => h.processed.to_a, "failed" => h.failed.to_a} },
  "queues" => Sidekiq::Queue.all.map { |q| {"name" => q.name, "size" => q.size, "latency" => q.latency, "values" => q.map(&:value)} },
  "retry" => api_entries(Sidekiq::RetrySet.new),
  "schedule" => api_entries(Sidekiq::ScheduledSet.new),
  "dead" => api_entries(Sidekiq::DeadSet.new),
  "sib_jids" => sib_jids,
  "sib_score" => sib_score.to_s,
  "fetch" => Sidekiq::RetrySet.new.fetch(sib_score, sib_jids[1]).map(&:value),
  "fetch_all" => Sidekiq::RetrySet.new.fetch(sib_score).map(&:value),
  "find_jid" => (find_jid = Sidekiq::DeadSet.new.map(&:jid).compact.first),
  "find" => Sidekiq::DeadSet.new.find_job(find_jid).value,
  "scan" => Sidekiq::RetrySet.new.scan("boom 1").map(&:value).sort,
  "processes" => Sidekiq::ProcessSet.new(false).map { |p| Sidekiq.dump_json(p.instance_variable_get(:@attribs)) },
  "process_size" => Sidekiq::ProcessSet.new(false).size,
  "total_concurrency" => Sidekiq::ProcessSet.new(false).total_concurrency,
  "total_rss" => Sidekiq::ProcessSet.new(false).total_rss_in_kb,
  "work" => Sidekiq::WorkSet.new.map { |pid, tid, w| [pid, tid, w["queue"], Sidekiq.dump_json(w["payload"]), w["run_at"]] },
  "work_size" => Sidekiq::WorkSet.new.size,
}
puts JSON.generate(r)
`

type apiRubyEntry struct {
	Value string `json:"value"`
	Score string `json:"score"`
	JID   string `json:"jid"`
	Args  []any  `json:"args"`
}

type apiRubyReport struct {
	Stats struct {
		Processed, Failed, Scheduled, Retries, Dead, Processes, Enqueued, Busy int64
		Latency                                                                float64
		Queues                                                                 map[string]int64
	} `json:"stats"`
	History struct {
		Processed [][2]any `json:"processed"`
		Failed    [][2]any `json:"failed"`
	} `json:"history"`
	Queues []struct {
		Name    string   `json:"name"`
		Size    int64    `json:"size"`
		Latency float64  `json:"latency"`
		Values  []string `json:"values"`
	} `json:"queues"`
	Retry            []apiRubyEntry `json:"retry"`
	Schedule         []apiRubyEntry `json:"schedule"`
	Dead             []apiRubyEntry `json:"dead"`
	SibJIDs          []string       `json:"sib_jids"`
	SibScore         string         `json:"sib_score"`
	Fetch            []string       `json:"fetch"`
	FetchAll         []string       `json:"fetch_all"`
	FindJID          string         `json:"find_jid"`
	Find             string         `json:"find"`
	Scan             []string       `json:"scan"`
	Processes        []string       `json:"processes"`
	ProcessSize      int64          `json:"process_size"`
	TotalConcurrency int64          `json:"total_concurrency"`
	TotalRSS         int64          `json:"total_rss"`
	Work             [][5]any       `json:"work"`
	WorkSize         int64          `json:"work_size"`
}

// TestAPICompatRubyState builds a state with Ruby Sidekiq 6.4.1, checks
// that gojob's API reads it as Ruby's API does, then runs each write
// operation with gojob on one copy and with Ruby on another and compares
// the whole key space.
func TestAPICompatRubyState(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	frozen := time.Now().Truncate(time.Millisecond).Add(90 * time.Second)
	frozenF := contract.EpochSeconds(frozen)
	out := e.ruby(t, fmt.Sprintf(apiRubyTemplate, rubyfloat.Format(frozenF)))
	var rep apiRubyReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	admin, err := api.New(&api.Config{Pool: e.pool, Version: wire.Version6, Clock: clocktest.NewFake(frozen)})
	require.NoError(t, err)

	t.Run("read", func(t *testing.T) { apiCompareRead(t, ctx, admin, &rep) })

	ops := apiOps(&rep)
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			t.Parallel()
			apiRunOp(t, e, op)
		})
	}
}

func apiCompareRead(t *testing.T, ctx context.Context, admin *api.API, rep *apiRubyReport) {
	st, err := admin.Stats(ctx)
	require.NoError(t, err)
	rs := rep.Stats
	require.Equal(t, []int64{rs.Processed, rs.Failed, rs.Scheduled, rs.Retries, rs.Dead, rs.Processes, rs.Enqueued, rs.Busy},
		[]int64{st.Processed, st.Failed, st.Scheduled, st.Retries, st.Dead, st.Processes, st.Enqueued, st.Busy})
	require.EqualValues(t, 12, st.Processed)
	require.EqualValues(t, 2, st.Busy)
	require.InDelta(t, rs.Latency, st.DefaultQueueLatency.Seconds(), 1e-6)
	require.Greater(t, rs.Latency, 60.0)
	gotQueues := map[string]int64{}
	for i, q := range st.Queues {
		gotQueues[q.Name] = q.Size
		if i > 0 {
			require.GreaterOrEqual(t, st.Queues[i-1].Size, q.Size)
		}
	}
	require.Equal(t, rs.Queues, gotQueues)

	h, err := admin.History(ctx, 5)
	require.NoError(t, err)
	require.Len(t, h, 5)
	for i, d := range h {
		require.Equal(t, rep.History.Processed[i][0], d.Date)
		require.EqualValues(t, rep.History.Processed[i][1], d.Processed, d.Date)
		require.EqualValues(t, rep.History.Failed[i][1], d.Failed, d.Date)
	}
	require.EqualValues(t, 7, h[2].Processed)

	queues, err := admin.Queues(ctx)
	require.NoError(t, err)
	require.Len(t, queues, len(rep.Queues))
	for i, q := range queues {
		rq := rep.Queues[i]
		require.Equal(t, rq.Name, q.Name())
		n, err := q.Size(ctx)
		require.NoError(t, err)
		require.Equal(t, rq.Size, n)
		lat, err := q.Latency(ctx)
		require.NoError(t, err)
		require.InDelta(t, rq.Latency, lat.Seconds(), 1e-6, rq.Name)
		values := []string{}
		require.NoError(t, q.Each(ctx, func(r *api.JobRecord) error {
			values = append(values, string(r.Value))
			return nil
		}))
		require.Equal(t, rq.Values, values, rq.Name)
		records, _, err := q.Page(ctx, nil, 0, 100)
		require.NoError(t, err)
		require.Equal(t, rq.Values, apiValues(records))
	}

	for _, set := range []struct {
		js   *api.JobSet
		want []apiRubyEntry
	}{{admin.RetrySet(), rep.Retry}, {admin.ScheduledSet(), rep.Schedule}, {admin.DeadSet(), rep.Dead}} {
		var got []apiRubyEntry
		require.NoError(t, set.js.Each(ctx, func(e *api.SortedEntry) error {
			args := []any{}
			for _, a := range e.Args() {
				args = append(args, apiJSONAny(t, a))
			}
			got = append(got, apiRubyEntry{Value: string(e.Value), Score: rubyfloat.Format(e.Score), JID: e.JID(), Args: args})
			return nil
		}))
		require.Equal(t, set.want, got, set.js.Name())
		require.Greater(t, len(got), 6)
		// Page lists the dead set in JobSet#each order, the retry and
		// schedule sets lowest score first (the reverse, as the Web UI).
		page, _, err := set.js.Page(ctx, nil, 3, 4)
		require.NoError(t, err)
		require.Len(t, page, 4)
		for i, e := range page {
			want := set.want[3+i]
			if set.js.Name() != "dead" {
				want = set.want[len(set.want)-1-3-i]
			}
			require.Equal(t, want.Value, string(e.Value))
		}
	}
	// The unparsable dead member is listed with args [raw], as in Ruby.
	i := slices.IndexFunc(rep.Dead, func(e apiRubyEntry) bool { return e.Value == "not json {" })
	require.GreaterOrEqual(t, i, 0)
	require.Equal(t, "", rep.Dead[i].JID)
	require.Equal(t, []any{"not json {"}, rep.Dead[i].Args)

	score, err := contract.ParseScore(rep.SibScore)
	require.NoError(t, err)
	fetched, err := admin.RetrySet().Fetch(ctx, score, rep.SibJIDs[1])
	require.NoError(t, err)
	require.Equal(t, rep.Fetch, apiEntryValues(fetched))
	fetched, err = admin.RetrySet().Fetch(ctx, score, "")
	require.NoError(t, err)
	require.Equal(t, rep.FetchAll, apiEntryValues(fetched))
	require.Len(t, fetched, 3)
	found, err := admin.DeadSet().FindJob(ctx, rep.FindJID)
	require.NoError(t, err)
	require.Equal(t, rep.Find, string(found.Value))
	var scanned []string
	require.NoError(t, admin.RetrySet().Scan(ctx, "boom 1", func(e *api.SortedEntry) error {
		scanned = append(scanned, string(e.Value))
		return nil
	}))
	slices.Sort(scanned)
	require.Equal(t, rep.Scan, scanned)
	require.Len(t, scanned, 11) // boom 1, boom 10…19

	procs, err := admin.Processes(ctx)
	require.NoError(t, err)
	var attrs []string
	for _, p := range procs {
		attrs = append(attrs, string(p.Attributes.Encode()))
	}
	require.Equal(t, rep.Processes, attrs)
	require.Len(t, attrs, 1)
	p := procs[0]
	require.Equal(t, "apitag", p.Tag)
	require.EqualValues(t, 4, p.Concurrency)
	require.Equal(t, []string{"default", "critical"}, p.Queues)
	require.EqualValues(t, 2, p.Busy)
	require.False(t, p.Stopping)
	var concurrency, rss int64
	for _, p := range procs {
		concurrency += p.Concurrency
		rss += p.RSS
	}
	require.Equal(t, rep.TotalConcurrency, concurrency)
	require.Equal(t, rep.TotalRSS, rss)
	require.Equal(t, rep.ProcessSize, st.Processes)

	work, err := admin.WorkSet(ctx)
	require.NoError(t, err)
	var gotWork [][5]any
	for _, w := range work {
		gotWork = append(gotWork, [5]any{w.Identity, w.TID, w.Queue, string(w.Payload.Bytes()), float64(w.RunAt.Unix())})
	}
	require.Equal(t, rep.Work, gotWork)
	require.Len(t, gotWork, 2)
	require.Equal(t, rep.WorkSize, st.Busy)
}

func apiValues(rs []*api.JobRecord) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, string(r.Value))
	}
	return out
}

func apiEntryValues(es []*api.SortedEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, string(e.Value))
	}
	return out
}

// apiJSONAny converts a rubyjson value to what encoding/json decodes.
func apiJSONAny(t *testing.T, v rubyjson.Value) any {
	t.Helper()
	var out any
	require.NoError(t, json.Unmarshal(v.Encode(), &out))
	return out
}

// apiOp is one write operation run by gojob on one copy of the template
// and by Ruby on another.
type apiOp struct {
	name string
	// prep runs on both copies first.
	prep func(t *testing.T, c redis.Conn)
	// goOp runs against the Go copy.
	goOp func(t *testing.T, ctx context.Context, a *api.API)
	// ruby runs against the Ruby copy.
	ruby string
	// ignore lists keys left out of the comparison, with the reason.
	ignore map[string]string
}

func apiOps(rep *apiRubyReport) []apiOp {
	sib := rep.SibJIDs[1]
	firstRetry, lastRetry := rep.Retry[0].JID, rep.Retry[len(rep.Retry)-1].JID
	var retryQueueJID string // a retry entry with retry_queue "low" and retry_count 3
	for _, e := range rep.Retry {
		if strings.Contains(e.Value, `"retry_queue":"low"`) {
			retryQueueJID = e.JID
		}
	}
	deadJID := rep.Dead[len(rep.Dead)-1].JID
	schedJID := rep.Schedule[10].JID
	var defaultJobs []string
	for _, q := range rep.Queues {
		if q.Name == "default" {
			defaultJobs = q.Values
		}
	}
	queueJob, err := wire.ParseJob([]byte(defaultJobs[2]))
	if err != nil {
		panic(err)
	}
	dropUnparsable := func(t *testing.T, c redis.Conn) {
		_, err := c.Do("ZREM", "dead", "not json {")
		require.NoError(t, err)
	}
	find := func(t *testing.T, ctx context.Context, js *api.JobSet, jid string) *api.SortedEntry {
		e, err := js.FindJob(ctx, jid)
		require.NoError(t, err)
		return e
	}
	return []apiOp{
		{
			name: "retry_sibling",
			goOp: func(t *testing.T, ctx context.Context, a *api.API) {
				_, err := find(t, ctx, a.RetrySet(), sib).Retry(ctx)
				require.NoError(t, err)
			},
			ruby: fmt.Sprintf(`Sidekiq::RetrySet.new.find_job(%q).retry`, sib),
		},
		{
			name: "retry_one_retry_queue",
			goOp: func(t *testing.T, ctx context.Context, a *api.API) {
				_, err := find(t, ctx, a.RetrySet(), retryQueueJID).Retry(ctx)
				require.NoError(t, err)
			},
			ruby: fmt.Sprintf(`Sidekiq::RetrySet.new.find_job(%q).retry`, retryQueueJID),
		},
		{
			name: "kill_one",
			goOp: func(t *testing.T, ctx context.Context, a *api.API) {
				_, err := find(t, ctx, a.RetrySet(), firstRetry).Kill(ctx, nil)
				require.NoError(t, err)
			},
			ruby: fmt.Sprintf(`Sidekiq::RetrySet.new.find_job(%q).kill`, firstRetry),
		},
		{
			name: "kill_sibling",
			goOp: func(t *testing.T, ctx context.Context, a *api.API) {
				_, err := find(t, ctx, a.RetrySet(), rep.SibJIDs[0]).Kill(ctx, nil)
				require.NoError(t, err)
			},
			ruby: fmt.Sprintf(`Sidekiq::RetrySet.new.find_job(%q).kill`, rep.SibJIDs[0]),
		},
		{
			name: "delete_one",
			goOp: func(t *testing.T, ctx context.Context, a *api.API) {
				ok, err := find(t, ctx, a.RetrySet(), lastRetry).Delete(ctx)
				require.NoError(t, err)
				require.True(t, ok)
			},
			ruby: fmt.Sprintf(`Sidekiq::RetrySet.new.find_job(%q).delete`, lastRetry),
		},
		{
			// A whole second: Ruby's Time#to_f divides the integer ns by
			// 1e9 in double precision, so Time.at(t, 250, :millisecond).to_f
			// is t+0.2499998, while Go's EpochSeconds gives t+0.25.
			name: "reschedule_one",
			goOp: func(t *testing.T, ctx context.Context, a *api.API) {
				require.NoError(t, find(t, ctx, a.ScheduledSet(), schedJID).Reschedule(ctx, time.Unix(1795400000, 0)))
			},
			ruby: fmt.Sprintf(`Sidekiq::ScheduledSet.new.find_job(%q).reschedule(Time.at(1795400000))`, schedJID),
		},
		{
			name: "retry_all",
			goOp: func(t *testing.T, ctx context.Context, a *api.API) {
				res, err := a.RetrySet().RetryAll(ctx)
				require.NoError(t, err)
				require.Equal(t, len(rep.Retry), res.Moved)
			},
			ruby: `Sidekiq::RetrySet.new.retry_all`,
		},
		{
			name: "kill_all",
			goOp: func(t *testing.T, ctx context.Context, a *api.API) {
				res, err := a.RetrySet().KillAll(ctx, nil)
				require.NoError(t, err)
				require.Equal(t, len(rep.Retry), res.Moved)
			},
			ruby: `Sidekiq::RetrySet.new.kill_all`,
		},
		{
			name: "delete_all",
			goOp: func(t *testing.T, ctx context.Context, a *api.API) {
				require.NoError(t, a.RetrySet().Clear(ctx))
				require.NoError(t, a.DeadSet().Clear(ctx))
			},
			ruby: `Sidekiq::RetrySet.new.clear; Sidekiq::DeadSet.new.clear`,
		},
		{
			name: "dead_retry_one",
			goOp: func(t *testing.T, ctx context.Context, a *api.API) {
				_, err := find(t, ctx, a.DeadSet(), deadJID).Retry(ctx)
				require.NoError(t, err)
			},
			ruby: fmt.Sprintf(`Sidekiq::DeadSet.new.find_job(%q).retry`, deadJID),
		},
		{
			name: "dead_retry_all",
			prep: dropUnparsable,
			goOp: func(t *testing.T, ctx context.Context, a *api.API) {
				res, err := a.DeadSet().RetryAll(ctx)
				require.NoError(t, err)
				require.Equal(t, len(rep.Dead)-1, res.Moved)
			},
			ruby: `Sidekiq::DeadSet.new.retry_all`,
		},
		{
			name: "dead_kill_payload",
			goOp: func(t *testing.T, ctx context.Context, a *api.API) {
				require.NoError(t, a.DeadSet().Kill(ctx, []byte(defaultJobs[0]), nil))
			},
			ruby: fmt.Sprintf(`Sidekiq::DeadSet.new.kill(%q)`, defaultJobs[0]),
		},
		{
			name: "scheduled_add_one",
			goOp: func(t *testing.T, ctx context.Context, a *api.API) {
				_, err := find(t, ctx, a.ScheduledSet(), schedJID).Retry(ctx)
				require.NoError(t, err)
			},
			ruby: fmt.Sprintf(`Sidekiq::ScheduledSet.new.find_job(%q).add_to_queue`, schedJID),
		},
		{
			name: "scheduled_add_all",
			goOp: func(t *testing.T, ctx context.Context, a *api.API) {
				res, err := a.ScheduledSet().RetryAll(ctx)
				require.NoError(t, err)
				require.Equal(t, len(rep.Schedule), res.Moved)
			},
			ruby: `ss = Sidekiq::ScheduledSet.new; ss.each(&:add_to_queue) while ss.size > 0`,
		},
		{
			name: "queue_delete_job_and_clear",
			goOp: func(t *testing.T, ctx context.Context, a *api.API) {
				r, err := a.Queue("default").FindJob(ctx, queueJob.JID())
				require.NoError(t, err)
				ok, err := a.Queue("default").DeleteJob(ctx, r.Value)
				require.NoError(t, err)
				require.True(t, ok)
				require.NoError(t, a.Queue("low").Clear(ctx))
			},
			ruby: fmt.Sprintf(`Sidekiq::Queue.new("default").find_job(%q).delete; Sidekiq::Queue.new("low").clear`, queueJob.JID()),
		},
		{
			name: "processes_signals_cleanup",
			goOp: func(t *testing.T, ctx context.Context, a *api.API) {
				list, err := a.Processes(ctx)
				require.NoError(t, err)
				p := list[0]
				require.NoError(t, p.Quiet(ctx))
				require.NoError(t, p.DumpThreads(ctx))
				require.NoError(t, p.Stop(ctx))
			},
			ruby:   `p = Sidekiq::ProcessSet.new.first; p.quiet!; p.dump_threads; p.stop!`,
			ignore: map[string]string{"process_cleanup": "gojob takes the 6.5.2+ cleanup lock; 6.4.1 cleans up without one"},
		},
		{
			name: "reset_stats",
			goOp: func(t *testing.T, ctx context.Context, a *api.API) {
				_, err := a.ResetStats(ctx)
				require.NoError(t, err)
			},
			ruby: `Sidekiq::Stats.new.reset`,
		},
	}
}

// apiRunOp copies the template (the env's db 0) into db 0 (gojob) and db 1
// (Ruby) of a fresh redis-server, runs the operation on each and compares
// the key spaces.
func apiRunOp(t *testing.T, e *env, op apiOp) {
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	goPool, rubyPool := apiDBPool(t, srv, 0), apiDBPool(t, srv, 1)
	apiCopyDB(t, e.pool, goPool)
	apiCopyDB(t, e.pool, rubyPool)
	for _, p := range []*redis.Pool{goPool, rubyPool} {
		if op.prep != nil {
			c := p.Get()
			op.prep(t, c)
			c.Close()
		}
	}
	since := contract.EpochSeconds(time.Now())
	admin, err := api.New(&api.Config{Pool: goPool, Version: wire.Version6})
	require.NoError(t, err)
	op.goOp(t, context.Background(), admin)
	rubytest.Run(t, fmt.Sprintf("redis://127.0.0.1:%d/1", srv.Port), op.ruby)
	got, want := apiKeyspace(t, goPool, since), apiKeyspace(t, rubyPool, since)
	for k := range op.ignore {
		delete(got, k)
		delete(want, k)
	}
	require.Equal(t, slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got)), "keys")
	for k := range want {
		require.Equal(t, want[k], got[k], "key %s", k)
	}
	// The operation did something.
	require.NotEqual(t, apiKeyspace(t, e.pool, since), got)
}

func apiDBPool(t *testing.T, srv *redistest.Server, db int) *redis.Pool {
	p := &redis.Pool{MaxIdle: 4, Dial: func() (redis.Conn, error) {
		return redis.Dial("unix", srv.Socket, redis.DialDatabase(db))
	}}
	t.Cleanup(func() { p.Close() })
	return p
}

// apiCopyDB copies every key with DUMP/RESTORE, keeping TTLs.
func apiCopyDB(t *testing.T, from, to *redis.Pool) {
	src, dst := from.Get(), to.Get()
	defer src.Close()
	defer dst.Close()
	keys, err := redis.Strings(src.Do("KEYS", "*"))
	require.NoError(t, err)
	for _, k := range keys {
		data, err := redis.Bytes(src.Do("DUMP", k))
		require.NoError(t, err)
		ttl, err := redis.Int64(src.Do("PTTL", k))
		require.NoError(t, err)
		_, err = dst.Do("RESTORE", k, max(ttl, 0), data, "REPLACE")
		require.NoError(t, err)
	}
}

// apiKey is one key's normalized content.
type apiKey struct {
	Type   string
	HasTTL bool
	Items  []string
}

// apiKeyspace dumps a database: lists in order, sets sorted, sorted sets in
// score order with scores, hashes sorted. Times set by the operation
// (enqueued_at in payloads, dead-set scores, both at or after since) become
// "<now>"; everything else must match exactly.
func apiKeyspace(t *testing.T, p *redis.Pool, since float64) map[string]apiKey {
	c := p.Get()
	defer c.Close()
	keys, err := redis.Strings(c.Do("KEYS", "*"))
	require.NoError(t, err)
	out := map[string]apiKey{}
	for _, k := range keys {
		typ, err := redis.String(c.Do("TYPE", k))
		require.NoError(t, err)
		ttl, err := redis.Int64(c.Do("PTTL", k))
		require.NoError(t, err)
		key := apiKey{Type: typ, HasTTL: ttl > 0}
		var items []string
		switch typ {
		case "string":
			s, err := redis.String(c.Do("GET", k))
			require.NoError(t, err)
			items = []string{s}
		case "list":
			items, err = redis.Strings(c.Do("LRANGE", k, 0, -1))
			require.NoError(t, err)
			for i, s := range items {
				items[i] = apiNormalizeJob(s, since)
			}
		case "set":
			items, err = redis.Strings(c.Do("SMEMBERS", k))
			require.NoError(t, err)
			slices.Sort(items)
		case "zset":
			vals, err := redis.Strings(c.Do("ZRANGE", k, 0, -1, "WITHSCORES"))
			require.NoError(t, err)
			for i := 0; i < len(vals); i += 2 {
				score := vals[i+1]
				if f, _ := contract.ParseScore(score); k == "dead" && f >= since {
					score = "<now>"
				}
				items = append(items, apiNormalizeJob(vals[i], since)+" @ "+score)
			}
		case "hash":
			m, err := redis.StringMap(c.Do("HGETALL", k))
			require.NoError(t, err)
			for f, v := range m {
				items = append(items, f+"="+v)
			}
			slices.Sort(items)
		default:
			t.Fatalf("unexpected type %s of %s", typ, k)
		}
		key.Items = items
		out[k] = key
	}
	return out
}

// apiNormalizeJob replaces a float enqueued_at at or after since.
func apiNormalizeJob(s string, since float64) string {
	m, err := rubyjson.ParseObject([]byte(s))
	if err != nil {
		return s
	}
	v, ok := m.Get("enqueued_at")
	if !ok || v.Kind() != rubyjson.Float {
		return s
	}
	if f, _ := v.Float(); f < since {
		return s
	}
	m.Set("enqueued_at", rubyjson.StringValue("<now>"))
	return string(m.Encode())
}

// apiLiveWorker is the job file of the live Sidekiq process.
const apiLiveWorker = `
class NoopJob
  include Sidekiq::Worker
  def perform(*); end
end
`

// TestAPICompatLiveProcessSignals runs a real Sidekiq 6.4.1 process and
// drives it with gojob's API: gojob lists it as Ruby's ProcessSet does,
// Quiet makes it quiet at a later heartbeat, Stop makes it exit and
// unregister.
func TestAPICompatLiveProcessSignals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	file := t.TempDir() + "/noop_job.rb"
	require.NoError(t, os.WriteFile(file, []byte(apiLiveWorker), 0o644))
	rubytest.Start(t, e.srv.URL(), fmt.Sprintf(`
require "sidekiq/cli"
cli = Sidekiq::CLI.instance
cli.parse(["-c", "2", "-q", "apilive", "-g", "apilive", "-r", %q])
cli.run
`, file))
	admin, err := api.New(&api.Config{Pool: e.pool})
	require.NoError(t, err)

	var proc *api.Process
	wait.Within(t, 30*time.Second, "the process registers", func() bool {
		list, err := admin.Processes(ctx)
		require.NoError(t, err)
		for _, p := range list {
			if p.Tag == "apilive" {
				proc = p
			}
		}
		return proc != nil
	})
	require.EqualValues(t, 2, proc.Concurrency)
	require.Equal(t, []string{"apilive"}, proc.Queues)
	require.False(t, proc.Stopping)
	// Ruby's ProcessSet sees the same process with the same attributes.
	rubyAttrs := e.ruby(t, `puts Sidekiq.dump_json(Sidekiq::ProcessSet.new(false).first.instance_variable_get(:@attribs).except("beat", "rtt_us", "rss"))`)
	m := proc.Attributes.Clone()
	m.Delete("beat")
	m.Delete("rtt_us")
	m.Delete("rss")
	require.Equal(t, strings.TrimSpace(rubyAttrs), string(m.Encode()))

	require.NoError(t, proc.Quiet(ctx))
	wait.Within(t, 20*time.Second, "the process turns quiet", func() bool {
		list, err := admin.Processes(ctx)
		require.NoError(t, err)
		return len(list) == 1 && list[0].Stopping
	})
	require.Equal(t, "true\n", e.ruby(t, `puts Sidekiq::ProcessSet.new(false).first.stopping?`))

	require.NoError(t, proc.Stop(ctx))
	wait.Within(t, 30*time.Second, "the process unregisters", func() bool {
		st, err := admin.Stats(ctx)
		require.NoError(t, err)
		return st.Processes == 0
	})
}
