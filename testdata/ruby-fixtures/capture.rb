# Captures Ruby Sidekiq 6.4.1 payloads and Redis state into $OUT_DIR.
# Run it through capture.sh, which starts the private redis-server and sets
# REDIS_URL, REDIS_PORT, OUT_DIR and SIDEKIQ_BIN. See capture.sh for details.
#
# Phases:
#   A. client only (no Sidekiq process): perform_async / push / push_bulk /
#      perform_in / ActiveJob, each value read back from Redis right after it
#      was written; then FLUSHDB.
#   B. failing jobs are enqueued (their queue entries captured), then the real
#      Sidekiq CLI is started and processes them; retry and dead entries are
#      captured as they appear; two retries are rescheduled to "now" through
#      the API so the poller runs them again.
#   C. a SlowJob keeps one thread busy: the heartbeat hash, the work hash and
#      the processes set are captured; then the process is quieted (TSTP) and
#      stopped (TERM) through the API, like the Web UI does.
#   D. after the stop: "Retry now" of a retry entry (the re-pushed queue entry
#      has retry_count -1), the stat keys, and a MONITOR excerpt.
$stdout.sync = true
require_relative "jobs"
require_relative "fixture_lib"
require "active_job"
require "active_support/time"
require "bigdecimal"
require "timeout"

OUT = ENV.fetch("OUT_DIR")
PORT = ENV.fetch("REDIS_PORT")
SIDEKIQ_BIN = ENV.fetch("SIDEKIQ_BIN")
HERE = __dir__
Sidekiq.logger.level = Logger::WARN
ActiveJob::Base.logger = Logger.new(nil)
ActiveJob::Base.queue_adapter = :sidekiq

M = FixtureLib::Manifest.new(OUT, {
  "sidekiq_version" => Sidekiq::VERSION,
  "source" => "captured from real Ruby Sidekiq by testdata/ruby-fixtures/capture.sh",
  "captured_with" => {
    "ruby" => RUBY_VERSION, "sidekiq" => Sidekiq::VERSION, "activejob" => ActiveJob.version.to_s,
    "json" => JSON::VERSION, "redis_rb" => Redis::VERSION,
    "redis_server" => Sidekiq.redis { |c| c.info["redis_version"] }
  },
  "notes" => "Every file holds one Redis value byte-exact (no added newline), except *_set.json " \
             "(a sorted JSON array of set members, written by Ruby) and monitor_excerpt.txt. " \
             "Scores are as ZSCORE returns them; score_sent is the string Ruby passed to ZADD (from MONITOR). " \
             "Timestamps, jids, identities and scores vary per run."
})

def redis(&blk) = Sidekiq.redis(&blk)

def wait_for(desc, timeout = 30)
  deadline = Time.now + timeout
  loop do
    v = yield
    return v if v
    raise "timed out after #{timeout}s waiting for #{desc}" if Time.now > deadline
    sleep 0.05
  end
end

# member_of returns [member, score] of the entry of zset whose jid is jid and
# for which the block (given the parsed payload) is true.
def member_of(zset, jid, &cond)
  redis { |c| c.zrange(zset, 0, -1, with_scores: true) }.each do |member, _|
    msg = JSON.parse(member) rescue next
    next unless msg.is_a?(Hash) && msg["jid"] == jid
    next if cond && !cond.call(msg)
    return [member, redis { |c| c.call("zscore", zset, member) }]
  end
  nil
end

def zset_has_jid?(zset, jid) = !member_of(zset, jid).nil?

# capture_list runs the block and returns the entries it added to the list
# (LPUSH adds at the left, so the newest entry is first).
def capture_list(key)
  before = redis { |c| c.llen(key) }
  yield
  added = redis { |c| c.llen(key) } - before
  redis { |c| c.lrange(key, 0, added - 1) }
end

def list_fixture(file, produced_by, key, notes: nil)
  entries = capture_list(key) { yield }
  raise "#{file}: expected 1 new entry in #{key}, got #{entries.size}" unless entries.size == 1
  M.job(file, entries[0], produced_by: produced_by, redis: {"key" => key, "type" => "list", "index" => 0}, notes: notes)
  JSON.parse(entries[0])["jid"]
