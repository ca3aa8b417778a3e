-- Pushes a unique job: takes its lock and writes the job in one step, or
-- does nothing when another job holds the lock.
-- KEYS[1]: the lock   KEYS[2]: queue:NAME or schedule   KEYS[3]: queues
-- ARGV[1]: jid (the lock's value)   ARGV[2]: lock TTL in milliseconds
-- ARGV[3]: payload   ARGV[4]: queue name ("" = scheduled)   ARGV[5]: score
-- returns 1 (pushed) or 0 (a duplicate)
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
if ARGV[4] == '' then
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[3])
else
  redis.call('SADD', KEYS[3], ARGV[4])
  redis.call('LPUSH', KEYS[2], ARGV[3])
end
return 1
