--[[
  After a batch is durable (its BullMQ job exists): for each event of ONE tenant, promote the dedup
  marker to "done" for the full window and create the event's delivery record (meta and a pending
  record per endpoint, each only if absent, so a re-run job keeps progress), with its TTL. The
  intake calls it with no endpoints; the worker with the endpoints the event fanned out to. All keys
  share the tenant's hash tag (one slot on Redis Cluster).
  KEYS    pairs per event: dedup key, record key ({t:<tenant>}:dedup:<id>, {t:<tenant>}:event:<id>)
  ARGV[1] dedup window in milliseconds
  ARGV[2] record TTL in seconds
  ARGV    then per event, in KEYS order: meta JSON ("" = write no record), n = number of endpoint
          records, then n pairs: field ("ep:<endpointId>"), pending DeliveryRecord JSON
  returns the number of events
]]
local window, ttl = ARGV[1], ARGV[2]
local a = 3
for i = 1, #KEYS, 2 do
  redis.call('SET', KEYS[i], 'd', 'PX', window)
  local meta = ARGV[a]
  local n = tonumber(ARGV[a + 1])
  a = a + 2
  if meta ~= '' then
    local rec = KEYS[i + 1]
    redis.call('HSETNX', rec, 'meta', meta)
    for k = 1, n do
      redis.call('HSETNX', rec, ARGV[a], ARGV[a + 1])
      a = a + 2
    end
    redis.call('EXPIRE', rec, ttl)
  else
    a = a + 2 * n
  end
end
return #KEYS / 2