end

def zset_fixture(file, produced_by, zset, jid, notes: nil, &cond)
  member, score = wait_for("#{file}: jid #{jid} in #{zset}") { member_of(zset, jid, &cond) }
  M.job(file, member, produced_by: produced_by, redis: {"key" => zset, "type" => "zset", "score" => score}, notes: notes)
  [member, score]
end

# --- MONITOR ----------------------------------------------------------------
# monitor_args splits a MONITOR line into its arguments, undoing Redis'
# sdscatrepr quoting (\\ \" \n \r \t \a \b \xHH).
def monitor_args(line)
  rest = line.split("] ", 2)[1] or return []
  args = []
  i = 0
  while (i = rest.index('"', i))
    buf = +"".b
    i += 1
    while i < rest.size && rest[i] != '"'
      if rest[i] == "\\"
        n = rest[i + 1]
        case n
        when "x" then buf << rest[i + 2, 2].to_i(16).chr
                      i += 2
        when "n" then buf << "\n"
        when "r" then buf << "\r"
        when "t" then buf << "\t"
        when "a" then buf << "\a"
        when "b" then buf << "\b"
        else buf << n
        end
        i += 2
      else
        buf << rest[i]
        i += 1
      end
    end
    args << buf
    i += 1
  end
  args
end

monitor_log = File.join(ENV.fetch("WORK_DIR"), "monitor.log")
monitor_pid = Process.spawn("redis-cli", "-p", PORT, "monitor", out: monitor_log, err: File::NULL)
sidekiq_pid = nil

at_exit do
  [sidekiq_pid, monitor_pid].compact.each do |pid|
    Process.kill("TERM", pid)
    Process.wait(pid)
  rescue Errno::ESRCH, Errno::ECHILD
  end
end
wait_for("MONITOR output", 10) do
  redis { |c| c.set("capture:monitor-probe", "1") }
  File.read(monitor_log).include?("capture:monitor-probe")
end

# --- Phase A: client-side payloads -----------------------------------------
puts "phase A: client pushes"

class MyAjJob < ActiveJob::Base
  queue_as :mailers
  def perform(*args, **kwargs)
  end
end

list_fixture("perform_async_simple.json", 'HardJob.perform_async(1, "two", {"three" => 3.5})', "queue:default") do
  HardJob.perform_async(1, "two", {"three" => 3.5})
end
list_fixture("perform_async_unicode.json",
  'HardJob.perform_async("é", "😀", "a\u2028b\u2029c", "<>&/", "日本語", "\u00e9\u0301", "\\\\ \"q\"")', "queue:default") do
  HardJob.perform_async("é", "😀", "a\u2028b\u2029c", "<>&/", "日本語", "\u00e9\u0301", "\\ \"q\"")
end
list_fixture("perform_async_floats.json",
  "HardJob.perform_async(3.5, 1.0, 1e20, 0.1, -0.0, 100.0, 1e15, 1e16, 1.5e-07, 0.0001, 2.5e-05, " \
  "12345678912345.678, 1.7976931348623157e308, 5.0e-324, 1795296573.1664987)", "queue:default") do
  HardJob.perform_async(3.5, 1.0, 1e20, 0.1, -0.0, 100.0, 1e15, 1e16, 1.5e-07, 0.0001, 2.5e-05,
    12345678912345.678, 1.7976931348623157e308, 5.0e-324, 1795296573.1664987)
end
list_fixture("perform_async_nested.json",
  'HardJob.perform_async({"a" => [1, {"b" => [nil, {"c" => "d"}]}], "e" => {"f" => {"g" => []}}}, [[1, [2, [3]]], {}])',
  "queue:default") do
  HardJob.perform_async({"a" => [1, {"b" => [nil, {"c" => "d"}]}], "e" => {"f" => {"g" => []}}}, [[1, [2, [3]]], {}])
end
list_fixture("perform_async_bigints.json",
  "HardJob.perform_async(2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**30, -(10**40), 0, -1)", "queue:default") do
  HardJob.perform_async(2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**30, -(10**40), 0, -1)
