-- Conditional status change, atomic (the gem reads then writes; spec §10.5).
-- KEYS[1]: job:<id>:status
-- ARGV[1]: the new status
-- ARGV[2]: "any" (always set, like GETSET), "in" (set only when the current
--          status is one of ARGV[3..]) or "notin" (set only when it is none
--          of ARGV[3..]; a missing key counts as "")
-- Returns {changed, old}: changed is 1 when the key was written with a value
-- different from the old one, 0 otherwise (not written, or written with the
-- same value); old is the previous status or "" when the key was missing.
local old = redis.call('GET', KEYS[1])
if not old then old = '' end
local mode = ARGV[2]
if mode ~= 'any' then
  local listed = false
  for i = 3, #ARGV do
    if old == ARGV[i] then listed = true end
  end
  if (mode == 'in' and not listed) or (mode == 'notin' and listed) then
    return {-1, old}
  end
end
redis.call('SET', KEYS[1], ARGV[1])
if old == ARGV[1] then return {0, old} end
return {1, old}
