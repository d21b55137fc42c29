--[[
  Appends a dead letter to a tenant's DLQ unless the list is at its cap (dlq-archive.ts): the
  check and the push are one step, so concurrent writers never take the list past the cap.
  KEYS[1] the DLQ list ({t:<tenant>}:dlq)
  ARGV[1] the cap (entries)
  ARGV[2] the entry (DlqItem JSON)
  returns the list's new length, or -1 when it is full (nothing written: archive, then try again)
]]
if redis.call('LLEN', KEYS[1]) >= tonumber(ARGV[1]) then
  return -1
end
return redis.call('RPUSH', KEYS[1], ARGV[2])
