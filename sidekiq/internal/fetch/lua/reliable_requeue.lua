-- Gives jobs back from an in-progress list to the pop end of their queue,
-- so that they run next. A job no longer in the list (acknowledged, or
-- recovered by another process) is not pushed, so nothing runs twice.
-- KEYS[1]: the in-progress list
-- KEYS[2]: the queue list
-- ARGV[1..n]: the jobs as fetched, in RPUSH order (the last is popped first)
-- returns: how many went back
local moved = 0
for i = 1, #ARGV do
  if redis.call('LREM', KEYS[1], -1, ARGV[i]) == 1 then
    redis.call('RPUSH', KEYS[2], ARGV[i])
    moved = moved + 1
  end
end
return moved
