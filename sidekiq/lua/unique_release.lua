-- Releases a unique job's lock if this job still holds it.
-- KEYS[1]: the lock   ARGV[1]: the job's jid
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
