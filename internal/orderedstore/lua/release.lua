-- release: a stopping process gives back its leases (those with no batch
-- in flight) and leaves the member set, so others take its shards at
-- their next beat instead of after the lease TTL.
--
-- KEYS: none; every key is built from the queue prefix (common.lua).
-- ARGV[1]: queue prefix; ARGV[2]: owner id; then pairs shard, token.
-- returns: the number of leases released.
local owner = ARGV[2]
local released = 0
for i = 3, #ARGV, 2 do
  local s, tok = ARGV[i], ARGV[i + 1]
  if redis.call("get", lease_key(s)) == owner .. ":" .. tok and redis.call("exists", proc_key(s)) == 0 then
    redis.call("del", lease_key(s))
    released = released + 1
  end
end
redis.call("zrem", k("members"), owner)
return released
