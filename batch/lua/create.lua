-- Creates a batch, and makes it a member of its parent (nested batches).
--
-- KEYS[1]  gojob-batch:<bid>
-- KEYS[2]  gojob-batches (sorted set of batch ids by creation time)
-- KEYS[3]  gojob-batch:<parent>      (unused without a parent)
-- KEYS[4]  gojob-batch-jobs:<parent> (unused without a parent)
-- ARGV[1]  bid
-- ARGV[2]  now, epoch seconds
-- ARGV[3]  parent bid, "" for none
-- ARGV[4…] field, value pairs of the batch hash
--
-- Returns 1; -1 when the parent does not exist; -2 when the parent has
-- completed (it takes no more members); -3 when the bid exists.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return -3
end
local parent = ARGV[3]
if parent ~= '' then
  if redis.call('EXISTS', KEYS[3]) == 0 then
    return -1
  end
  if redis.call('HEXISTS', KEYS[3], 'complete_at') == 1 then
    return -2
  end
  if redis.call('HSETNX', KEYS[4], 'batch:' .. ARGV[1], 'pending') == 1 then
    redis.call('HINCRBY', KEYS[3], 'total', 1)
    redis.call('HINCRBY', KEYS[3], 'pending', 1)
  end
end
redis.call('HSET', KEYS[1], 'created_at', ARGV[2], 'total', 0, 'pending', 0, 'succeeded', 0, 'dead', 0,
  unpack(ARGV, 4))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 1
