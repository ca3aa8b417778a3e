-- push: adds payloads to their keys' pending sets.
--
-- KEYS: none; every key is built from the queue prefix (common.lua).
-- ARGV[1]: queue prefix; ARGV[2]: shard count the client hashed with;
-- ARGV[3]: now, ms; then 5 per payload: ordering key, shard, payload,
-- score ("" = the queue's next sequence number), perform_in (ms).
-- returns: the number of payloads that were not already pending, or an
-- error "ORDERED_SHARDS n" when the queue has n shards.
local shards = redis.call("hget", k("meta"), "shards")
if not shards then
  redis.call("hset", k("meta"), "shards", ARGV[2], "created_at", ARGV[3])
elseif shards ~= ARGV[2] then
  return redis.error_reply("ORDERED_SHARDS " .. shards)
end
local added = 0
local touched = {}
for i = 4, #ARGV, 5 do
  local key, s, payload, score, perform_in = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  if score == "" then
    score = redis.call("incr", k("seq"))
  end
  -- LT: an equal payload already pending keeps the lower score.
  added = added + redis.call("zadd", payloads_key(key), "LT", score, payload)
  -- NX: a key already queued keeps its perform_in (Lowkiq's merge rule).
  redis.call("zadd", shard_key(s), "NX", perform_in, key)
  touched[s] = true
end
for s in pairs(touched) do
  refresh_ready(s)
end
redis.call("hincrby", k("stats"), "pending", added)
return added
