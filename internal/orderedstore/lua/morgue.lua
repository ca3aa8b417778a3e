-- morgue: moves a key's buried payloads back to its queue ("requeue") or
-- deletes them ("delete"). Moved back, they merge with what the key has
-- queued (equal payloads keep the lower score) and the key gets
-- retry_count -1 and perform_in now (Lowkiq's merge rule for a morgue
-- job).
--
-- KEYS: none; every key is built from the queue prefix (common.lua).
-- ARGV[1]: queue prefix; ARGV[2]: "requeue" or "delete"; ARGV[3]: now,
-- ms; then pairs: ordering key, its shard.
-- returns: the number of payloads moved or deleted.
local action, now = ARGV[2], ARGV[3]
local moved = 0
for i = 4, #ARGV, 2 do
  local key, s = ARGV[i], ARGV[i + 1]
  local src = morgue_payloads_key(key)
  local n = redis.call("zcard", src)
  if n > 0 then
    redis.call("hincrby", k("stats"), "morgue", -n)
    if action == "requeue" then
      merge_into_queue(key, src)
      set_key_state(s, key, -1, now)
      refresh_ready(s)
    else
      redis.call("del", src)
    end
    moved = moved + n
  end
  redis.call("zrem", k("morgue"), key)
  redis.call("hdel", k("morgue:errors"), key)
end
return moved
