-- Releases the reconciler's leader lease if the caller holds it.
-- KEYS[1]: the lease key
-- ARGV[1]: the caller's identity
-- Returns 1 when the lease was released, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
