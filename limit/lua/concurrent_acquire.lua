-- Takes a slot of a concurrent limiter: slots whose holder stopped
-- refreshing them (a crashed process) expire first.
-- KEYS[1]: the limiter's sorted set (member: token, score: expiry in ms)
-- ARGV[1]: now (ms)   ARGV[2]: the limit   ARGV[3]: token   ARGV[4]: expiry (ms)
-- returns 1 (taken) or 0 (full)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]) - tonumber(ARGV[1]) + 60000)
return 1
