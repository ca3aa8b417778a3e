-- Moves up to ARGV[1] jobs, oldest first, from the queues in fetch order to
-- their in-progress lists: the first non-empty queue is emptied before the
-- next is tried.
-- KEYS[1..n]: the queue lists, in fetch order
-- KEYS[n+1..2n]: their in-progress lists, in the same order
-- ARGV[1]: the most jobs to move
-- returns: {i1, job1, i2, job2, ...}, i being the queue's index (1-based)
local n = #KEYS / 2
local want = tonumber(ARGV[1])
local out = {}
for i = 1, n do
  while #out < 2 * want do
    local job = redis.call('RPOPLPUSH', KEYS[i], KEYS[n + i])
    if not job then break end
    out[#out + 1] = i
    out[#out + 1] = job
  end
  if #out >= 2 * want then break end
end
return out
