# Writes the 8.1.7/ fixtures from the capture of real Ruby Sidekiq 8.1.7 in
# 8.1.7/capture/ (a verbatim copy of the project's shared reference data;
# capture/README.md says how it was made), as captured_7_3_10.rb does for
# 7.3.10: every value is cut from the captured bytes, the manifest's
# "expect" blocks come from Ruby's own JSON.parse (fixture_lib.rb) and its
# "capture" block pins the copy with SHA-256 sums.
#
# Two payloads no single run of one release writes are added by hand and
# say so in their "source": a job failed under 7.x and again under 8.x
# (mixed float and integer timestamps), and one written under json
# 2.10-2.11 (exponent floats).
#
# Run: ruby testdata/ruby-fixtures/captured_8_1_7.rb   (needs only ruby)
# Idempotent: rewrites every file of 8.1.7/ but capture/ identically.
require_relative "fixture_lib"
require "digest"
require "fileutils"

DIR = File.join(__dir__, "8.1.7")
CAP = File.join(DIR, "capture")
IDENTITY = "vm:26685:c02d7003754a"
CAPTURE = FixtureLib::Capture.new(CAP)
def monitor(file) = CAPTURE.monitor(file)
def state_value(file, key) = CAPTURE.state_value(file, key)

FileUtils.mkdir_p(DIR)
Dir.children(DIR).each { |f| File.delete(File.join(DIR, f)) unless f == "capture" }
sums = Dir.children(CAP).sort.to_h { |f| [f, Digest::SHA256.file(File.join(CAP, f)).hexdigest] }
m = FixtureLib::Manifest.new(DIR, {
  "sidekiq_version" => "8.1.7",
  "source" => "captured from Ruby Sidekiq 8.1.7 (Ruby 3.3.8, Redis 7.0.15) on 2026-11-26; the capture is copied verbatim in capture/ (see capture/README.md) and each fixture is cut from it by testdata/ruby-fixtures/captured_8_1_7.rb, but the two marked hand-written",
  "capture" => {"copied_from" => "the project's shared reference data, sidekiq-8.1.7/", "sha256" => sums},
  "notes" => "Backtrace frames and log lines name gem-relative paths: the capture rewrote them and re-encoded each error_backtrace with Ruby's own Zlib::Deflate.deflate + strict base64 (capture/README.md)."
})

client = monitor("monitor-client.txt")
pushes = client.select { |_, _, a| %w[lpush zadd].include?(a[0]) }
lpush = pushes.select { |_, _, a| a[0] == "lpush" }
zadd = pushes.select { |_, _, a| a[0] == "zadd" }
src = ->(file, what) { "captured: capture/#{file}, #{what}" }

m.job("client_perform_async.json", lpush[0][2][2],
  produced_by: 'RecJob.perform_async(1, "two", {"three" => 3.5})',
  source: src.call("monitor-client.txt", "1st LPUSH"), redis: {"key" => "queue:default", "type" => "list"})
m.job("client_push_retry_tags.json", lpush[1][2][2],
  produced_by: 'Sidekiq::Client.push("class" => RecJob, "args" => [1], "retry" => 3, "tags" => ["alpha", "beta"])',
  source: src.call("monitor-client.txt", "2nd LPUSH"), redis: {"key" => "queue:default", "type" => "list"})
bulk = lpush[2][2][2..]
raise "push_bulk of 3 expected" unless bulk.size == 3
bulk.each_with_index do |payload, i|
  m.job("client_push_bulk_#{i}.json", payload,
    produced_by: 'Sidekiq::Client.push_bulk("class" => RecJob, "args" => [[1], [2], [3]])',
    source: src.call("monitor-client.txt", "3rd LPUSH (one command), value #{i + 1}"),
    redis: {"key" => "queue:default", "type" => "list"}, group: "push_bulk")
end
m.job("client_perform_in.json", zadd[0][2][3],
  produced_by: 'RecJob.perform_in(60, "in60")', source: src.call("monitor-client.txt", "1st ZADD"),
  redis: {"key" => "schedule", "type" => "zset", "score" => zadd[0][2][2], "delay" => 60},
  notes: "no enqueued_at and no at; created_at is integer ms, the score float seconds")
m.job("client_perform_at.json", zadd[1][2][3],
  produced_by: 'RecJob.perform_at(t0 + 120, "at120"), t0 = Time.now taken before the first push',
  source: src.call("monitor-client.txt", "2nd ZADD"),
  redis: {"key" => "schedule", "type" => "zset", "score" => zadd[1][2][2], "delay" => 120})
