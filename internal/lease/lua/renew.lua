-- Renews a lease for the holder that has it.
-- KEYS[1]: the lease key
-- ARGV[1]: the caller's holder name
-- ARGV[2]: the time to live, in milliseconds
-- Returns 1 when renewed, 0 when the caller no longer holds the lease.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
