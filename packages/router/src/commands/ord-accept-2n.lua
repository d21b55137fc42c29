--[[
  At acceptance (the intake, after the batch is durable): gives each event that carries an
  orderingKey its sequence number within (tenant, key), once — the order keyed events are
  delivered in to endpoints with ordering "per-key". A number is assigned only once the event's job
  exists, so every number belongs to an event that will be fanned out (no gaps to wait for). The
  worker assigns it at fan-out if this was lost (commands/ord-fanout-2n.lua). All keys share the
  tenant's hash tag.
  KEYS    two per event: its number ({t:<tenant>}:oev:<id>), key state ({t:<tenant>}:ok:<key>)
  ARGV[1] TTL of the key state, milliseconds
  ARGV[2] TTL of an event's number, milliseconds (a re-run of its job must find it)
  returns the number of events
]]
local ttl, evttl = ARGV[1], ARGV[2]
for i = 1, #KEYS, 2 do
  local ev, tk = KEYS[i], KEYS[i + 1]
  if redis.call('EXISTS', ev) == 0 then
    redis.call('SET', ev, redis.call('HINCRBY', tk, 'n', 1), 'PX', evttl)
  end
  redis.call('PEXPIRE', tk, ttl)
end
return #KEYS / 2