m.job("client_activejob.json", lpush[3][2][2],
  produced_by: 'AjJob.perform_later(1, "x") with ActiveJob 7.2.2.2 and Sidekiq 8.1.7\'s adapter (queue_as :default)',
  source: src.call("monitor-client.txt", "4th LPUSH"), redis: {"key" => "queue:default", "type" => "list"})

server = monitor("monitor-server.txt")
poller = server.find { |_, _, a| a[0] == "lpush" && a[2].include?('"sched3"') } or raise "no poller push"
m.job("poller_enqueued.json", poller[2][2],
  produced_by: 'RecJob.perform_in(3, "sched3"), moved to its queue by the poller (which adds enqueued_at)',
  source: src.call("monitor-server.txt", "the poller's LPUSH"), redis: {"key" => "queue:default", "type" => "list"})

retry_zadds = server.select { |_, _, a| a[0] == "zadd" && a[1] == "retry" }
raise "two retry zadds expected" unless retry_zadds.size == 2
retry_zadd = retry_zadds[0]
dead_score = state_value("state.txt", "dead")[1]
m.job("retry_backtrace_true.json", File.binread(File.join(CAP, "retry-entry.json")),
  produced_by: 'BtFailJob.perform_async("bt", 1) [retry: 2, backtrace: true], failed once',
  source: "captured: capture/retry-entry.json (ZRANGE retry 0 0)",
  redis: {"key" => "retry", "type" => "zset", "score" => retry_zadd[2][2]},
  notes: "the score is the first retry ZADD's (capture/monitor-server.txt); gojob writes the same JSON but its zlib bytes differ (another deflate implementation): the tests compare the decoded frames and the framing, which is what Ruby reads")
retried = server.find { |_, _, a| a[0] == "lpush" && a[2].include?('"retry_count":0') } or raise "no retry moved back"
m.job("poller_retry_enqueued.json", retried[2][2],
  produced_by: "the first failure of BtFailJob moved from retry back to its queue by the poller (enqueued_at rewritten in place)",
  source: src.call("monitor-server.txt", "the poller's LPUSH of the retry entry"), redis: {"key" => "queue:default", "type" => "list"})
m.job("retry_retried_once.json", retry_zadds[1][2][3],
  produced_by: "BtFailJob failed a second time (retry_count 1, retried_at appended)",
  source: src.call("monitor-server.txt", "2nd retry ZADD"),
  redis: {"key" => "retry", "type" => "zset", "score" => retry_zadds[1][2][2]},
  notes: "the score is failed 2nd time + 1**4 + 15 + rand(20) (7 here)")
m.job("dead_retry_0.json", File.binread(File.join(CAP, "dead-entry.json")),
  produced_by: 'DieJob.perform_async("die") [retry: 0], failed once',
  source: "captured: capture/dead-entry.json (ZRANGE dead 0 0)",
  redis: {"key" => "dead", "type" => "zset", "score" => dead_score})
work_field = state_value("state-busy.txt", "#{IDENTITY}:work")[0]
m.add("work.json", File.binread(File.join(CAP, "work-entry.json")), kind: "work",
  produced_by: "SlowJob.set(queue: \"slow\").perform_async(12) while running (HVALS <identity>:work)",
  source: "captured: capture/work-entry.json",
  redis: {"key" => "#{IDENTITY}:work", "type" => "hash", "field" => work_field},
  expect: {"queue" => "slow", "payload_is_string" => true, "jid" => "2a361c0161ebed727f464d10"})
m.add("heartbeat_info.json", File.binread(File.join(CAP, "process-info.json")), kind: "process_info",
  produced_by: "HGET <identity> info of `sidekiq -c 3 -q default,2 -q slow,1 -g captag`",
  source: "captured: capture/process-info.json",
  redis: {"key" => IDENTITY, "type" => "hash", "field" => "info"},
  notes: "8.0+: no top-level concurrency (it is the process hash's concurrency field); capsules holds it",
  expect: {"identity" => IDENTITY, "hostname" => "vm", "pid" => 26685, "tag" => "captag",
           "queues" => %w[default slow], "version" => "8.1.7", "embedded" => false})

pairs = state_value("state-busy.txt", IDENTITY).each_slice(2).to_a
m.add("process_hash.json", JSON.generate(pairs), kind: "process_hash",
  produced_by: "HGETALL <identity> 0.6 s after the 2nd heartbeat, SlowJob busy",
  source: "captured: capture/state-busy.txt (redis-cli --no-raw, unquoted)",
  redis: {"key" => IDENTITY, "type" => "hash"},
  notes: "a JSON array of [field, value] pairs in the captured HGETALL order, which is Redis's; Ruby wrote the fields in the order info, concurrency, busy, beat, rtt_us, quiet, rss (heartbeat_busy.monitor)")
