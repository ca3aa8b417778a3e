-- Enqueues one cron job's push, at most once per tick: the tick's claim in
-- the enqueued set and the push are one step, so a process that dies
-- between them cannot lose the tick (the gem's poller claims, then pushes).
-- KEYS[1]: cron_job:…:enqueued   KEYS[2]: cron_job:… (the job's hash)
-- KEYS[3]: cron_job:…:jid_history   KEYS[4]: queue:NAME   KEYS[5]: queues
-- ARGV[1]: tick score ("" = push now without a tick: run-now)
-- ARGV[2]: tick member (ISO 8601 UTC)   ARGV[3]: the job's payload
-- ARGV[4]: queue name   ARGV[5]: last_enqueue_time   ARGV[6]: history entry
-- ARGV[7]: last history index kept   ARGV[8]: trim bound ("(score")
-- returns 1 (pushed), 0 (the tick was already claimed), -1 (no such job)
if redis.call('EXISTS', KEYS[2]) == 0 then
  return -1
end
if ARGV[1] ~= '' then
  if redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2]) == 0 then
    return 0
  end
end
redis.call('SADD', KEYS[5], ARGV[4])
redis.call('LPUSH', KEYS[4], ARGV[3])
redis.call('HSET', KEYS[2], 'last_enqueue_time', ARGV[5])
redis.call('LPUSH', KEYS[3], ARGV[6])
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[7]))
if ARGV[1] ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, ARGV[8])
end
return 1
