-- Seeds a job's enqueued-times set with its latest tick when the set does
-- not exist, as the gem's save does with EXISTS then ZADD, in one step
-- (cron/store.go).
-- KEYS[1]: the job's enqueued-times set; ARGV[1]: the score; ARGV[2]: the
-- tick's member.
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
end
return 1
