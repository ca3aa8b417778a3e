-- Writes an iterable job's state as Sidekiq's flush_state does
-- (lib/sidekiq/job/iterable.rb, 7.3 and 8.1): the fields ex, c and rt, the
-- key's 30-day expiry only when it has none (EXPIRE … NX, for any Redis),
-- and returns the field cancelled (nil when the job is not cancelled).
-- KEYS[1]: it-<jid>
-- ARGV[1]: ex; ARGV[2]: c (the cursor's JSON); ARGV[3]: rt; ARGV[4]: the TTL
redis.call('HSET', KEYS[1], 'ex', ARGV[1], 'c', ARGV[2], 'rt', ARGV[3])
if redis.call('TTL', KEYS[1]) == -1 then
  redis.call('EXPIRE', KEYS[1], ARGV[4])
end
return redis.call('HGET', KEYS[1], 'cancelled')
