--[[
  Makes the ids of durable events of ONE tenant "seen" for the dedup window: appends each 8-byte
  fingerprint to its bucket of the current slot and sets the pending marker to "d" for a minute
  (the fast answer for an immediate retry, and for the worker's own promote at fan-out).
  With ARGV[5] = 1 (the worker, which may process a job long after the intake promoted it) an id is
  appended only if it is not seen yet, so a promote run twice never stores a fingerprint twice.
  KEYS[1] the tenant's dedup base ({t:<tenant>}:dd), layout as in dedup-reserve-1.lua
  ARGV[1] bucket TTL in milliseconds (the window plus one slot)
  ARGV[2] the current slot number
  ARGV[3] how many earlier slots the window covers
  ARGV[4] target entries per bucket
  ARGV[5] 1 = check before appending, 0 = the caller reserved these ids itself
  ARGV[6] window-mask words per entry of the slot before, for a new slot (0 = no mask; fingerprints.lua)
  ARGV    then two per event: fingerprint (16 hex), bucket hash (unsigned 32-bit integer)
  returns the number of fingerprints appended
]]
local base, ttl = KEYS[1], ARGV[1]
local now, back, per, check = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5] == '1'
local fbits = tonumber(ARGV[6]) > 0 and tonumber(ARGV[6]) or nil

--@include fingerprints.lua

-- With check, an id whose pending marker already says "d" (its intake's promote took, under a
-- minute ago: the common case at fan-out) is skipped without a lookup; only the others are
-- probed (the window masks for all of them at once) and looked up.
local fps, pks, done, ask = {}, {}, {}, {}
for i = 7, #ARGV, 2 do pks[#pks + 1] = base .. ':p:' .. ARGV[i] end
if check then
  -- One MGET per 500 markers (Lua's unpack has a stack limit).
  for from = 1, #pks, 500 do
    local to = math.min(#pks, from + 499)
    local v = redis.call('MGET', unpack(pks, from, to))
    for k = from, to do done[k] = v[k - from + 1] == 'd' end
  end
end
for k = 1, #pks do
  if not done[k] then
    fps[k] = bin(ARGV[5 + 2 * k])
    if check then ask[#ask + 1] = fps[k] end
  end
end
if #ask > 0 then probe(base, now, back, ask) end

local added, here = 0, {}
for i = 7, #ARGV, 2 do
  local hex, h, k = ARGV[i], tonumber(ARGV[i + 1]), (i - 5) / 2
  -- `here`: an id twice in one call is stored once (appends land at the end, unseen by seen()).
  -- Already seen (the intake's promote took): nothing to write, not even the marker again.
  local skip = done[k] or here[hex] or (check and seen(base, now, back, fps[k], h))
  if not skip then
    append_buffered(base, now, fps[k], h, per, fbits)
    added = added + 1
    here[hex] = true
    redis.call('SET', pks[k], 'd', 'PX', 60000)
  end
end
flush_appends(ttl)
return added
