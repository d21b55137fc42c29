--[[
lease — token bucket on the Redis clock that grants up to `want` tokens in one call.

KEYS[1]  the bucket: hash { t = tokens (float), ts = time of last refill (µs) }, hash-tagged per tenant
ARGV[1]  rate: tokens added per second (> 0; fractions allowed, e.g. 0.5)
ARGV[2]  burst: bucket capacity (>= 1)
ARGV[3]  want: tokens asked for (>= 0; may exceed burst, the grant never does)
ARGV[4]  optional now in µs, replacing TIME. Only tests pass it (to move the clock); production
         always uses the Redis clock so every worker agrees on time.

Returns  { granted, waitMs, tokensLeft }
         granted    integer, 0 .. min(want, floor(tokens))
         waitMs     integer ms until the bucket holds one whole token again (0 if it still does)
         tokensLeft string, the fractional tokens left after the grant
Errors   "ERR lease: ..." on a bad argument.

A missing key is a full bucket. The key expires when it would have refilled to burst anyway, so
expiry is invisible and idle keys cost no memory. If the clock moves backwards (failover to a replica
whose clock is behind) nothing is refilled and ts is kept, so the same interval is never credited
twice.
]]
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
if rate == nil or rate <= 0 or burst == nil or burst < 1 or want == nil or want < 0 then
  return redis.error_reply('ERR lease: rate must be > 0, burst >= 1, want >= 0')
end
want = math.floor(want)

local now
if ARGV[4] ~= nil and ARGV[4] ~= '' then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local state = redis.call('HMGET', KEYS[1], 't', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
end

local elapsed = now - ts
if elapsed > 0 then
  tokens = tokens + elapsed * rate / 1000000
  ts = now
end
if tokens > burst then tokens = burst end

local granted = math.floor(tokens)
if granted > want then granted = want end
tokens = tokens - granted

local waitMs = 0
if tokens < 1 then waitMs = math.ceil((1 - tokens) * 1000 / rate) end

redis.call('HSET', KEYS[1], 't', tostring(tokens), 'ts', string.format('%.0f', ts))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) * 1000 / rate) + 1000)
return { granted, waitMs, tostring(tokens) }
