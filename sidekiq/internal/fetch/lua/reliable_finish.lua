-- Writes the outcome of a failed job and takes it out of the in-progress
-- list, atomically. The outcome is written only when the job was still in
-- the list: a job recovered by another process meanwhile is that
-- process's to run again, and writing a retry for it too would run it
-- twice.
-- KEYS[1]: the in-progress list
-- KEYS[2]: the sorted set written to (retry or dead)
-- ARGV[1]: the job as fetched
-- ARGV[2]: the score ('' writes nothing: the job is dropped)
-- ARGV[3]: the member written
-- ARGV[4]: dead-set trim: the oldest score kept ('' = no trim)
-- ARGV[5]: dead-set trim: ZREMRANGEBYRANK 0 -ARGV[5]
-- returns: 1 when the job was in the list, 0 when it was not
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
if ARGV[2] ~= '' then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
  if ARGV[4] ~= '' then
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[4])
    redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -tonumber(ARGV[5]))
  end
end
return 1