end
list_fixture("perform_async_nil_true_false.json", "HardJob.perform_async(nil, true, false, [nil], {\"k\" => nil})",
  "queue:default") do
  HardJob.perform_async(nil, true, false, [nil], {"k" => nil})
end
list_fixture("perform_async_empty.json", 'HardJob.perform_async("", [], {})', "queue:default") do
  HardJob.perform_async("", [], {})
end
list_fixture("perform_async_no_args.json", "HardJob.perform_async", "queue:default") do
  HardJob.perform_async
end
list_fixture("perform_async_control_chars.json",
  'HardJob.perform_async("\u0000\u0001\b\t\n\u000b\f\r\u001b\u001f\u007f", "line1\nline2", "\\\\")', "queue:default") do
  HardJob.perform_async("\u0000\u0001\b\t\n\u000b\f\r\u001b\u001f\u007f", "line1\nline2", "\\")
end
list_fixture("perform_async_symbols.json", "HardJob.perform_async(:sym, {a: 1, \"b\" => :c})", "queue:default",
  notes: "6.4 only warns about non-native arguments; JSON.generate writes symbols as strings") do
  HardJob.perform_async(:sym, {a: 1, "b" => :c})
end
list_fixture("perform_async_class_options.json", 'OptsJob.perform_async("x")  # sidekiq_options queue: "critical", backtrace: 5, custom_option: "kept"',
  "queue:critical") do
  OptsJob.perform_async("x")
end
list_fixture("perform_async_set_options.json", 'HardJob.set(retry: 2, backtrace: 3, tags: ["t1"]).perform_async(42)',
  "queue:default") do
  HardJob.set(retry: 2, backtrace: 3, tags: ["t1"]).perform_async(42)
end
list_fixture("client_push_hash.json", 'Sidekiq::Client.push("class" => "HardJob", "args" => [1, "x"])', "queue:default") do
  Sidekiq::Client.push("class" => "HardJob", "args" => [1, "x"])
end
list_fixture("client_push_custom_keys.json",
  'Sidekiq::Client.push("class" => "HardJob", "args" => [1], "queue" => "default", "retry" => 3, "custom" => {"x" => [1]}, "tags" => ["a"], "dead" => false)',
  "queue:default") do
  Sidekiq::Client.push("class" => "HardJob", "args" => [1], "queue" => "default", "retry" => 3,
    "custom" => {"x" => [1]}, "tags" => ["a"], "dead" => false)
end

bulk = capture_list("queue:default") { Sidekiq::Client.push_bulk("class" => HardJob, "args" => [[1], [2], [3]]) }
raise "push_bulk: want 3 entries, got #{bulk.size}" unless bulk.size == 3
bulk.reverse.each_with_index do |payload, i| # the list holds them newest first
  M.job("push_bulk_#{i}.json", payload, produced_by: 'Sidekiq::Client.push_bulk("class" => HardJob, "args" => [[1], [2], [3]])',
    redis: {"key" => "queue:default", "type" => "list", "index" => 2 - i}, group: "push_bulk",
    notes: "job #{i} of one push_bulk call: all three share created_at (and enqueued_at)")
end
ca = bulk.map { |b| JSON.parse(b)["created_at"] }.uniq
M.observe("push_bulk jobs share created_at [spec 2.1]", ca.size == 1 ? "confirmed" : "contradicted", "created_at values: #{ca.inspect}")

before = redis { |c| c.zcard("schedule") }
HardJob.perform_in(3600, "later")
sched = redis { |c| c.zrange("schedule", 0, -1) }
raise "perform_in: want 1 schedule entry" unless sched.size == before + 1 && sched.size == 1
M.job("perform_in.json", sched[0], produced_by: 'HardJob.perform_in(3600, "later")',
  redis: {"key" => "schedule", "type" => "zset", "score" => redis { |c| c.call("zscore", "schedule", sched[0]) }},
  notes: "score = enqueue time + 3600 s; no enqueued_at, no at")
redis { |c| c.del("schedule") }

