# frozen_string_literal: true

# The Ruby side of gojob's batches (docs/batches.md, docs/job-control.md).
#
# In clients: add jobs from Ruby to a gojob batch, and read batches and job
# statuses. The batch is created by gojob (`gojob batch create`,
# batch.Batches.Create) and sealed by gojob after the last push
# (`gojob batch seal BID`).
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
#
# In Sidekiq servers (6.4 to 8.x) that run jobs of gojob batches: load this
# file the way contrib/ruby/gojob.rb is loaded (a Rails initializer, or the
# file given to `sidekiq -r`). Inside Sidekiq.configure_server it adds
# GojobBatch::ServerMiddleware, which records the success of a batch job
# Ruby ran, and a death handler, which records its death (retries
# exhausted, retry: false), each with the Lua step gojob's own processes run
# (batch/lua/update.lua): the batch completes, and its callbacks are pushed
# once, whichever process runs its jobs. A failed attempt that will be
# retried is not recorded. Outside a server it adds nothing.
#
# The two scripts below are batch/lua/push.lua and batch/lua/update.lua
# byte for byte (compat_test/batch_compat_test.go and batch/ruby_test.go
# check it): change them there and copy them here.
require "digest/sha1"
require "json"
require "securerandom"
require "sidekiq"

module GojobBatch
  PAYLOAD_KEY = "gojob_bid"

  # How long a batch's hashes are kept after its success (as gojob).
  KEEP_AFTER_SUCCESS = 30 * 24 * 60 * 60

  # batch/lua/push.lua
  PUSH = <<'LUA'
-- Pushes a job into a batch: registers it as a pending member and pushes
-- it to its queue in one step, so that a crash leaves neither a member
-- without its job nor a job its batch does not count.
--
-- KEYS[1]  gojob-batch:<bid>
-- KEYS[2]  gojob-batch-jobs:<bid>
-- KEYS[3]  queues
-- KEYS[4]  queue:<queue>
-- ARGV[1]  jid
-- ARGV[2]  queue name
-- ARGV[3]  payload, as Sidekiq's client would LPUSH it
--
-- Returns 1; -1 when the batch does not exist; -2 when it has completed.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if redis.call('HEXISTS', KEYS[1], 'complete_at') == 1 then
  return -2
end
if redis.call('HSETNX', KEYS[2], ARGV[1], 'pending') == 1 then
  redis.call('HINCRBY', KEYS[1], 'total', 1)
  redis.call('HINCRBY', KEYS[1], 'pending', 1)
end
redis.call('SADD', KEYS[3], ARGV[2])
redis.call('LPUSH', KEYS[4], ARGV[3])
return 1
LUA

  # batch/lua/update.lua
  UPDATE = <<'LUA'
-- Records that a member of a batch succeeded or died, or seals a batch,
-- and pushes the batch's callbacks that became due, each exactly once:
-- success_at and complete_at are set in the same step as the callback's
-- push. A member already in the state is left alone, so a job run again
-- after a crash (its success recorded, its acknowledgement lost) changes
-- nothing. A batch that completes or succeeds updates its parent's member
-- "batch:<bid>" the same way.
--
-- The parents' keys and the callbacks' queues are named here from the
-- batch hash (they are fixed at creation): like Sidekiq's keys they carry
-- no hash tag, so this script needs a single Redis node (docs/batches.md).
--
-- KEYS[1]  gojob-batch:<bid>
-- KEYS[2]  gojob-batch-jobs:<bid>
-- KEYS[3]  queues
-- ARGV[1]  "ok", "dead" or "seal"
-- ARGV[2]  member: a jid ("" for seal)
-- ARGV[3]  bid
-- ARGV[4]  now, epoch seconds (Sidekiq < 8 timestamps)
-- ARGV[5]  now, epoch milliseconds (Sidekiq 8 timestamps)
-- ARGV[6]  seconds the batch is kept after its success
--
-- Returns a list of the callbacks pushed ("complete:<bid>",
-- "success:<bid>"), empty when none.
local pushed = {}

local function push_callback(bkey, field, ts)
  local payload = redis.call('HGET', bkey, field)
  if not payload or payload == '' then
    return
  end
  local queue = redis.call('HGET', bkey, 'callback_queue') or 'default'
  payload = string.sub(payload, 1, -2) .. ',"enqueued_at":' .. ts .. '}'
  redis.call('SADD', KEYS[3], queue)
  redis.call('LPUSH', 'queue:' .. queue, payload)
end

local mark

local function check(bkey, bid)
  local b = redis.call('HMGET', bkey, 'total', 'succeeded', 'dead', 'sealed', 'success_at', 'complete_at', 'ts_ms', 'parent')
  if b[4] ~= '1' then
    return
  end
  local total, succeeded, dead = tonumber(b[1]) or 0, tonumber(b[2]) or 0, tonumber(b[3]) or 0
  local ts = ARGV[4]
  if b[7] == '1' then
    ts = ARGV[5]
  end
  local parent = b[8]
  if succeeded + dead == total and not b[6] then
    redis.call('HSET', bkey, 'complete_at', ARGV[4])
    push_callback(bkey, 'complete_job', ts)
    table.insert(pushed, 'complete:' .. bid)
    if parent and parent ~= '' and succeeded < total then
      mark(parent, 'batch:' .. bid, 'dead')
    end
  end
  if succeeded == total and not b[5] then
    redis.call('HSET', bkey, 'success_at', ARGV[4])
    push_callback(bkey, 'success_job', ts)
    table.insert(pushed, 'success:' .. bid)
    local keep = tonumber(ARGV[6])
    if keep and keep > 0 then
      redis.call('EXPIRE', bkey, keep)
      redis.call('EXPIRE', 'gojob-batch-jobs:' .. bid, keep)
    end
    if parent and parent ~= '' then
      mark(parent, 'batch:' .. bid, 'ok')
    end
  end
