-- zpopbyscore (Sidekiq 7.1+ scheduled.rb): pop the first member of a sorted
-- set whose score is at most now.
-- KEYS[1]: the sorted set (retry or schedule)
-- ARGV[1]: now, float epoch seconds
-- returns: the member, or nil when none is due
local key, now = KEYS[1], ARGV[1]
local jobs = redis.call("zrange", key, "-inf", now, "byscore", "limit", 0, 1)
if jobs[1] then
  redis.call("zrem", key, jobs[1])
  return jobs[1]
end
