--[[
  Reserves the event ids of one group commit of ONE tenant (docs/storage.md, "Redis, per event").
  An id is a duplicate when its 8-byte fingerprint is in one of the tenant's slot buckets of the
  window, or when its pending marker says "d" (promoted a moment ago). Otherwise its pending marker
  is set (SET NX PX), so two processes accepting the same id at once cannot both win.
  KEYS[1] the tenant's dedup base ({t:<tenant>}:dd); buckets <base>:<slot>:<epoch>:<n>, slot meta
          <base>:<slot>:m (e0 = first epoch, l = last epoch, n = entries), markers <base>:p:<hex>
  ARGV[1] this intake's pending marker ("p:<token>")
  ARGV[2] pending TTL in milliseconds
  ARGV[3] the current slot number
  ARGV[4] how many earlier slots the window covers
  ARGV    then two per event: fingerprint (16 hex), bucket hash (unsigned 32-bit integer)
  returns one entry per event, in order: 0 = reserved by us, else the value already there
          ("d" = done/duplicate, "p:..." = another process is accepting it right now)
]]
local base, marker, ttl = KEYS[1], ARGV[1], ARGV[2]
local now, back = tonumber(ARGV[3]), tonumber(ARGV[4])

--@include fingerprints.lua

-- The window masks for every id of the call at once (one command per mask table).
local fps = {}
for i = 5, #ARGV, 2 do fps[#fps + 1] = bin(ARGV[i]) end
probe(base, now, back, fps)

local out = {}
for i = 5, #ARGV, 2 do
  local hex, h = ARGV[i], tonumber(ARGV[i + 1])
  local pk = base .. ':p:' .. hex
  local cur = redis.call('GET', pk)
  if cur then
    out[#out + 1] = cur
  elseif seen(base, now, back, fps[(i - 3) / 2], h) then
    out[#out + 1] = 'd'
  else
    local old = redis.call('SET', pk, marker, 'PX', ttl, 'NX', 'GET')
    if old then out[#out + 1] = old else out[#out + 1] = 0 end
  end
end
return out
