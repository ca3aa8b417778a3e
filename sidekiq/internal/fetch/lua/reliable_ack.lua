-- Acknowledges finished jobs: takes each out of its in-progress list.
-- KEYS[1..m]: the in-progress lists
-- ARGV: pairs of (list index in KEYS, 1-based; the job as fetched)
-- returns: how many were found (a job not found was recovered by another
--          process meanwhile)
local found = 0
for i = 1, #ARGV, 2 do
  found = found + redis.call('LREM', KEYS[tonumber(ARGV[i])], -1, ARGV[i + 1])
end
return found
