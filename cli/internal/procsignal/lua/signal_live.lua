-- Pushes a signal to a process only when its heartbeat hash exists
-- (cli/internal/procsignal).
-- KEYS[1]: <identity>; KEYS[2]: <identity>-signals; ARGV[1]: the signal.
-- Returns 1 when pushed, 0 when the process is not live.
if redis.call('HEXISTS', KEYS[1], 'info') == 0 then
  return 0
end
redis.call('LPUSH', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], 60)
return 1
