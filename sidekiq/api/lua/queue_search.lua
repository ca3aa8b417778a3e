-- Returns the entries of a queue that contain a string, a chunk at a time
-- (sidekiq/api/locate.go).
-- KEYS[1]: the queue's list; ARGV[1]: the string; ARGV[2]: the first
-- index; ARGV[3]: how many entries to read.
-- Returns {the index to go on from (-1 at the end), the entries found}.
local from = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local vals = redis.call('LRANGE', KEYS[1], from, from + n - 1)
local found = {}
for i = 1, #vals do
  if string.find(vals[i], ARGV[1], 1, true) then
    found[#found + 1] = vals[i]
  end
end
local nxt = from + #vals
if #vals < n then nxt = -1 end
return {nxt, found}
