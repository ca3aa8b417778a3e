-- Acknowledges finished jobs: takes each out of its in-progress list.
-- KEYS[1..m]: the in-progress lists
-- ARGV: pairs of (list index in KEYS, 1-based; the job as fetched)
-- returns: the indexes (in pairs, 1-based) of the jobs not found: another
--          process recovered them meanwhile
local missing = {}
for i = 1, #ARGV, 2 do
  if redis.call('LREM', KEYS[tonumber(ARGV[i])], -1, ARGV[i + 1]) == 0 then
    missing[#missing + 1] = (i + 1) / 2
  end
end
return missing
