--[[
  After a batch is durable (its BullMQ job exists): for each event of ONE tenant, promote the dedup
  marker to "done" for the full window and create the event's record (its meta, only if absent) with
  the record TTL, so a GET right after the 202 finds the event. The per-endpoint pending records are
  written by the worker at fan-out (commands/events-fanout-2n.lua). All keys share the
  tenant's hash tag (one slot on Redis Cluster).
  KEYS    two per event: dedup key, record key ({t:<tenant>}:dedup:<id>, {t:<tenant>}:ev:<id>)
  ARGV[1] dedup window in milliseconds
  ARGV[2] record TTL in seconds
  ARGV    then one per event, in KEYS order: the record's meta JSON
  returns the number of events
]]
local window, ttl = ARGV[1], ARGV[2]
for i = 1, #KEYS, 2 do
  redis.call('SET', KEYS[i], 'd', 'PX', window)
  local rec = KEYS[i + 1]
  redis.call('HSETNX', rec, 'meta', ARGV[2 + (i + 1) / 2])
  redis.call('EXPIRE', rec, ttl)
end
return #KEYS / 2
