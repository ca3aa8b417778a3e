-- Takes a lease that is free, or renews it for the holder that has it.
-- KEYS[1]: the lease key
-- ARGV[1]: the caller's holder name
-- ARGV[2]: the time to live, in milliseconds
-- Returns 1 when the caller holds the lease (taken or renewed), 0 when
-- another holder has it.
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