aj_args = [
  1, "two", :sym, {"a" => 1, :b => 2}, ActiveSupport::HashWithIndifferentAccess.new("x" => 1),
  Time.utc(2024, 1, 2, 3, 4, 5, 123456.789r), Date.new(2024, 1, 2), DateTime.new(2024, 1, 2, 3, 4, 5, "+01:00"),
  ActiveSupport::TimeZone["Europe/Berlin"].local(2024, 7, 1, 12, 0, 0), 1.day + 2.hours, BigDecimal("1.5"),
  String, Comparable, [:nested_sym, {c: [1.5]}], nil, true, 3.25
]
list_fixture("activejob.json",
  "MyAjJob.perform_later(1, \"two\", :sym, {\"a\" => 1, :b => 2}, HashWithIndifferentAccess.new(\"x\" => 1), " \
  "Time.utc(2024, 1, 2, 3, 4, 5, 123456.789r), Date.new(2024, 1, 2), DateTime.new(2024, 1, 2, 3, 4, 5, \"+01:00\"), " \
  "ActiveSupport::TimeZone[\"Europe/Berlin\"].local(2024, 7, 1, 12), 1.day + 2.hours, BigDecimal(\"1.5\"), String, Comparable, " \
  "[:nested_sym, {c: [1.5]}], nil, true, 3.25, k: \"v\", n: 2)  # ActiveJob #{ActiveJob.version}, queue_as :mailers",
  "queue:mailers",
  notes: "Rails 6.1 adapter: Client.push(class, wrapped, queue, args). BigDecimal passes through ActiveJob 6.1 " \
         "unserialized and JSON.generate writes it as the string \"0.15e1\". Range has no serializer in 6.1 " \
         "(ActiveJob::SerializationError), so it is not captured; RangeSerializer/BigDecimalSerializer are 7.1+.") do
  MyAjJob.perform_later(*aj_args, k: "v", n: 2)
end
before = redis { |c| c.zcard("schedule") }
MyAjJob.set(wait: 3600).perform_later("later", {"x" => :y})
sched = redis { |c| c.zrange("schedule", 0, -1) }
raise "activejob scheduled: want 1 schedule entry" unless sched.size == 1 && before == 0
M.job("activejob_scheduled.json", sched[0], produced_by: 'MyAjJob.set(wait: 3600).perform_later("later", {"x" => :y})',
  redis: {"key" => "schedule", "type" => "zset", "score" => redis { |c| c.call("zscore", "schedule", sched[0]) }})
begin
  MyAjJob.perform_later(1..5)
  raise "Range unexpectedly serialized"
rescue ActiveJob::SerializationError => e
  M.observe("ActiveJob 6.1 has no RangeSerializer", "confirmed", e.message)
end

queues = redis { |c| c.smembers("queues") }.sort
M.add("queues_set.json", JSON.generate(queues), kind: "set_members", produced_by: "SMEMBERS queues after phase A",
  redis: {"key" => "queues", "type" => "set"})
redis { |c| c.flushdb }
redis { |c| c.set("capture:monitor-probe", "1") }

# --- Phase B: failures through the real Sidekiq CLI -------------------------
puts "phase B: failures"
jids = {}
{
  bt_true: ['FailJob.set(backtrace: true).perform_async("bt-true")', -> { FailJob.set(backtrace: true).perform_async("bt-true") }],
  bt_3: ["FailJob.set(retry: 2, backtrace: 3).perform_async(42)", -> { FailJob.set(retry: 2, backtrace: 3).perform_async(42) }],
  no_bt: ['FailJob.perform_async("no-bt")', -> { FailJob.perform_async("no-bt") }],
  twice: ['FailJob.set(retry: 5, backtrace: true).perform_async("twice")', -> { FailJob.set(retry: 5, backtrace: true).perform_async("twice") }],
  exhaust: ['FailJob.set(retry: 1).perform_async("exhaust")', -> { FailJob.set(retry: 1).perform_async("exhaust") }],
  retry_0: ['FailJob.set(retry: 0).perform_async("retry-0")', -> { FailJob.set(retry: 0).perform_async("retry-0") }],
  retry_false: ['FailJob.set(retry: false).perform_async("retry-false")', -> { FailJob.set(retry: false).perform_async("retry-false") }],
  unknown: ['Sidekiq::Client.push("class" => "NoSuchJob", "args" => ["x"])', -> { Sidekiq::Client.push("class" => "NoSuchJob", "args" => ["x"]) }]
}.each do |name, (desc, call)|
  jids[name] = list_fixture("enqueued_#{name}.json", desc, "queue:default") { call.call }
