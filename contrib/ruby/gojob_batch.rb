# frozen_string_literal: true

# Adds jobs from Ruby to a gojob batch, and reads batches and job statuses
# (docs/batches.md, docs/job-control.md). The batch is created by gojob
# (`gojob batch create`, batch.Batches.Create) and sealed by gojob after
# the last push (`gojob batch seal BID`).
#
#   require "gojob_batch"
#   jid = GojobBatch.push(bid, "class" => "HardJob", "args" => [1, 2], "queue" => "default")
#   GojobBatch.status(bid)     # => {"total" => "1", "pending" => "1", ...}
#   GojobBatch.job_status(jid) # => {"progress" => "0.4", "result" => "{...}", ...}
#
# A push registers the job in the batch and pushes it in one Lua step (the
# script of batch/lua/push.lua), so that the batch counts exactly the jobs
# that reach their queue. It writes what Sidekiq::Client.push writes for an
# immediate job, plus "gojob_bid"; client middleware does not run.
require "json"
require "securerandom"
require "sidekiq"

module GojobBatch
  PAYLOAD_KEY = "gojob_bid"

  # KEYS: gojob-batch:<bid>, gojob-batch-jobs:<bid>, queues, queue:<q>
  # ARGV: jid, queue name, payload. Returns 1, -1 (no batch), -2 (complete).
  PUSH = <<~LUA
    if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
    if redis.call('HEXISTS', KEYS[1], 'complete_at') == 1 then return -2 end
    if redis.call('HSETNX', KEYS[2], ARGV[1], 'pending') == 1 then
      redis.call('HINCRBY', KEYS[1], 'total', 1)
      redis.call('HINCRBY', KEYS[1], 'pending', 1)
    end
    redis.call('SADD', KEYS[3], ARGV[2])
    redis.call('LPUSH', KEYS[4], ARGV[3])
    return 1
  LUA

  class Error < StandardError; end

  # Pushes item (a Sidekiq::Client.push hash: "class", "args", optional
  # "queue", "retry", …) into the batch bid; returns the jid.
  def self.push(bid, item)
    item = item.transform_keys(&:to_s)
    klass = item["class"]
    item["class"] = klass.to_s unless klass.is_a?(String)
    item["queue"] = (item["queue"] || "default").to_s
    item["retry"] = true unless item.key?("retry")
    item["jid"] ||= SecureRandom.hex(12)
    item[PAYLOAD_KEY] = bid
    raise ArgumentError, "args must be an Array" unless item["args"].is_a?(Array)
    now = Time.now
    stamp = (Sidekiq::VERSION.to_i >= 8) ? (now.to_f * 1000).to_i : now.to_f
    item["created_at"] ||= stamp
    item["enqueued_at"] = stamp
    queue = item["queue"]
    keys = ["gojob-batch:#{bid}", "gojob-batch-jobs:#{bid}", "queues", "queue:#{queue}"]
    res = Sidekiq.redis { |c| c.call("EVAL", PUSH, keys.size, *keys, item["jid"], queue, JSON.generate(item)) }
    raise Error, "no gojob batch #{bid}" if res == -1
    raise Error, "gojob batch #{bid} has completed" if res == -2
    item["jid"]
  end

  # The batch's hash: description, on_success, on_complete, total,
  # pending, succeeded, dead, sealed, created_at, success_at, complete_at.
  def self.status(bid)
    Sidekiq.redis { |c| c.call("HGETALL", "gojob-batch:#{bid}") }.then { |h| h.is_a?(Array) ? Hash[*h] : h }
  end

  # A job's status hash: progress, message, result (JSON), outcome,
  # updated_at; {} when it has none.
  def self.job_status(jid)
    Sidekiq.redis { |c| c.call("HGETALL", "gojob-status:#{jid}") }.then { |h| h.is_a?(Array) ? Hash[*h] : h }
  end

  # Asks gojob to cancel the job (docs/job-control.md): the process that
  # runs it cancels it within a second. A job still waiting in a queue or
  # set is not removed by this call; use Sidekiq's API for those.
  def self.cancel(jid)
    Sidekiq.redis do |c|
      c.call("SET", "gojob-cancel:#{jid}", Time.now.to_i.to_s, "EX", 86_400)
      c.call("PUBLISH", "gojob-cancel", jid)
    end
  end
end
