-- Moves one due member of the retry or schedule set to its queue, as the
-- payload the client path made of it, or to the dead set unchanged, in one
-- step: the member leaves its set only as the job enters its queue (or
-- the dead set), so a job is never only in the poller's memory. A member
-- another poller moved first is not there any more, and nothing is written.
-- KEYS[1]: the sorted set (retry or schedule)
-- KEYS[2]: the queue list, or the dead set
-- KEYS[3]: the set of queue names ("queues")
-- ARGV[1]: the member as stored
-- ARGV[2]: 'queue', 'dead' or 'drop' (a client middleware stopped the push)
-- ARGV[3]: queue: the payload to push; dead: the score
-- ARGV[4]: queue: the queue's name; dead: the oldest score kept
-- ARGV[5]: dead: ZREMRANGEBYRANK 0 -ARGV[5]
-- returns: 1 when the member was moved, 0 when it was gone
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if ARGV[2] == 'queue' then
  redis.call('SADD', KEYS[3], ARGV[4])
  redis.call('LPUSH', KEYS[2], ARGV[3])
elseif ARGV[2] == 'dead' then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[4])
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -tonumber(ARGV[5]))
end
return 1
