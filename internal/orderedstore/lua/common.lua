-- Shared helpers, prepended to every ordered script (scripts.go). P is the
-- queue's key prefix "gojob:ordered:{QUEUE}:"; every key of a queue carries
-- the hash tag {QUEUE}, so a script touches one cluster slot.
local P = ARGV[1]
local function k(name) return P .. name end
local function shard_key(s) return P .. "shard:" .. s end
local function payloads_key(key) return P .. "p:" .. key end
local function proc_key(s) return P .. "proc:" .. s end
local function procp_key(s, key) return P .. "procp:" .. s .. ":" .. key end
local function lease_key(s) return P .. "lease:" .. s end
local function morgue_payloads_key(key) return P .. "morgue:p:" .. key end

-- refresh_ready puts shard s in the ready index at the perform_in of its
-- oldest key, or takes it out when it has none or a batch is in flight.
local function refresh_ready(s)
  if redis.call("exists", proc_key(s)) == 1 then
    redis.call("zrem", k("ready"), s)
    return
  end
  local first = redis.call("zrange", shard_key(s), 0, 0, "WITHSCORES")
  if first[1] then
    redis.call("zadd", k("ready"), first[2], s)
  else
    redis.call("zrem", k("ready"), s)
  end
end

-- merge_into_queue merges the payloads of src into key's pending set
-- (equal payloads keep the lower score), deletes src and counts the new
-- pending payloads.
local function merge_into_queue(key, src)
  local dst = payloads_key(key)
  local before = redis.call("zcard", dst)
  local after = redis.call("zunionstore", dst, 2, dst, src, "AGGREGATE", "MIN")
  redis.call("del", src)
  redis.call("hincrby", k("stats"), "pending", after - before)
  return after
end

-- set_key_state records key's retry_count (-1 = new) and perform_in (ms).
local function set_key_state(s, key, rc, perform_in)
  if tonumber(rc) < 0 then
    redis.call("hdel", k("retries"), key)
  else
    redis.call("hset", k("retries"), key, rc)
  end
  redis.call("zadd", shard_key(s), perform_in, key)
end

-- restore_shard puts a batch left in flight (its owner died or lost its
-- lease) back into the queue with the retry_count and perform_in it was
-- taken with. It returns the number of payloads restored.
local function restore_shard(s)
  local proc = proc_key(s)
  local fields = redis.call("hgetall", proc)
  local restored = 0
  for i = 1, #fields, 2 do
    local key = fields[i]
    if key ~= "_owner" then
      local rc, perform_in, taken = string.match(fields[i + 1], "^([^|]*)|([^|]*)|([^|]*)$")
      local src = procp_key(s, key)
      local n = redis.call("zcard", src)
      if n > 0 then
        merge_into_queue(key, src)
        set_key_state(s, key, rc, perform_in)
        restored = restored + n
      end
      redis.call("hincrby", k("stats"), "processing", -tonumber(taken))
    end
  end
  redis.call("del", proc)
  return restored
end
