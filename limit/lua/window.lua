-- Counts one use of a sliding-window limiter.
-- KEYS[1]: the window's sorted set (member: token, score: time in ms)
-- ARGV[1]: now (ms)   ARGV[2]: the limit   ARGV[3]: window (ms)   ARGV[4]: token
-- returns 0 (allowed) or the ms until the oldest use leaves the window
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[3]))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return math.max(1, tonumber(oldest[2]) + tonumber(ARGV[3]) - tonumber(ARGV[1]))
end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 0
