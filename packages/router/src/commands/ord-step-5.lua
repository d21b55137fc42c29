--[[
  One step of an (endpoint, key)'s ordered delivery. At most one task of it is leased (in a
  worker's memory) at a time, always the lowest pending sequence number, and only once every
  earlier event of the key was fanned out; the store keeps the task (its owner) until `done`.
  All keys share the tenant's hash tag.
  KEYS[1] endpoint state {t}:oe:<eid>:<key>  (last, lt/lu/ls = lease token/until/seq, nb, t:<seq>)
  KEYS[2] endpoint pending {t}:oq:<eid>:<key>  KEYS[3] key state {t}:ok:<key>
  KEYS[4] key waiting {t}:okw:<key>            KEYS[5] tenant due {t}:odue
  ARGV[1] op: lease | done | backoff | release | renew
  ARGV[2] now (ms)  ARGV[3] TTL (ms)  ARGV[4] due member ("<eid>\n<key>")  ARGV[5] endpoint id
  ARGV[6] lease token  ARGV[7] lease duration (ms)
  ARGV[8] sequence number the caller holds (done, backoff, release, renew)
  ARGV[9] delay (ms: backoff, release)  ARGV[10] the task's wire JSON for its next attempt (backoff)
  returns {'leased', seq, wire, until} the head is leased to the token (op lease, or done: the next)
          {'renewed', until} | {'busy', until} another lease holds it | {'later', at} the head waits
          {'waiting'} an earlier event of the key is not fanned out yet | {'idle'} nothing pending
          {'stale'} the caller no longer holds that lease: nothing changed
]]
local st, pend, tk, tkw, due = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local op, now, ttl, member, eid = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5]
local token, leaseMs = ARGV[6], tonumber(ARGV[7])

local function keep()
  redis.call('PEXPIRE', st, ttl)
  redis.call('PEXPIRE', pend, ttl)
  redis.call('PEXPIRE', due, ttl)
end

if op ~= 'lease' then
  local seq = tonumber(ARGV[8])
  if redis.call('HGET', st, 'lt') ~= token or tonumber(redis.call('HGET', st, 'ls') or '-1') ~= seq then
    return { 'stale' }
  end
  if op == 'renew' then
    local lu = now + leaseMs
    redis.call('HSET', st, 'lu', lu)
    redis.call('ZADD', due, lu, member)
    keep()
    return { 'renewed', tostring(lu) }
  end
  redis.call('HDEL', st, 'lt', 'lu', 'ls')
  if op == 'done' then
    if seq > tonumber(redis.call('HGET', st, 'last') or '0') then redis.call('HSET', st, 'last', seq) end
    redis.call('ZREM', pend, seq)
    redis.call('HDEL', st, 't:' .. seq, 'nb')
  else
    local at = now + tonumber(ARGV[9])
    if op == 'backoff' then redis.call('HSET', st, 't:' .. seq, ARGV[10]) end
    redis.call('HSET', st, 'nb', at)
    redis.call('ZADD', due, at, member)
    keep()
    return { 'later', tostring(at) }
  end
end

-- Lease the head (op lease, or the next one after done).
local lu = tonumber(redis.call('HGET', st, 'lu') or '0')
if redis.call('HEXISTS', st, 'lt') == 1 and lu > now then
  redis.call('ZADD', due, lu, member)
  return { 'busy', tostring(lu) }
end
local head, wire
while true do
  head = redis.call('ZRANGE', pend, 0, 0)[1]
  if not head then
    redis.call('HDEL', st, 'lt', 'lu', 'ls', 'nb')
    redis.call('ZREM', due, member)
    redis.call('PEXPIRE', st, ttl)
    return { 'idle' }
  end
  head = tonumber(head)
  wire = redis.call('HGET', st, 't:' .. head)
  if wire then break end
  redis.call('ZREM', pend, head) -- a number without its task cannot be delivered (never written so)
end
if head - 1 > tonumber(redis.call('HGET', tk, 'f') or '0') then
  redis.call('ZADD', tkw, head, eid)
  redis.call('PEXPIRE', tkw, ttl)
  redis.call('ZREM', due, member)
  return { 'waiting' }
end
local nb = tonumber(redis.call('HGET', st, 'nb') or '0')
if nb > now then
  redis.call('ZADD', due, nb, member)
  return { 'later', tostring(nb) }
end
local untilMs = now + leaseMs
redis.call('HSET', st, 'lt', token, 'lu', untilMs, 'ls', head)
redis.call('HDEL', st, 'nb')
redis.call('ZADD', due, untilMs, member)
keep()
return { 'leased', head, wire, tostring(untilMs) }
