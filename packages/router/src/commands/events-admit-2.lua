--[[
  Admits one event to a tenant's events API: its rate (a token bucket on the Redis clock) and its
  quota for the UTC day, in one atomic step. Nothing is spent unless both allow it, so a request
  refused for one reason spends nothing of the other.
  KEYS[1] the rate bucket ({t:<tenant>}:rate:events): hash { t = tokens (float), ts = µs of the
          last refill }; it expires once it would have refilled to burst anyway
  KEYS[2] the day's counter ({t:<tenant>}:quota:<YYYYMMDD>)
  ARGV[1] rate, tokens per second (> 0), or '' for no rate
  ARGV[2] burst (>= 1)
  ARGV[3] the quota (events per day, >= 1), or '' for no quota
  ARGV[4] ms until the counter expires (set when the counter is created)
  returns { 1, count } admitted (count: the day's events including this one, 0 without a quota)
          { 0, waitMs } over the rate: a token is due in waitMs
          { -1, 0 }     over the quota
]]
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local quota = tonumber(ARGV[3])

local tokens, ts
if rate ~= nil then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local state = redis.call('HMGET', KEYS[1], 't', 'ts')
  tokens = tonumber(state[1])
  ts = tonumber(state[2])
  if tokens == nil or ts == nil then
    tokens = burst
    ts = now
  end
  if now > ts then
    tokens = math.min(burst, tokens + (now - ts) * rate / 1000000)
    ts = now
  end
  if tokens < 1 then
    return { 0, math.ceil((1 - tokens) * 1000 / rate) }
  end
end

local count = 0
if quota ~= nil then
  count = tonumber(redis.call('GET', KEYS[2]) or '0')
  if count >= quota then
    return { -1, 0 }
  end
  count = redis.call('INCR', KEYS[2])
  if count == 1 then
    redis.call('PEXPIRE', KEYS[2], ARGV[4])
  end
end

if rate ~= nil then
  tokens = tokens - 1
  redis.call('HSET', KEYS[1], 't', tostring(tokens), 'ts', string.format('%.0f', ts))
  redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) * 1000 / rate) + 1000)
end
return { 1, count }
