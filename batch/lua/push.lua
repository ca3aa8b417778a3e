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
