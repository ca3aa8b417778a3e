-- Recovers one job from the in-progress list of a process that is gone:
-- back to the pop end of its queue with its original bytes (it runs before
-- newer jobs), or, for a poison pill, to the dead set. Several processes
-- may recover the same list at once: only the one whose LREM finds the job
-- moves it.
-- KEYS[1]: the in-progress list
-- KEYS[2]: its owner's reliable-fetch heartbeat key
-- KEYS[3]: its owner's Sidekiq process hash
-- KEYS[4]: the queue list
-- KEYS[5]: the job's recovery counter
-- KEYS[6]: the dead set
-- KEYS[7]: gojob's registry of in-progress lists
-- ARGV[1]: the job as stored in the list
-- ARGV[2]: 'requeue' or 'dead'
-- ARGV[3]: '1' when the owner is known to be gone although its keys have
--          not expired yet (same host, its pid ended); '0' checks the keys
-- ARGV[4]: '1' to count this recovery in KEYS[5], '0' when the job has no jid
-- ARGV[5]: the counter's time to live, seconds
-- ARGV[6], ARGV[7]: the dead-set score and member (mode 'dead')
-- ARGV[8], ARGV[9]: the dead-set trims (oldest score kept, max jobs)
-- returns: -1 when the owner is alive (nothing moved), 0 when the job was
--          no longer in the list, 1 when it was moved
if ARGV[3] ~= '1' and (redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[3]) == 1) then
  return -1
end
local moved = 0
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 1 then
  moved = 1
  if ARGV[2] == 'requeue' then
    redis.call('RPUSH', KEYS[4], ARGV[1])
    if ARGV[4] == '1' then
      redis.call('INCR', KEYS[5])
      redis.call('EXPIRE', KEYS[5], ARGV[5])
    end
  else
    redis.call('ZADD', KEYS[6], ARGV[6], ARGV[7])
    redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', ARGV[8])
    redis.call('ZREMRANGEBYRANK', KEYS[6], 0, -tonumber(ARGV[9]))
    redis.call('DEL', KEYS[5])
  end
end
if redis.call('LLEN', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[7], KEYS[1])
end
return moved
