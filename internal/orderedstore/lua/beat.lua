-- beat: a process's heartbeat. It renews the leases the process holds,
-- releases idle ones above its fair share, and leases free shards up to
-- it. A shard leased from a dead owner first gets that owner's in-flight
-- batch back into its queue (the dead owner's commit is fenced off by the
-- new token).
--
-- KEYS: none; every key is built from the queue prefix (common.lua).
-- ARGV[1]: queue prefix; ARGV[2]: owner id; ARGV[3]: lease TTL, ms;
-- ARGV[4]: now, ms; ARGV[5]: first shard to try when leasing (spreads
-- processes); ARGV[6]: number n of held shards; then n pairs shard,
-- token; then the shards with a batch running in this process (never
-- released, and not leased again while their old batch still runs).
-- returns: {held pairs (shard, token)..., "lost", lost shards...,
-- "restored", payloads restored}.
local owner, ttl, now, start = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local nheld = tonumber(ARGV[6])
local shards = tonumber(redis.call("hget", k("meta"), "shards") or "0")
redis.call("zadd", k("members"), now + ttl, owner)
redis.call("zremrangebyscore", k("members"), "-inf", now)
local members = redis.call("zcard", k("members"))
local target = math.ceil(shards / members)

local held, lost = {}, {}
local count = 0
for i = 7, 6 + 2 * nheld, 2 do
  local s, tok = ARGV[i], ARGV[i + 1]
  if redis.call("get", lease_key(s)) == owner .. ":" .. tok then
    redis.call("pexpire", lease_key(s), ttl)
    held[s] = tok
    count = count + 1
  else
    table.insert(lost, s)
  end
end
local busy = {}
for i = 7 + 2 * nheld, #ARGV do
  busy[ARGV[i]] = true
end
for i = 7, 6 + 2 * nheld, 2 do
  local s = ARGV[i]
  if count <= target then break end
  if held[s] and not busy[s] and redis.call("exists", proc_key(s)) == 0 then
    redis.call("del", lease_key(s))
    held[s] = nil
    count = count - 1
  end
end
local restored = 0
if count < target then
  for j = 0, shards - 1 do
    if count >= target then break end
    local s = tostring((start + j) % shards)
    if not held[s] and not busy[s] and redis.call("exists", lease_key(s)) == 0 then
      local tok = redis.call("incr", k("fence"))
      redis.call("set", lease_key(s), owner .. ":" .. tok, "PX", ttl)
      restored = restored + restore_shard(s)
      refresh_ready(s)
      held[s] = tostring(tok)
      count = count + 1
    end
  end
end
local out = {}
for s, tok in pairs(held) do
  table.insert(out, s)
  table.insert(out, tok)
end
table.insert(out, "lost")
for _, s in ipairs(lost) do table.insert(out, s) end
table.insert(out, "restored")
table.insert(out, tostring(restored))
return out