end
UNPARSABLE = '{"retry":true,"queue":"default","class":"HardJob","args":[1,"unterminated'
redis { |c| c.lpush("queue:default", UNPARSABLE) }
M.add("enqueued_unparsable.txt", redis { |c| c.lindex("queue:default", 0) }, kind: "unparsable",
  produced_by: "redis.lpush(\"queue:default\", #{UNPARSABLE.inspect})", redis: {"key" => "queue:default", "type" => "list", "index" => 0})

sidekiq_log = File.join(ENV.fetch("WORK_DIR"), "sidekiq.log")
sidekiq_pid = Process.spawn({"REDIS_URL" => ENV.fetch("REDIS_URL")}, SIDEKIQ_BIN,
  "-r", File.join(HERE, "jobs.rb"), "-q", "default,2", "-q", "slow", "-c", "3", "-g", "fixtures", "-t", "5",
  out: sidekiq_log, err: sidekiq_log, chdir: HERE)
puts "sidekiq CLI pid #{sidekiq_pid}"

zset_fixture("retry_backtrace_true.json", 'FailJob.set(backtrace: true).perform_async("bt-true"), failed once', "retry", jids[:bt_true])
bt3, bt3_score = zset_fixture("retry_backtrace_3.json", "FailJob.set(retry: 2, backtrace: 3).perform_async(42), failed once", "retry", jids[:bt_3])
zset_fixture("retry_no_backtrace.json", 'FailJob.perform_async("no-bt"), failed once', "retry", jids[:no_bt])
zset_fixture("retry_unknown_class.json", 'Sidekiq::Client.push("class" => "NoSuchJob", "args" => ["x"]), failed once (NameError)',
  "retry", jids[:unknown])
zset_fixture("dead_retry_0.json", 'FailJob.set(retry: 0).perform_async("retry-0"), failed once', "dead", jids[:retry_0])
M.observe("retry: 0 sends the job straight to the dead set [spec 2.1, captured 6.4.1]",
  !zset_has_jid?("retry", jids[:retry_0]) && zset_has_jid?("dead", jids[:retry_0]) ? "confirmed" : "contradicted")

raw = wait_for("unparsable payload in dead") { redis { |c| c.zrange("dead", 0, -1) }.find { |m| m == UNPARSABLE } }
M.add("dead_unparsable.txt", raw, kind: "unparsable", produced_by: "the unparsable queue entry, after the CLI fetched it",
  redis: {"key" => "dead", "type" => "zset", "score" => redis { |c| c.call("zscore", "dead", raw) }})
M.observe("an unparsable payload goes to the dead set unchanged [spec 5.1]", raw == UNPARSABLE ? "confirmed" : "contradicted")

wait_for("retry: false job to reach the death handlers") { redis { |c| c.lrange("capture:deaths", 0, -1) }.include?(jids[:retry_false]) }
gone = !zset_has_jid?("retry", jids[:retry_false]) && !zset_has_jid?("dead", jids[:retry_false])
M.observe("retry: false leaves no retry or dead entry; only the death handlers run [spec 5.2, 13.4]",
  gone ? "confirmed" : "contradicted", "fixture: enqueued_retry_false.json (the job as it was queued)")

# The retry: 5 and retry: 1 jobs failed once; reschedule them to now (the
# API's SortedEntry#reschedule, ZINCRBY) so the poller re-enqueues them.
%i[twice exhaust].each do |name|
  wait_for("#{name} in retry") { member_of("retry", jids[name]) }
  Sidekiq::RetrySet.new.find_job(jids[name]).reschedule(Time.now.to_f)
end
zset_fixture("retry_retried_once.json", 'FailJob.set(retry: 5, backtrace: true).perform_async("twice"), failed twice (poller re-run)',
  "retry", jids[:twice]) { |m| m["retry_count"] == 1 }
zset_fixture("dead_exhausted.json", 'FailJob.set(retry: 1).perform_async("exhaust"), failed twice: retries exhausted',
  "dead", jids[:exhaust])

