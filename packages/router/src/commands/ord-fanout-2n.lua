--[[
  Fan-out of one event that carries an orderingKey: its tasks for endpoints with ordering "per-key"
  are handed to the ordered store (the store owns them once this returns), and the event is marked
  fanned out for its (tenant, key). An endpoint's next task is delivered only when every event of
  the key before it has been fanned out (the watermark `f`), so one fanned out early cannot jump
  ahead of an earlier one still in its job. All keys share the tenant's hash tag.
  KEYS    in pairs: [the event's number {t}:oev:<id>, key state {t}:ok:<key>], [key waiting {t}:okw:<key>,
          tenant due {t}:odue], then per ordered endpoint [endpoint state {t}:oe:<eid>:<key>,
          endpoint pending {t}:oq:<eid>:<key>]
  ARGV[1] 'event': the event's sequence number (assigned at acceptance, or now if that was lost);
          'tail': a new one (a replayed task, or one that entered before its endpoint was ordered)
  ARGV[2] now (ms)   ARGV[3] TTL (ms)   ARGV[4] the ordering key
  ARGV[5] how long the event's number is kept after its fan-out (ms: a re-run of its job finds it)
  ARGV    then per ordered endpoint: endpoint id, the task's wire JSON
  returns the sequence number
]]
local mode, now, ttl, okey, evttl = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5]
local ev, tk, tkw, due = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local seq
if mode == 'event' then
  seq = tonumber(redis.call('GET', ev))
  if not seq then
    seq = redis.call('HINCRBY', tk, 'n', 1)
  end
  redis.call('SET', ev, seq, 'PX', evttl)
else
  seq = redis.call('HINCRBY', tk, 'n', 1)
end
for i = 5, #KEYS, 2 do
  local st, pend = KEYS[i], KEYS[i + 1]
  local eid, wire = ARGV[i + 1], ARGV[i + 2]
  -- A re-run job brings a task that was finished already: nothing to do.
  if seq > tonumber(redis.call('HGET', st, 'last') or '0') then
    redis.call('HSETNX', st, 't:' .. seq, wire)
    redis.call('ZADD', pend, seq, seq)
    redis.call('PEXPIRE', st, ttl)
    redis.call('PEXPIRE', pend, ttl)
    -- Unless a lease holder will move on by itself, the pollers look at it now.
    if tonumber(redis.call('HGET', st, 'lu') or '0') <= now then
      redis.call('ZADD', due, now, eid .. '\n' .. okey)
    end
  end
end
local f = tonumber(redis.call('HGET', tk, 'f') or '0')
if seq == f + 1 then
  f = seq
  while redis.call('HDEL', tk, 'x:' .. (f + 1)) == 1 do f = f + 1 end
  redis.call('HSET', tk, 'f', f)
  for _, eid in ipairs(redis.call('ZRANGEBYSCORE', tkw, '-inf', f + 1)) do
    redis.call('ZREM', tkw, eid)
    redis.call('ZADD', due, now, eid .. '\n' .. okey)
  end
elseif seq > f + 1 then
  redis.call('HSET', tk, 'x:' .. seq, 1)
end
redis.call('PEXPIRE', tk, ttl)
redis.call('PEXPIRE', tkw, ttl)
redis.call('PEXPIRE', due, ttl)
return seq
