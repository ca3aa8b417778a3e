-- Pushes a job of the outbox once per jid: the push and its marker are one
-- step, so a relay that pushed and died before it cleared the row's outbox
-- mark leaves a marker that makes the next relay's push of the row a no-op
-- (docs/durable.md, "Exactly once").
-- KEYS[1]: the marker, gojob:outbox:<jid>
-- KEYS[2]: queues (Sidekiq's set of queue names)
-- KEYS[3]: queue:<name>
-- KEYS[4]: schedule
-- ARGV[1]: the payload
-- ARGV[2]: the queue name
-- ARGV[3]: the marker's time to live, in seconds
-- ARGV[4]: the schedule score (epoch seconds) of a scheduled job, "" to
--          push to the queue now
-- Returns 1 when the job was pushed, 0 when the marker was there.
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[3]) then
  return 0
end
if ARGV[4] ~= '' then
  redis.call('ZADD', KEYS[4], ARGV[4], ARGV[1])
else
  redis.call('SADD', KEYS[2], ARGV[2])
  redis.call('LPUSH', KEYS[3], ARGV[1])
end
return 1
