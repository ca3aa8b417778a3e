-- Reads what Ruby Sidekiq left in Redis, for the version decision
-- (internal/contract/version_decide.go, docs/version-follow.md), in one
-- command whatever Redis holds.
--
-- KEYS: none (the keys read are named in ARGV; Sidekiq runs on a single
-- Redis, not a cluster).
-- ARGV[1]: n7, the count of 7.x metrics minute keys that follow;
-- ARGV[2]: n8, the count of 8.x metrics minute keys after those;
-- ARGV[3]: ns, the count of stale process identities after those;
-- ARGV[4]: how many of the newest retry and dead entries to return;
-- then the n7 + n8 key names and the ns identities.
--
-- Returns {c7, c8, stale, retry, dead, entries}: how many of the 7.x and
-- 8.x keys exist but for those gojob wrote (gojob-metrics-keys); per stale
-- identity, 1 for a ":workers" hash (up to 6.4.1), 2 for a ":work" hash
-- (6.4.2+), 3 for both, 0 for none; the newest retry and dead entries;
-- the jids of the entries gojob wrote (gojob-entries).
local n7, n8, ns = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tail = tonumber(ARGV[4])
local own = {}
for _, k in ipairs(redis.call('ZRANGE', 'gojob-metrics-keys', 0, -1)) do
  own[k] = true
end
local function count(first, n)
  local c = 0
  for i = first, first + n - 1 do
    local k = ARGV[i]
    if not own[k] and redis.call('EXISTS', k) == 1 then
      c = c + 1
    end
  end
  return c
end
local c7 = count(5, n7)
local c8 = count(5 + n7, n8)
local stale = {}
for i = 5 + n7 + n8, 4 + n7 + n8 + ns do
  local id = ARGV[i]
  stale[#stale + 1] = redis.call('EXISTS', id .. ':workers') + 2 * redis.call('EXISTS', id .. ':work')
end
return {c7, c8, stale,
  redis.call('ZRANGE', 'retry', -tail, -1),
  redis.call('ZRANGE', 'dead', -tail, -1),
  redis.call('ZRANGE', 'gojob-entries', 0, -1)}
