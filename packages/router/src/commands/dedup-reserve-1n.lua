--[[
  Reserves the dedup markers of one group commit's events of ONE tenant (all keys share the tenant's
  hash tag, so one call is one slot on Redis Cluster): SET key <marker> PX <ttl> NX GET for each.
  KEYS    dedup keys ({t:<tenant>}:dedup:<eventId>), one per event
  ARGV[1] this intake's pending marker ("p:<token>")
  ARGV[2] pending TTL in milliseconds
  returns one entry per key, in order: 0 = reserved by us, else the value already there
          ("d" = done/duplicate, "p:..." = another process is accepting it right now)
]]
local out = {}
for i = 1, #KEYS do
  local old = redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2], 'NX', 'GET')
  if old then out[i] = old else out[i] = 0 end
end
return out