# The spec's example: score = failed_at + 15 + jitter.
bt3_msg = JSON.parse(bt3)
delta = bt3_score.to_f - bt3_msg["failed_at"]
M.observe("first retry score = now + 15 + rand(10) s [spec 5.3]", delta >= 15 && delta < 25 ? "confirmed" : "contradicted",
  format("retry_backtrace_3: score - failed_at = %.3f", delta))
mime = bt3_msg["error_backtrace"]
M.observe("error_backtrace is MIME base64 (Base64.encode64: 60-char lines, trailing newline) in 6.4.1 [spec 2.1]",
  mime.end_with?("\n") && mime.lines.all? { |l| l.chomp.size <= 60 } && mime.lines[0...-1].all? { |l| l.chomp.size == 60 } ? "confirmed" : "contradicted",
  "lines: #{mime.lines.map { |l| l.chomp.size }.inspect}")

# --- Phase C: heartbeat while a job is running ------------------------------
puts "phase C: heartbeat"
slow_jid = SlowJob.set(queue: "slow").perform_async("slow")
wait_for("SlowJob to start") { redis { |c| c.lrange("capture:slow_started", 0, -1) }.include?(slow_jid) }
identity = wait_for("the process identity") { redis { |c| c.smembers("processes") }.first }
work_key = "#{identity}:workers"
wait_for("a heartbeat showing the SlowJob", 15) do
  redis { |c| c.hget(identity, "busy") } == "1" && redis { |c| c.hvals(work_key) }.any? { |v| v.include?(slow_jid) }
end
hb = redis { |c| c.hgetall(identity) }
work = redis { |c| c.hgetall(work_key) }
processes = redis { |c| c.smembers("processes") }.sort
ttl_id = redis { |c| c.ttl(identity) }
ttl_work = redis { |c| c.ttl(work_key) }
work_new_name = redis { |c| c.exists("#{identity}:work") }

def heartbeat_fixtures(prefix, hb, identity, produced_by)
  hb.each do |field, value|
    if field == "info"
      info = JSON.parse(value)
      M.add("#{prefix}_info.json", value, kind: "process_info", produced_by: produced_by,
        redis: {"key" => identity, "type" => "hash", "field" => "info"},
        expect: {"keys" => info.keys, "identity" => info["identity"], "hostname" => info["hostname"], "pid" => info["pid"],
                 "concurrency" => info["concurrency"], "tag" => info["tag"], "queues" => info["queues"]})
    else
      format = case field
               when "beat" then "float"
               when "quiet" then "bool"
               else "integer"
               end
      M.add("#{prefix}_#{field}.txt", value, kind: "hash_field", produced_by: produced_by,
        redis: {"key" => identity, "type" => "hash", "field" => field}, expect: {"format" => format})
    end
  end
end
heartbeat_fixtures("heartbeat_busy", hb, identity, "Sidekiq 6.4.1 CLI heartbeat (HGETALL <identity>) while SlowJob runs")
M.observe("identity hash fields (HGETALL order is not meaningful: the hash is #{redis { |c| c.object("encoding", identity) }}-encoded)",
  "recorded", hb.keys.join(","))
M.observe("identity hash TTL is 60 s [spec 1, 7.2]", ttl_id.between?(50, 60) ? "confirmed" : "contradicted", "TTL #{ttl_id}")
work.each do |tid, value|
  w = JSON.parse(value)
  M.add("work_slow_job.json", value, kind: "work", produced_by: "Sidekiq 6.4.1 CLI heartbeat (HGETALL <identity>:workers) while SlowJob runs",
    redis: {"key" => work_key, "type" => "hash", "field" => tid},
    expect: {"queue" => w["queue"], "keys" => w.keys, "payload_is_string" => w["payload"].is_a?(String), "jid" => slow_jid})
end
M.observe("6.4.1 work hash key is <identity>:workers (not :work) [spec 1, 7.4]",
  !work.empty? && work_new_name == 0 ? "confirmed" : "contradicted", "#{work_key} has #{work.size} field(s), TTL #{ttl_work}; #{identity}:work exists: #{work_new_name}")
