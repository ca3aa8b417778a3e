-- Counts one use of a bucket limiter's current interval.
-- KEYS[1]: the interval's counter   ARGV[1]: the limit   ARGV[2]: TTL (ms)
-- returns 1 (allowed) or 0 (over)
local n = redis.call('INCR', KEYS[1])
if n == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if n > tonumber(ARGV[1]) then
  redis.call('DECR', KEYS[1])
  return 0
end
return 1
