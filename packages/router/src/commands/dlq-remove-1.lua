--[[
  Removes replayed entries from a tenant's DLQ list (each exactly once, by value).
  KEYS[1] the DLQ list ({t:<tenant>}:dlq)
  ARGV    the raw entries (JSON strings) that were re-enqueued
  returns how many entries were removed
]]
local n = 0
for i = 1, #ARGV do
  n = n + redis.call('LREM', KEYS[1], 1, ARGV[i])
end
return n
