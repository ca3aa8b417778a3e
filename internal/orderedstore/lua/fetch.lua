-- fetch: takes the due keys of the owned shard with the oldest due key
-- (Lowkiq's Lag scheduler) and moves their pending payloads to the shard's
-- in-flight record, in one round trip.
--
-- KEYS: none; every key is built from the queue prefix (common.lua).
-- ARGV[1]: queue prefix; ARGV[2]: owner id; ARGV[3]: now, ms;
-- ARGV[4]: keys per batch; ARGV[5]: payloads per key per batch;
-- then pairs: shard, fencing token, for each shard the caller holds.
-- returns: {shard|false, lost shards, batch...} where lost shards are the
-- caller's shards whose lease is no longer its own and each batch entry is
-- {key, retry_count, perform_in, payload1, score1, payload2, score2, ...}.
local owner, now = ARGV[2], ARGV[3]
local max_keys, max_payloads = tonumber(ARGV[4]), tonumber(ARGV[5])
local tokens = {}
for i = 6, #ARGV, 2 do
  tokens[ARGV[i]] = ARGV[i + 1]
end
local lost = {}
local chosen, token
local offset = 0
while not chosen do
  local ready = redis.call("zrangebyscore", k("ready"), "-inf", now, "LIMIT", offset, 64)
  if #ready == 0 then break end
  for _, s in ipairs(ready) do
    local tok = tokens[s]
    if tok then
      if redis.call("get", lease_key(s)) ~= owner .. ":" .. tok then
        table.insert(lost, s)
        tokens[s] = nil
      elseif redis.call("exists", proc_key(s)) == 0 then
        chosen, token = s, tok
        break
      end
    end
  end
  offset = offset + 64
end
if not chosen then
  return {false, lost}
end
local s = chosen
local keys = redis.call("zrangebyscore", shard_key(s), "-inf", now, "LIMIT", 0, max_keys)
local out = {s, lost}
if #keys == 0 then
  refresh_ready(s)
  return {false, lost}
end
local proc = proc_key(s)
redis.call("hset", proc, "_owner", owner .. ":" .. token)
local taken_total = 0
for _, key in ipairs(keys) do
  local src, dst = payloads_key(key), procp_key(s, key)
  local perform_in = redis.call("zscore", shard_key(s), key)
  local rc = redis.call("hget", k("retries"), key) or "-1"
  local n = redis.call("zcard", src)
  local taken = n
  if n <= max_payloads then
    if n > 0 then
      redis.call("rename", src, dst)
    end
    redis.call("zrem", shard_key(s), key)
    redis.call("hdel", k("retries"), key)
  else
    local popped = redis.call("zpopmin", src, max_payloads)
    local args = {}
    for i = 1, #popped, 2 do
      table.insert(args, popped[i + 1])
      table.insert(args, popped[i])
    end
    redis.call("zadd", dst, unpack(args))
    taken = max_payloads
  end
  redis.call("hset", proc, key, rc .. "|" .. perform_in .. "|" .. taken)
  taken_total = taken_total + taken
  local entry = {key, rc, perform_in}
  local items = redis.call("zrange", dst, 0, -1, "WITHSCORES")
  for i = 1, #items do
    table.insert(entry, items[i])
  end
  table.insert(out, entry)
end
redis.call("zrem", k("ready"), s)
redis.call("hincrby", k("stats"), "pending", -taken_total)
redis.call("hincrby", k("stats"), "processing", taken_total)
return out