end

mark = function(bid, member, state)
  local bkey, jkey = 'gojob-batch:' .. bid, 'gojob-batch-jobs:' .. bid
  if redis.call('EXISTS', bkey) == 0 then
    return
  end
  local old = redis.call('HGET', jkey, member)
  -- Unknown, already so, or a success (final: a run after it changes
  -- nothing).
  if not old or old == state or old == 'ok' then
    return
  end
  redis.call('HSET', jkey, member, state)
  if old == 'pending' then
    redis.call('HINCRBY', bkey, 'pending', -1)
  else
    redis.call('HINCRBY', bkey, 'dead', -1)
  end
  if state == 'ok' then
    redis.call('HINCRBY', bkey, 'succeeded', 1)
  else
    redis.call('HINCRBY', bkey, 'dead', 1)
  end
  check(bkey, bid)
end

if ARGV[1] == 'seal' then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return -1
  end
  redis.call('HSET', KEYS[1], 'sealed', '1')
  check(KEYS[1], ARGV[3])
else
  mark(ARGV[3], ARGV[2], ARGV[1])
end
return pushed
LUA

  PUSH_SHA = Digest::SHA1.hexdigest(PUSH)
  UPDATE_SHA = Digest::SHA1.hexdigest(UPDATE)

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
    res = script(PUSH, PUSH_SHA, keys, [item["jid"], queue, JSON.generate(item)])
    raise Error, "no gojob batch #{bid}" if res == -1
    raise Error, "gojob batch #{bid} has completed" if res == -2
    item["jid"]
  end

  # Records that the job jid of the batch bid ended: state "ok" (it
  # succeeded) or "dead" (it died). A job recorded twice changes nothing.
  # Pushes the batch's callbacks that became due, in the same Lua step, and
  # returns them ("success:<bid>", "complete:<bid>"). The server middleware
  # and death handler call it; an unknown batch (expired, say) is ignored.
  def self.record(bid, jid, state)
    now = Time.now
    keys = ["gojob-batch:#{bid}", "gojob-batch-jobs:#{bid}", "queues"]
    argv = [state, jid, bid, now.to_f.to_s, (now.to_r * 1000).to_i.to_s, KEEP_AFTER_SUCCESS.to_s]
    pushed = script(UPDATE, UPDATE_SHA, keys, argv)
    pushed = [] unless pushed.is_a?(Array)
    pushed.each { |cb| Sidekiq.logger.info("gojob batch: #{cb.split(":", 2).first} callback of #{bid} pushed") }
    pushed
  end

  # The batch id of a job hash, nil for a job of no gojob batch.
  def self.bid_of(job)
    bid = job[PAYLOAD_KEY]
    bid if bid.is_a?(String) && !bid.empty?
  end

  # Runs the script src (its SHA1 sha): EVALSHA, and EVAL when Redis does
  # not have it.
  def self.script(src, sha, keys, argv)
    Sidekiq.redis do |c|
      c.call("EVALSHA", sha, keys.size, *keys, *argv)
    rescue => e
      raise unless e.message.start_with?("NOSCRIPT")
      c.call("EVAL", src, keys.size, *keys, *argv)
    end
  end

  # ServerMiddleware records the success of a job of a gojob batch once it
  # has run, before Sidekiq is done with it. An exception from the job
  # passes through unrecorded: Sidekiq's retry decides, and a death reaches
  # the death handler. When the record fails, the job fails with an error
  # that says so and runs again at its retry, where its success is
  # recorded (recording twice changes nothing).
  class ServerMiddleware
    include Sidekiq::ServerMiddleware if defined?(Sidekiq::ServerMiddleware)

    def call(_job_instance, job, _queue)
      yield
      bid = GojobBatch.bid_of(job)
      return unless bid
      begin
        GojobBatch.record(bid, job["jid"], "ok")
      rescue => e
        raise Error, "gojob batch #{bid}: the success of #{job["jid"]} was not recorded (#{e.class}: #{e.message})"
      end
    end
  end

  # on_death is the death handler: it records the death of a job of a gojob
  # batch. A failed record is logged; a job in the dead set is then still
  # recorded by gojob's dead-set watch (docs/batches.md).
  def self.on_death(job, _exception)
    bid = bid_of(job)
    return unless bid
    record(bid, job["jid"], "dead")
  rescue => e
    Sidekiq.logger.error("gojob batch #{bid}: the death of #{job["jid"]} was not recorded (#{e.class}: #{e.message})")
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

# In a Sidekiq server: record the batch jobs' successes and deaths.
Sidekiq.configure_server do |config|
  config.server_middleware { |chain| chain.add GojobBatch::ServerMiddleware }
  handler = GojobBatch.method(:on_death)
  config.death_handlers << handler unless config.death_handlers.include?(handler)
end
