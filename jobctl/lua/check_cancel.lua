-- Finds the running jobs asked to cancel, by gojob (gojob-cancel:<jid>)
-- or by Sidekiq's cancel! (the field "cancelled" of it-<jid>): one command
-- per poll for every running job (jobctl/control.go).
-- KEYS: gojob-cancel:<jid>, it-<jid>, for each job.
-- Returns the 1-based positions of the jobs asked.
local out = {}
for i = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 or redis.call('HEXISTS', KEYS[i + 1], 'cancelled') == 1 then
    out[#out + 1] = (i + 1) / 2
  end
end
return out
