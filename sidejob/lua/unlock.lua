-- Compare-and-delete of a job lock (the gem's unlock script).
-- KEYS[1]: job:<id>:lock
-- ARGV[1]: the token returned by the lock
-- Returns 1 when the lock held the token and was deleted, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