M.observe("work hash payload is the job JSON as a string (double-encoded) [spec 7.4]",
  work.values.all? { |v| JSON.parse(v)["payload"].is_a?(String) } ? "confirmed" : "contradicted")
M.add("processes_set.json", JSON.generate(processes), kind: "set_members", produced_by: "SMEMBERS processes while the CLI runs",
  redis: {"key" => "processes", "type" => "set"})
M.add("queues_set_cli.json", JSON.generate(redis { |c| c.smembers("queues") }.sort), kind: "set_members",
  produced_by: "SMEMBERS queues after phase B pushes", redis: {"key" => "queues", "type" => "set"})

redis { |c| c.set("capture:release", "1") }

proc_api = wait_for("ProcessSet entry") { Sidekiq::ProcessSet.new.find { |p| p["identity"] == identity } }
proc_api.quiet!
wait_for("quiet heartbeat", 20) { redis { |c| c.hget(identity, "quiet") } == "true" }
hb_quiet = redis { |c| c.hgetall(identity) }
M.add("heartbeat_quiet_quiet.txt", hb_quiet["quiet"], kind: "hash_field",
  produced_by: "Sidekiq::Process#quiet! (LPUSH <identity>-signals TSTP), next heartbeats",
  redis: {"key" => identity, "type" => "hash", "field" => "quiet"}, expect: {"format" => "bool"})
M.add("heartbeat_quiet_busy.txt", hb_quiet["busy"], kind: "hash_field",
  produced_by: "heartbeat after quiet", redis: {"key" => identity, "type" => "hash", "field" => "busy"}, expect: {"format" => "integer"})

proc_api.stop!
Timeout.timeout(30) { Process.wait(sidekiq_pid) }
stopped = sidekiq_pid
sidekiq_pid = nil
puts "sidekiq CLI #{stopped} exited: #{$?.inspect}"
M.observe("clean stop: SREM processes, UNLINK <id>:workers, identity hash left to expire [spec 7.6]",
  !redis { |c| c.sismember("processes", identity) } && redis { |c| c.exists(work_key) } == 0 && redis { |c| c.exists(identity) } == 1 ? "confirmed" : "contradicted",
  "identity TTL after stop: #{redis { |c| c.ttl(identity) }}")

# --- Phase D: API retry now, stats, MONITOR ---------------------------------
puts "phase D: API retry, stats"
raise "queue:default should be empty" unless redis { |c| c.llen("queue:default") } == 0
list_fixture("api_retry_now.json", 'Sidekiq::RetrySet.new.find_job(jid).retry  # jid of retry_no_backtrace.json (retry_count 0)',
  "queue:default", notes: "SortedEntry#retry decrements retry_count (0 -> -1) and pushes through Client.push (new enqueued_at)") do
  Sidekiq::RetrySet.new.find_job(jids[:no_bt]).retry
end
rc = JSON.parse(redis { |c| c.lindex("queue:default", 0) })["retry_count"]
M.observe("API retry now stores retry_count -1 [spec 2.1, 13.7]", rc == -1 ? "confirmed" : "contradicted", "retry_count #{rc}")

date = Time.now.utc.strftime("%Y-%m-%d")
stats = {}
["stat:processed", "stat:failed", "stat:processed:#{date}", "stat:failed:#{date}"].each do |key|
  v = redis { |c| c.get(key) }
  stats[key] = v.to_i
  file = key.tr(":", "_").sub(date, "today") + ".txt"
  M.add(file, v, kind: "stat", produced_by: "Sidekiq 6.4.1 heartbeat/exit stats flush after phase B and C",
    redis: {"key" => key, "type" => "string", "ttl" => redis { |c| c.ttl(key) }}, expect: {"format" => "integer"})
end
# Executions: bt_true, bt_3, no_bt, retry_0, retry_false, unknown once each,
# twice and exhaust twice each, SlowJob once = 11; all but SlowJob failed.
M.observe("processed counts every execution incl. failures, failed every exception; the unparsable payload counts in neither [spec 5.1]",
  stats["stat:processed"] == 11 && stats["stat:failed"] == 10 ? "confirmed" : "contradicted",
  "processed #{stats["stat:processed"]}, failed #{stats["stat:failed"]} (expected 11 / 10)")

