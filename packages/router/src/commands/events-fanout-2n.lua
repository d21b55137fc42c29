--[[
  At fan-out, one call per tenant per intake job: for each event of ONE tenant, make sure it is
  accepted (its dedup marker "done" for the window and its record meta, in case the intake's own
  promote was lost after its job was durable: usually one GET finds it done), then add a pending
  delivery record per subscribed endpoint unless one exists (a re-run job keeps progress).
  All keys share the tenant's hash tag (one slot on Redis Cluster).
  KEYS    two per event: dedup key, record key ({t:<tenant>}:dedup:<id>, {t:<tenant>}:ev:<id>)
  ARGV[1] dedup window in milliseconds
  ARGV[2] record TTL in seconds
  ARGV    then two per event, in KEYS order: the record's meta JSON, a JSON array of endpoint ids
  returns the number of events
]]
local window, ttl = ARGV[1], ARGV[2]
for i = 1, #KEYS, 2 do
  local dedup, rec = KEYS[i], KEYS[i + 1]
  local a = 3 + (i - 1)
  if redis.call('GET', dedup) ~= 'd' then
    redis.call('SET', dedup, 'd', 'PX', window)
    redis.call('HSETNX', rec, 'meta', ARGV[a])
    redis.call('EXPIRE', rec, ttl)
  end
  for _, ep in ipairs(cjson.decode(ARGV[a + 1])) do
    redis.call('HSETNX', rec, 'ep:' .. ep, cjson.encode({ endpointId = ep, status = 'pending', attempts = 0 }))
  end
end
return #KEYS / 2
