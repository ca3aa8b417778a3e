-- Releases a lease if the caller holds it (compare-and-delete; also the
-- sidejob gem's unlock of a job lock).
-- KEYS[1]: the lease key
-- ARGV[1]: the caller's holder name
-- Returns 1 when released, 0 when the caller did not hold it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
