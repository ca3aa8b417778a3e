# Writes the HAND-WRITTEN 8.1.7/ fixtures (no Sidekiq 8 is installable
# here; 7.3.10/ is cut from a real capture by captured_7_3_10.rb). The payloads below are literal text written from the
# spec (/work/shared/spec/sidekiq-wire.md §2.2, §2.5, §3.1-3.3, §7.3, §7.4);
# only the error_backtrace values are computed, with Ruby's zlib and
# pack("m0") (strict base64, 7.2.1+), so they decode for real. The manifest's
# "expect" blocks come from Ruby's own JSON.parse of each file (fixture_lib.rb).
#
# Run: ruby testdata/ruby-fixtures/handwritten.rb   (needs only ruby)
# Idempotent: the directory is rewritten byte-for-byte identically.
require_relative "fixture_lib"
require "fileutils"

HERE = __dir__
BT = FixtureLib.method(:encode_backtrace_strict)

LINES = [
  "/app/app/jobs/fail_job.rb:12:in 'FailJob#level2'",
  "/app/app/jobs/fail_job.rb:8:in 'FailJob#level1'",
  "/app/app/jobs/fail_job.rb:4:in 'FailJob#perform'",
  "/usr/local/bundle/gems/sidekiq-%s/lib/sidekiq/processor.rb:220:in 'Sidekiq::Processor#execute_job'",
  "/usr/local/bundle/gems/sidekiq-%s/lib/sidekiq/processor.rb:185:in 'block (2 levels) in Sidekiq::Processor#process'",
  "/usr/local/bundle/gems/sidekiq-%s/lib/sidekiq/middleware/chain.rb:180:in 'Sidekiq::Middleware::Chain#traverse'",
  "/usr/local/bundle/gems/sidekiq-%s/lib/sidekiq/job_retry.rb:113:in 'Sidekiq::JobRetry#local'",
  "/usr/local/bundle/gems/sidekiq-%s/lib/sidekiq/processor.rb:136:in 'block (4 levels) in Sidekiq::Processor#dispatch'"
].freeze

def lines_for(version) = LINES.map { |l| l.include?("%s") ? format(l, version) : l }

def spec_source(sections) = "hand-written from spec #{sections}"

def write_dir(version)
  dir = File.join(HERE, version)
  FileUtils.rm_rf(dir)
  FileUtils.mkdir_p(dir)
  m = FixtureLib::Manifest.new(dir, {
    "sidekiq_version" => version,
    "source" => "hand-written from the spec by testdata/ruby-fixtures/handwritten.rb (no Sidekiq #{version} was run)",
    "notes" => "Payload text is written by hand from the spec; error_backtrace values are real zlib + strict base64 made by Ruby."
  })
  yield m, lines_for(version)
  m.save
end

