-- commit: writes the outcome of a batch, if the caller still holds the
-- shard's lease with the token it fetched under (fencing: a process whose
-- lease was taken over changes nothing).
--
-- KEYS: none; every key is built from the queue prefix (common.lua).
-- ARGV[1]: queue prefix; ARGV[2]: shard; ARGV[3]: owner id;
-- ARGV[4]: fencing token; ARGV[5]: now, ms; then 7 per key: ordering key,
-- payloads done (the lowest scores, acknowledged), outcome ("ok", "fail"
-- or "restore"), retry_count and perform_in (ms) for what goes back,
-- bury ("1": the oldest payload left goes to the morgue), error message.
-- returns: 1, or 0 when the lease is not the caller's (nothing written).
local s, owner, token, now = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call("get", lease_key(s)) ~= owner .. ":" .. token then
  return 0
end
local proc = proc_key(s)
if redis.call("hget", proc, "_owner") ~= owner .. ":" .. token then
  return 0
end
local processed, failed = 0, 0
for i = 6, #ARGV, 7 do
  local key, done, outcome = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local rc, perform_in, bury, err = ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6]
  local src = procp_key(s, key)
  local rec = redis.call("hget", proc, key)
  if rec then
    local taken = tonumber(string.match(rec, "|([^|]*)$"))
    redis.call("hincrby", k("stats"), "processing", -taken)
  end
  if done > 0 then
    if done >= redis.call("zcard", src) then
      redis.call("del", src)
    else
      redis.call("zremrangebyrank", src, 0, done - 1)
    end
    processed = processed + done
  end
  if outcome == "fail" then
    failed = failed + 1
    redis.call("hset", k("errors"), key, err)
    if bury == "1" then
      local oldest = redis.call("zpopmin", src, 1)
      if oldest[1] then
        local added = redis.call("zadd", morgue_payloads_key(key), "LT", oldest[2], oldest[1])
        redis.call("zadd", k("morgue"), now, key)
        redis.call("hset", k("morgue:errors"), key, err)
        redis.call("hincrby", k("stats"), "morgue", added)
      end
    end
  elseif outcome == "ok" then
    redis.call("hdel", k("errors"), key)
  end
  if redis.call("zcard", src) > 0 then
    merge_into_queue(key, src)
    set_key_state(s, key, rc, perform_in)
  elseif outcome ~= "restore" then
    -- Nothing of the batch goes back: payloads pushed meanwhile start new.
    redis.call("hdel", k("retries"), key)
  end
  redis.call("del", src)
end
redis.call("del", proc)
refresh_ready(s)
if processed > 0 then redis.call("hincrby", k("stats"), "processed", processed) end
if failed > 0 then redis.call("hincrby", k("stats"), "failed", failed) end
return 1
