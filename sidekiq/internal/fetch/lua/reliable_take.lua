-- Moves up to ARGV[1] jobs, oldest first, from the queues in fetch order to
-- their in-progress lists: the first non-empty queue is emptied before the
-- next is tried. The in-progress list ends as one RPOPLPUSH per job would
-- leave it (the oldest job deepest); a batch costs three commands per
-- queue, not one per job.
-- KEYS[1..n]: the queue lists, in fetch order
-- KEYS[n+1..2n]: their in-progress lists, in the same order
-- ARGV[1]: the most jobs to move
-- returns: {i1, job1, i2, job2, ...}, oldest first, i being the queue's
--          index (1-based)
local n = #KEYS / 2
local want = tonumber(ARGV[1])
local out = {}
for i = 1, n do
  local need = want - #out / 2
  if need <= 0 then
    break
  end
  local jobs = redis.call('LRANGE', KEYS[i], -need, -1)
  local m = #jobs
  if m > 0 then
    redis.call('LTRIM', KEYS[i], 0, -m - 1)
    local oldestFirst = {}
    for j = m, 1, -1 do
      oldestFirst[#oldestFirst + 1] = jobs[j]
      out[#out + 1] = i
      out[#out + 1] = jobs[j]
    end
    redis.call('LPUSH', KEYS[n + i], unpack(oldestFirst))
  end
end
return out
