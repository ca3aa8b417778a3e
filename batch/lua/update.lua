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
