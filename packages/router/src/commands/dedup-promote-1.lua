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

local fps = {}
for i = 7, #ARGV, 2 do fps[#fps + 1] = bin(ARGV[i]) end
-- The window masks for every id of the call at once, when they are looked up.
if check then probe(base, now, back, fps) end

local added, here = 0, {}
for i = 7, #ARGV, 2 do
  local hex, h = ARGV[i], tonumber(ARGV[i + 1])
  local pk = base .. ':p:' .. hex
  local fp = fps[(i - 5) / 2]
  -- `here`: an id twice in one call is stored once (appends land at the end, unseen by seen()).
  local skip = here[hex] or (check and (redis.call('GET', pk) == 'd' or seen(base, now, back, fp, h)))
  -- Already seen (the intake's promote took): nothing to write, not even the marker again.
  if not skip then
    append_buffered(base, now, fp, h, per, fbits)
    added = added + 1
    here[hex] = true
    redis.call('SET', pk, 'd', 'PX', 60000)
  end
end
flush_appends(ttl)
return added
