-- Whether a job with this jid waits in an immediate queue list, as Ruby's
-- Sidekiq::Queue#find_job (a scan of the whole list; the schedule set is not
-- looked at). Ruby compares with an Integer jid; this also accepts the jid
-- written as a JSON string of the same digits (spec §10.6).
-- KEYS[1]: queue:<name>
-- ARGV[1]: the jid (decimal digits)
-- Returns 1 when found, 0 otherwise.
local want = tonumber(ARGV[1])
local plain = '"jid":' .. ARGV[1]
local quoted = '"jid":"' .. ARGV[1] .. '"'
local items = redis.call('LRANGE', KEYS[1], 0, -1)
for _, raw in ipairs(items) do
  if string.find(raw, plain, 1, true) or string.find(raw, quoted, 1, true) then
    local ok, job = pcall(cjson.decode, raw)
    if ok and type(job) == 'table' and job['jid'] ~= nil and tonumber(job['jid']) == want then
      return 1
    end
  end
end
return 0
