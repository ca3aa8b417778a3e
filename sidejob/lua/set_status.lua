-- Conditional status change, atomic (the gem reads then writes; spec §10.5).
-- KEYS[1]: job:<id>:status
-- KEYS[2]: jobs (the set of live job ids)
-- ARGV[1]: the new status
-- ARGV[2]: the job id
-- ARGV[3]: "any" (always set, like GETSET), "in" (set only when the current
--          status is one of ARGV[4..]) or "notin" (set only when it is none
--          of ARGV[4..]; a missing key counts as "")
-- Returns {changed, old}: changed is 1 when the key was written with a value
-- different from the old one, 0 when it was written with the same value, -1
-- when it was not written (the status did not match), -2 when the job does
-- not exist (nothing is written: the gem's status= checks that the job
-- exists, so a deleted job's status key is never recreated); old is the
-- previous status or "" when the key was missing.
if redis.call('SISMEMBER', KEYS[2], ARGV[2]) == 0 then
  return {-2, ''}
end
local old = redis.call('GET', KEYS[1])
if not old then old = '' end
local mode = ARGV[3]
if mode ~= 'any' then
  local listed = false
  for i = 4, #ARGV do
    if old == ARGV[i] then listed = true end
  end
  if (mode == 'in' and not listed) or (mode == 'notin' and listed) then
    return {-1, old}
  end
end
redis.call('SET', KEYS[1], ARGV[1])
if old == ARGV[1] then return {0, old} end
return {1, old}