%w[concurrency beat].each do |field|
  value = pairs.assoc(field) or raise "no #{field}"
  m.add("heartbeat_#{field}.txt", value[1], kind: "hash_field",
    produced_by: "HGET <identity> #{field} 0.6 s after the 2nd heartbeat",
    source: "captured: capture/state-busy.txt (unquoted)",
    redis: {"key" => IDENTITY, "type" => "hash", "field" => field},
    expect: {"format" => field == "beat" ? "float" : "integer"})
end

# The busy heartbeat: from its stats INCRBY to its last metrics command, on
# the heartbeat connection.
hb_conn = server.find { |_, _, a| a[0] == "ping" }[1]
hb = server.select { |_, c, _| c == hb_conn }
work_at = hb.index { |_, _, a| a[0] == "hset" && a[1].end_with?(":work") } or raise "no busy beat"
from = hb[0..work_at].rindex { |_, _, a| a[0] == "incrby" && a[1] == "stat:processed" }
to = hb.index.with_index { |(_, _, a), i| i > work_at && a[0] == "expire" && a[1].start_with?("j|") && a[2] == "28800" }
busy = hb[from..to]
raw = busy.map { |t, c, a| "#{t} [0 #{c}] " + a.map { |x| x.inspect }.join(" ") }.join("\n") + "\n"
m.add("heartbeat_busy.monitor", raw, kind: "monitor",
  produced_by: "the 2nd heartbeat (4 jobs done, 3 failed, SlowJob busy): stats, work hash, ping, process hash, metrics",
  source: src.call("monitor-server.txt", "the heartbeat connection's lines from the 2nd beat's stats flush to its last metrics command"),
  notes: "arguments re-quoted with Ruby's String#inspect (same quoting as redis-cli for this data)")

# Metrics after the flushes of beats 2 and 3: the 10-minute and the minute
# hashes and the h| histograms, byte-exact.
{"metrics_counters_10min.json" => "j|261126|11:2", "metrics_counters.json" => "j|261126|11:23"}.each do |file, key|
  m.add(file, JSON.generate(state_value("state.txt", key).each_slice(2).to_a), kind: "metrics_counters",
    produced_by: "HGETALL #{key} after the flushes of beats 2 and 3",
    source: "captured: capture/state.txt (unquoted)", redis: {"key" => key, "type" => "hash"},
    notes: "a JSON array of [field, value] pairs in HGETALL order")
end
%w[RecJob SlowJob].each do |klass|
  key = "h|#{klass}-26-11:23"
  m.add("histogram_#{klass}.bin", state_value("state.txt", key)[0], kind: "histogram",
    produced_by: "GET #{key} after the flushes of beats 2 and 3",
    source: "captured: capture/state.txt (unquoted)", redis: {"key" => key, "type" => "string"},
    notes: "big-endian u16 counters, bucket #0 first; trailing zero buckets are absent")
end

# Hand-written: what a cluster upgraded from 7.x leaves, which no capture
# of one release shows.
hand = "hand-written: no run of a single release writes it (sidekiq-wire.md#timestamps)"
m.job("retry_mixed_upgrade.json",
  '{"retry":true,"queue":"default","args":[7],"class":"HardJob","jid":"e5f6a7b8c9d0e1f2a3b4c5d6","created_at":1795296573.1651707,"enqueued_at":1795296600123,"error_message":"boom","error_class":"RuntimeError","failed_at":1795296576.258805,"retry_count":1,"retried_at":1795296600456}',
  produced_by: "a job created and failed under 7.x (float created_at/failed_at), retried by the 8.x poller and failed again (int enqueued_at/retried_at)",
  source: hand, redis: {"key" => "retry", "type" => "zset", "score" => "1795296631.4563321"})
m.job("retry_exponent_floats.json",
  '{"retry":true,"queue":"default","args":[8],"class":"HardJob","jid":"f6a7b8c9d0e1f2a3b4c5d6e7","created_at":1.7468303847678468e+9,"enqueued_at":1.7468303847678468e+9,"error_message":"boom","error_class":"RuntimeError","failed_at":1.746830390123e+9,"retry_count":1,"retried_at":1746830420456,"big":1e+11}',
  produced_by: "a job written by Sidekiq 7.x under json 2.10-2.11 (exponent floats), retried under 8.x",
  source: hand, redis: {"key" => "retry", "type" => "zset", "score" => "1746830451.4561234"},
  notes: "Ruby's parse + generate (and gojob) rewrite these floats in Float#to_s form, so Encode differs from the file: see expect.ruby_reencode")
m.save
puts "wrote 8.1.7/ (#{m.fixtures.size} fixtures)"
