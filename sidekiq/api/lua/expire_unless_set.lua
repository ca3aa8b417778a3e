-- EXPIRE … NX (Redis 7.0+) for any Redis: sets the expiry only when the
-- key has none (sidekiq/api/cancel.go).
-- KEYS[1]: the key; ARGV[1]: the seconds.
if redis.call('TTL', KEYS[1]) == -1 then
  return redis.call('EXPIRE', KEYS[1], ARGV[1])
end
return 0