# --- 8.1.7: integer-ms timestamps, mixed payloads, Sidekiq::ActiveJob::Wrapper -
write_dir("8.1.7") do |m, lines|
  bt3 = BT.call(lines.first(3))
  bt_all = BT.call(lines)
  m.job("perform_async_simple.json",
    '{"retry":true,"queue":"default","args":[1,"two",{"three":3.5}],"class":"HardJob","jid":"a1b2c3d4e5f6a7b8c9d0e1f2","created_at":1795296573166,"enqueued_at":1795296573166}',
    produced_by: 'HardJob.perform_async(1, "two", {"three" => 3.5})', source: spec_source("§2.2, §2.5 (8.x shape)"),
    redis: {"key" => "queue:default", "type" => "list"})
  m.job("perform_in.json",
    '{"retry":true,"queue":"default","class":"HardJob","args":["later"],"jid":"b2c3d4e5f6a7b8c9d0e1f2a3","created_at":1795296573170}',
    produced_by: 'HardJob.perform_in(3600, "later")', source: spec_source("§2.2 (scores stay float seconds), §2.4"),
    redis: {"key" => "schedule", "type" => "zset", "score" => "1795300173.1698432"})
  m.job("retry_backtrace_3.json",
    %({"retry":2,"queue":"default","backtrace":3,"args":[42],"class":"FailJob","jid":"c3d4e5f6a7b8c9d0e1f2a3b4","created_at":1795296573166,"enqueued_at":1795296573167,"error_message":"boom é","error_class":"ArgumentError","failed_at":1795296576258,"retry_count":0,"error_backtrace":"#{bt3}"}),
    produced_by: "FailJob.set(retry: 2, backtrace: 3).perform_async(42), failed once", source: spec_source("§2.2, §2.5"),
    redis: {"key" => "retry", "type" => "zset", "score" => "1795296595.2586653"})
  m.job("retry_retried_once.json",
    %({"retry":5,"queue":"default","backtrace":true,"args":["twice"],"class":"FailJob","jid":"d4e5f6a7b8c9d0e1f2a3b4c5","created_at":1795296573171,"enqueued_at":1795296597002,"error_message":"boom é","error_class":"ArgumentError","failed_at":1795296576260,"retry_count":1,"error_backtrace":"#{bt_all}","retried_at":1795296597011}),
    produced_by: 'FailJob.set(retry: 5, backtrace: true).perform_async("twice"), failed twice', source: spec_source("§2.2"),
    redis: {"key" => "retry", "type" => "zset", "score" => "1795296628.0114377"})
  m.job("retry_mixed_upgrade.json",
    '{"retry":true,"queue":"default","args":[7],"class":"HardJob","jid":"e5f6a7b8c9d0e1f2a3b4c5d6","created_at":1795296573.1651707,"enqueued_at":1795296600123,"error_message":"boom","error_class":"RuntimeError","failed_at":1795296576.258805,"retry_count":1,"retried_at":1795296600456}',
    produced_by: "a job created and failed under 7.x (float created_at/failed_at), retried by the 8.x poller and failed again (int enqueued_at/retried_at)",
    source: spec_source("§2.2 (mixed payloads)"), redis: {"key" => "retry", "type" => "zset", "score" => "1795296631.4563321"})
  m.job("retry_exponent_floats.json",
    '{"retry":true,"queue":"default","args":[8],"class":"HardJob","jid":"f6a7b8c9d0e1f2a3b4c5d6e7","created_at":1.7468303847678468e+9,"enqueued_at":1.7468303847678468e+9,"error_message":"boom","error_class":"RuntimeError","failed_at":1.746830390123e+9,"retry_count":1,"retried_at":1746830420456,"big":1e+11}',
    produced_by: "a job written by Sidekiq 7.x under json 2.10-2.11 (exponent floats), retried under 8.x",
    source: spec_source("§2.2 (exponent-form floats, json 2.10-2.14)"), redis: {"key" => "retry", "type" => "zset", "score" => "1746830451.4561234"},
    notes: "Ruby's parse + generate (and gojob) rewrite these floats in Float#to_s form, so Encode differs from the file: see expect.ruby_reencode")
  m.job("activejob.json",
    '{"retry":true,"queue":"mailers","wrapped":"MyAjJob","args":[{"job_class":"MyAjJob","job_id":"7d1e0b3c-2a4f-4c59-8e6d-9f0a1b2c3d4e","provider_job_id":null,"queue_name":"mailers","priority":null,"arguments":[1,{"_aj_serialized":"ActiveJob::Serializers::SymbolSerializer","value":"sym"},{"k":"v","_aj_ruby2_keywords":["k"]}],"executions":0,"exception_executions":{},"locale":"en","timezone":"UTC","enqueued_at":"2026-11-21T21:29:33.166123456Z","scheduled_at":null}],"class":"Sidekiq::ActiveJob::Wrapper","jid":"a7b8c9d0e1f2a3b4c5d6e7f8","created_at":1795296573175,"enqueued_at":1795296573175}',
    produced_by: 'MyAjJob.perform_later(1, :sym, k: "v") with Sidekiq 8.1.7 and Rails 8.0',
    source: spec_source("§3.1 (Sidekiq::ActiveJob::Wrapper), §3.2, §3.3"), redis: {"key" => "queue:mailers", "type" => "list"})
  m.add("heartbeat_info.json",
    '{"hostname":"vm","started_at":1795296573.0441227,"pid":31337,"tag":"","capsules":{"default":{"concurrency":3,"mode":"weighted","weights":{"default":2,"slow":1}}},"queues":["default","slow"],"weights":[{"default":2,"slow":1}],"labels":[],"identity":"vm:31337:0123456789ab","version":"8.1.7","embedded":false}',
    kind: "process_info", produced_by: "HGET <identity> info", source: spec_source("§7.3 table, 8.1.2+ column"),
    redis: {"key" => "vm:31337:0123456789ab", "type" => "hash", "field" => "info"},
    notes: "8.1.2+: concurrency is a hash field, not in info; the key order here is assumed",
    expect: {"identity" => "vm:31337:0123456789ab", "hostname" => "vm", "pid" => 31337, "tag" => "",
             "queues" => %w[default slow], "version" => "8.1.7", "embedded" => false})
  m.add("heartbeat_concurrency.txt", "3", kind: "hash_field", produced_by: "HGET <identity> concurrency",
    source: spec_source("§1, §7.2 (concurrency field 8.1.2+)"), redis: {"key" => "vm:31337:0123456789ab", "type" => "hash", "field" => "concurrency"},
    expect: {"format" => "integer"})
  m.add("heartbeat_beat.txt", "1795296583.0452218", kind: "hash_field", produced_by: "HGET <identity> beat",
    source: spec_source("§2.2 (beat stays float seconds)"), redis: {"key" => "vm:31337:0123456789ab", "type" => "hash", "field" => "beat"},
    expect: {"format" => "float"})
  m.add("work.json",
    '{"queue":"slow","payload":"{\"retry\":true,\"queue\":\"slow\",\"args\":[\"slow\"],\"class\":\"SlowJob\",\"jid\":\"b8c9d0e1f2a3b4c5d6e7f8a9\",\"created_at\":1795296580407,\"enqueued_at\":1795296580407}","run_at":1795296580}',
    kind: "work", produced_by: "HGETALL <identity>:work", source: spec_source("§7.4 (run_at int seconds, payload a JSON string)"),
    redis: {"key" => "vm:31337:0123456789ab:work", "type" => "hash", "field" => "2aq"},
    expect: {"queue" => "slow", "payload_is_string" => true, "jid" => "b8c9d0e1f2a3b4c5d6e7f8a9"})
end
puts "wrote 8.1.7/"
