-- Counts a page of a sorted set's members by queue (internal/setcount).
-- KEYS[1]: the set; ARGV[1]: the page's first index; ARGV[2]: its size.
-- Returns the page's size, the counts as name, count pairs, and the
-- members whose queue it leaves to the caller.
local start = tonumber(ARGV[1])
local members = redis.call('ZRANGE', KEYS[1], start, start + tonumber(ARGV[2]) - 1)
local counts, order, raw = {}, {}, {}
for _, m in ipairs(members) do
  local name
  local i, j = string.find(m, '"queue":"', 1, true)
  if i and string.sub(m, 1, 1) == '{' and not string.find(string.sub(m, 2, i - 1), '[%[{]') then
    local k = string.find(m, '"', j + 1, true)
    if k then
      local v = string.sub(m, j + 1, k - 1)
      if not string.find(v, '\\', 1, true) then
        name = v
      end
    end
  end
  if name then
    if not counts[name] then
      counts[name] = 0
      table.insert(order, name)
    end
    counts[name] = counts[name] + 1
  else
    table.insert(raw, m)
  end
end
local flat = {}
for _, name in ipairs(order) do
  table.insert(flat, name)
  table.insert(flat, tostring(counts[name]))
end
return {#members, flat, raw}
