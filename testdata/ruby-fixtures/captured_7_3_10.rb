# Writes the 7.3.10/ fixtures from the capture of real Ruby Sidekiq 7.3.10 in
# 7.3.10/capture/ (a verbatim copy of the project's shared reference data;
# capture/README.md says how it was made). Every value below is cut from the
# captured bytes: MONITOR arguments are unquoted as redis-cli quoted them,
# the four *.json files are byte-exact values already. Nothing is typed by
# hand. The manifest's "expect" blocks come from Ruby's own JSON.parse of
# each value (fixture_lib.rb); its "capture" block pins the copy with
# SHA-256 sums.
#
# Run: ruby testdata/ruby-fixtures/captured_7_3_10.rb   (needs only ruby)
# Idempotent: rewrites every file of 7.3.10/ but capture/ identically.
require_relative "fixture_lib"
require "digest"
require "fileutils"

DIR = File.join(__dir__, "7.3.10")
CAP = File.join(DIR, "capture")
IDENTITY = "vm:19741:68474479f68e"

CAPTURE = FixtureLib::Capture.new(CAP)
def monitor(file) = CAPTURE.monitor(file)
def state_value(file, key) = CAPTURE.state_value(file, key)

FileUtils.mkdir_p(DIR)
Dir.children(DIR).each { |f| File.delete(File.join(DIR, f)) unless f == "capture" }
sums = Dir.children(CAP).sort.to_h { |f| [f, Digest::SHA256.file(File.join(CAP, f)).hexdigest] }
m = FixtureLib::Manifest.new(DIR, {
  "sidekiq_version" => "7.3.10",
  "source" => "captured from Ruby Sidekiq 7.3.10 (Ruby 3.1.7, Redis 7.0.15) on 2026-11-23; the capture is copied verbatim in capture/ (see capture/README.md) and each fixture is cut from it by testdata/ruby-fixtures/captured_7_3_10.rb",
  "capture" => {"copied_from" => "the project's shared reference data, sidekiq-7.3.10/", "sha256" => sums},
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
  notes: "no enqueued_at and no at (7.1.2+); the score is the run time, float seconds")
m.job("client_perform_at.json", zadd[1][2][3],
  produced_by: 'RecJob.perform_at(t0 + 120, "at120"), t0 = Time.now taken before the first push',
  source: src.call("monitor-client.txt", "2nd ZADD"),
  redis: {"key" => "schedule", "type" => "zset", "score" => zadd[1][2][2], "delay" => 120})
m.job("client_activejob.json", lpush[3][2][2],
  produced_by: 'AjJob.perform_later(1, "x") with ActiveJob 6.1.7.10 and Sidekiq 7.3.10\'s adapter (queue_as :default)',
  source: src.call("monitor-client.txt", "4th LPUSH"), redis: {"key" => "queue:default", "type" => "list"})

server = monitor("monitor-server.txt")
poller = server.find { |_, _, a| a[0] == "lpush" && a[2].include?('"sched3"') } or raise "no poller push"
m.job("poller_enqueued.json", poller[2][2],
  produced_by: 'RecJob.perform_in(3, "sched3"), moved to its queue by the poller (which adds enqueued_at)',
  source: src.call("monitor-server.txt", "the poller's LPUSH"), redis: {"key" => "queue:default", "type" => "list"})

retry_score = state_value("state.txt", "retry")[1]
dead_score = state_value("state.txt", "dead")[1]
m.job("retry_backtrace_true.json", File.binread(File.join(CAP, "retry-entry.json")),
  produced_by: 'BtFailJob.perform_async("bt", 1) [retry: 2, backtrace: true], failed once',
  source: "captured: capture/retry-entry.json (ZRANGE retry 0 0)",
  redis: {"key" => "retry", "type" => "zset", "score" => retry_score},
  notes: "gojob writes the same JSON but its zlib bytes differ (another deflate implementation): the tests compare the decoded frames and the framing, which is what Ruby reads")
m.job("dead_retry_0.json", File.binread(File.join(CAP, "dead-entry.json")),
  produced_by: 'DieJob.perform_async("die") [retry: 0], failed once',
  source: "captured: capture/dead-entry.json (ZRANGE dead 0 0)",
  redis: {"key" => "dead", "type" => "zset", "score" => dead_score})
work_field = state_value("state-busy.txt", "#{IDENTITY}:work")[0]
m.add("work.json", File.binread(File.join(CAP, "work-entry.json")), kind: "work",
  produced_by: "SlowJob.set(queue: \"slow\").perform_async(12) while running (HVALS <identity>:work)",
  source: "captured: capture/work-entry.json",
  redis: {"key" => "#{IDENTITY}:work", "type" => "hash", "field" => work_field},
  expect: {"queue" => "slow", "payload_is_string" => true, "jid" => "0553efa46b75ded64058fbcb"})
m.add("heartbeat_info.json", File.binread(File.join(CAP, "process-info.json")), kind: "process_info",
  produced_by: "HGET <identity> info of `sidekiq -c 3 -q default,2 -q slow,1 -g captag`",
  source: "captured: capture/process-info.json",
  redis: {"key" => IDENTITY, "type" => "hash", "field" => "info"},
  expect: {"identity" => IDENTITY, "hostname" => "vm", "pid" => 19741, "concurrency" => 3, "tag" => "captag",
           "queues" => %w[default slow], "version" => "7.3.10", "embedded" => false})

# The process hash while busy, field by field in HGETALL order.
pairs = state_value("state-busy.txt", IDENTITY).each_slice(2).to_a
m.add("process_hash.json", JSON.generate(pairs), kind: "process_hash",
  produced_by: "HGETALL <identity> 0.6 s after the 2nd heartbeat, SlowJob busy",
  source: "captured: capture/state-busy.txt (redis-cli --no-raw, unquoted)",
  redis: {"key" => IDENTITY, "type" => "hash"},
  notes: "a JSON array of [field, value] pairs in the captured HGETALL order, which is Redis's: the info value makes the hash a hashtable, iterated in the order of the server's random hash seed; Ruby wrote the fields in the order info, busy, beat, rtt_us, quiet, rss (heartbeat_busy.monitor)")

# The heartbeats: from a stats INCRBY (or the work MULTI) to the last
# command before the next BRPOP/poll, on the heartbeat connection.
hb_conn = server.find { |_, _, a| a[0] == "ping" }[1]
hb = server.select { |_, c, _| c == hb_conn }
work_at = hb.index { |_, _, a| a[0] == "hset" && a[1].end_with?(":work") } or raise "no busy beat"
from = hb[0..work_at].rindex { |_, _, a| a[0] == "incrby" && a[1] == "stat:processed" }
to = hb.index.with_index { |(_, _, a), i| i > work_at && a[0] == "expire" && a[1].start_with?("j|") }
busy = hb[from..to]
raw = busy.map { |t, c, a| "#{t} [0 #{c}] " + a.map { |x| x.inspect }.join(" ") }.join("\n") + "\n"
m.add("heartbeat_busy.monitor", raw, kind: "monitor",
  produced_by: "the 2nd heartbeat (4 jobs done, 3 failed, SlowJob busy): stats, work hash, ping, process hash, metrics",
  source: src.call("monitor-server.txt", "the heartbeat connection's lines from the 2nd beat's stats flush to its last metrics command"),
  notes: "arguments re-quoted with Ruby's String#inspect (same quoting as redis-cli for this data)")

# Metrics after two flushes (beats 2 and 3): the minute hash and the
# histograms, byte-exact.
jkey = "j|20261123|14:24"
m.add("metrics_counters.json", JSON.generate(state_value("state.txt", jkey).each_slice(2).to_a), kind: "metrics_counters",
  produced_by: "HGETALL #{jkey} after the flushes of beats 2 and 3",
  source: "captured: capture/state.txt (unquoted)", redis: {"key" => jkey, "type" => "hash"},
  notes: "a JSON array of [field, value] pairs in HGETALL order")
%w[RecJob SlowJob].each do |klass|
  key = "#{klass}-23-14:24"
  m.add("histogram_#{klass}.bin", state_value("state.txt", key)[0], kind: "histogram",
    produced_by: "GET #{key} after the flushes of beats 2 and 3",
    source: "captured: capture/state.txt (unquoted)", redis: {"key" => key, "type" => "string"},
    notes: "big-endian u16 counters, bucket #0 first; trailing zero buckets are absent")
end
m.save
puts "wrote 7.3.10/ (#{m.fixtures.size} fixtures)"