Process.kill("TERM", monitor_pid)
Process.wait(monitor_pid)
monitor_pid = nil
keep = /\A\S+ \[\d+ [^\]]+\] "(zadd|zrem|zincrby|zrangebyscore|zremrangebyscore|zremrangebyrank|incrby|expire|unlink|hset|hmset|exists|rpop|ping|sadd|srem|lpush|rpush|evalsha|script|multi|exec)"/i
lines = File.readlines(monitor_log).grep(keep).reject { |l| l.include?('"capture:') }
File.binwrite(File.join(OUT, "monitor_excerpt.txt"), lines.join)
M.fixtures << {"file" => "monitor_excerpt.txt", "kind" => "log", "produced_by" => "redis-cli MONITOR during the whole capture, write commands only",
               "notes" => "Redis quotes arguments (sdscatrepr); shows the ZADD score strings Ruby sent and the dead-set trim"}
trim = lines.select { |l| l.include?('"dead"') && l =~ /"zremrange/ }
rank_ok = trim.any? { |l| l.include?('"zremrangebyrank" "dead" "0" "-10000"') }
score_ok = trim.select { |l| l.include?('"zremrangebyscore" "dead" "-inf"') }.all? do |l|
  ts = l.split(" ").first.to_f
  cut = l[/"-inf" "([^"]+)"/, 1].to_f
  (ts - 15_552_000 - cut).abs < 5
end && trim.any? { |l| l.include?('"zremrangebyscore" "dead" "-inf"') }
M.observe("dead-set writes trim with ZREMRANGEBYSCORE dead -inf now-15552000 and ZREMRANGEBYRANK dead 0 -10000 in MULTI [spec 5.4]",
  rank_ok && score_ok ? "confirmed" : "contradicted", trim.map { |l| l.split(" ", 4)[3].strip }.uniq.first(4).join(" | "))
# Attach the exact ZADD score strings Ruby sent.
M.fixtures.each do |f|
  r = f["redis"]
  next unless r && r["type"] == "zset"
  member = File.binread(File.join(OUT, f["file"]))
  lines.each do |l|
    args = monitor_args(l)
    i = args.index(member)
    next unless args[0]&.downcase == "zadd" && args[1] == r["key"] && i && i >= 3
    r["score_sent"] = args[i - 1]
  end
end

order = JSON.parse(File.binread(File.join(OUT, "perform_async_simple.json"))).keys
M.observe("perform_async key order retry, queue, args, class, jid, created_at, enqueued_at [spec 2.3]",
  order == %w[retry queue args class jid created_at enqueued_at] ? "confirmed" : "contradicted", order.join(","))
keys_of = ->(file) { JSON.parse(File.binread(File.join(OUT, file))).keys }
o = keys_of.("client_push_hash.json")
M.observe("Client.push / push_bulk / perform_in key order retry, queue, class, args, jid, created_at[, enqueued_at] [spec 2.3]",
  o == %w[retry queue class args jid created_at enqueued_at] && keys_of.("push_bulk_0.json") == o &&
    keys_of.("perform_in.json") == o - ["enqueued_at"] ? "confirmed" : "contradicted", o.join(","))
o = keys_of.("retry_retried_once.json")
M.observe("failure appends error_message, error_class, failed_at, retry_count, error_backtrace, then retried_at [spec 2.3]",
  o.last(6) == %w[error_message error_class failed_at retry_count error_backtrace retried_at] ? "confirmed" : "contradicted", o.join(","))
msg = JSON.parse(File.binread(File.join(OUT, "retry_unknown_class.json")))["error_message"]
M.observe("unknown class: error_class NameError, error_message \"uninitialized constant X\" [spec 5.2, 11.5]",
  msg == "uninitialized constant NoSuchJob" ? "confirmed" : "differs",
  "Ruby #{RUBY_VERSION} message: #{msg.inspect} (error_highlight appends a source snippet; only the first line is stable)")
M.save
puts "wrote #{M.fixtures.size} fixtures and #{M.observations.size} observations to #{OUT}"
