--[[
  Claims GitHub/Shopify bodies for the first event id that brings them, for ONE tenant
  (packages/ingest/src/replay.ts; docs/storage.md, "Body claims"). A claim is a 16-byte entry: the
  8-byte fingerprint of (source, sha256(body)) then the 8-byte fingerprint of the owner's event id.
  Entries live in the same slot buckets as the id dedup's fingerprints, written by the same
  `append_buffered` (packages/shared/src/lua/fingerprints.lua, pasted in below). One call checks and inserts a whole batch atomically, so two ingest processes
  claiming one body at once cannot both own it; claims of one batch see the ones before them.
  KEYS[1] the tenant's body-claim base ({t:<tenant>}:bc): buckets <base>:<slot>:<epoch>:<n> (STRINGs
          of 16-byte entries), slot meta <base>:<slot>:m (HASH e0 = first epoch, l = last, n = entries)
  ARGV[1] bucket TTL in milliseconds (the window plus one slot)
  ARGV[2] the current slot number
  ARGV[3] how many earlier slots the window covers
  ARGV[4] target entries per bucket
  ARGV[5] window-mask words per entry of the slot before, for a new slot (0 = no mask; fingerprints.lua)
  ARGV    then three per claim: body fingerprint (16 hex), owner fingerprint (16 hex), bucket hash
          (unsigned 32-bit integer)
  returns one entry per claim, in order: 0 = ours (claimed now, or already ours: a redelivery), else
          the owner's fingerprint (16 hex)
]]
local base, ttl = KEYS[1], ARGV[1]
local now, back, per = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local fbits = tonumber(ARGV[5]) > 0 and tonumber(ARGV[5]) or nil

--@include fingerprints.lua

local function hex(s)
  return (s:gsub('.', function(c) return string.format('%02x', string.byte(c)) end))
end

-- The owner (8 bytes) of body fingerprint `fp` in any bucket of the slots [now - back, now], or nil.
local function owner(fp, h)
  local e = find_entry(base, now, back, fp, h, 16)
  return e and string.sub(e, 9, 16)
end

-- The window masks for every body of the call at once (one command per mask table).
local fps = {}
for i = 6, #ARGV, 3 do fps[#fps + 1] = bin(ARGV[i]) end
probe(base, now, back, fps)

-- Claims made by this call (its appends land at the end, where owner() does not look).
local claimed = {}
local out = {}
for i = 6, #ARGV, 3 do
  local fp, mine, h = fps[(i - 3) / 3], bin(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local o = claimed[fp] or owner(fp, h)
  if not o then
    append_buffered(base, now, fp .. mine, h, per, fbits)
    claimed[fp] = mine
    out[#out + 1] = 0
  elseif o == mine then
    out[#out + 1] = 0
  else
    out[#out + 1] = hex(o)
  end
end
flush_appends(ttl)
return out
