-- Fingerprint buckets (docs/storage.md), shared by the router's dedup-reserve-1, dedup-promote-1
-- and history-index-3 and ingest's body-claim-1 (pasted in by their `--@include` line). A tenant's ids live under `base`:
-- <base>:<slot>:m is a slot's HASH (e0 = first epoch, l = last epoch, n = entries written, f = the
-- filter's bits for epoch 0, when the slot has one) and <base>:<slot>:<epoch>:<n> a STRING of
-- fixed-width entries; epoch e of a slot has 2^e buckets. <base>:<slot>:f is the slot's filter
-- (docs/storage.md, "Filters"): a bitmap with one region per epoch, f * 2^e bits for epoch e
-- (FILTER_BITS per target entry), in which each entry sets FILTER_K bits of its fingerprint. A
-- lookup reads a bucket only where the filter says "maybe", and one BITFIELD answers that for every
-- fingerprint of the call and every epoch of the slot.

-- 16 hex characters to their 8 bytes.
local function bin(hex)
  return (hex:gsub('..', function(c) return string.char(tonumber(c, 16)) end))
end

-- Where `s` holds `needle` at an entry boundary (entries of `width` bytes), or nil.
local function entry_at(s, needle, width)
  local i = 1
  while true do
    local p = string.find(s, needle, i, true)
    if not p then return nil end
    if (p - 1) % width == 0 then return p end
    i = p + 1
  end
end

-- Filter parameters: 16 bits per target entry, 3 probes (a full region answers "maybe" for ~0.5 %
-- of absent fingerprints, a half-full one for ~0.08 %). Regions past FILTER_MAX_BITS (a slot of
-- ~16 M entries at 256 per bucket) are not filtered: their buckets are always read.
local FILTER_BITS, FILTER_K, FILTER_MAX_BITS = 16, 3, 2 ^ 28

-- The FILTER_K bit offsets of fingerprint `fp` (8 bytes) in a region of `r` bits starting at `off`
-- (double hashing over the fingerprint's two 32-bit halves).
local function probes(fp, off, r)
  local b1, b2, b3, b4, b5, b6, b7, b8 = string.byte(fp, 1, 8)
  local a = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
  local b = ((b5 * 256 + b6) * 256 + b7) * 256 + b8
  if b % 2 == 0 then b = b + 1 end
  local out = {}
  for i = 0, FILTER_K - 1 do out[i + 1] = off + math.fmod(a + i * b, r) end
  return out
end

-- BITFIELD (or BITFIELD_RO) of one op per offset (GET u1 o, or SET u1 o 1), in calls of at most
-- 1,000 offsets (Lua's unpack limit); the replies in order.
local function bitfield(cmd, key, offsets)
  local out = {}
  for i = 1, #offsets, 1000 do
    local args = {}
    for j = i, math.min(i + 999, #offsets) do
      args[#args + 1] = cmd == 'BITFIELD' and 'SET' or 'GET'
      args[#args + 1] = 'u1'
      args[#args + 1] = offsets[j]
      if cmd == 'BITFIELD' then args[#args + 1] = 1 end
    end
    for _, v in ipairs(redis.call(cmd, key, unpack(args))) do out[#out + 1] = v end
  end
  return out
end

-- Where epoch e's region of a slot whose filter starts at epoch e0 with f bits begins, and its size.
local function region(f, e0, e)
  return f * (2 ^ e - 2 ^ e0), f * 2 ^ e
end

-- Reads of one script call, kept for the rest of it: a group commit checks every id against the
-- same slot metas and mostly the same buckets, so each key is read once per call, not once per id
-- (with a 24-slot window that was 25 HMGETs per id). Writes of the call are buffered
-- (append_buffered) and land at its end, so nothing read here goes stale within the call.
local memo_meta, memo_bucket = {}, {}

-- The epochs {first, last, filter bits} slot `s` has, or false when it has none.
local function slot_epochs(base, s)
  local key = base .. ':' .. s .. ':m'
  local m = memo_meta[key]
  if m == nil then
    local v = redis.call('HMGET', key, 'e0', 'l', 'f')
    m = v[1] and { tonumber(v[1]), tonumber(v[2]), tonumber(v[3]) } or false
    memo_meta[key] = m
  end
  return m
end

-- The fingerprints this call will look up (filter_want), so that a slot's filter is read once for
-- all of them; and per slot, which (fingerprint, epoch) the filter passed.
local wanted, passed = {}, {}
local function filter_want(fp)
  wanted[#wanted + 1] = fp
end

-- Whether epoch e of slot s (meta m) may hold fingerprint fp: true without a filter or past its
-- size, else what the slot's filter says, read with one BITFIELD for every wanted fingerprint.
local function may_hold(base, s, m, e, fp)
  local f = m[3]
  if not f or f * 2 ^ e > FILTER_MAX_BITS then return true end
  local key = base .. ':' .. s .. ':f'
  local res = passed[key]
  if not res then
    res = {}
    passed[key] = res
  end
  if res[fp] == nil then
    local fps, offsets, seen_here = {}, {}, {}
    for _, x in ipairs(wanted) do
      if res[x] == nil and not seen_here[x] then
        seen_here[x] = true
        fps[#fps + 1] = x
      end
    end
    if not seen_here[fp] then fps[#fps + 1] = fp end
    local last = m[2]
    while last > m[1] and f * 2 ^ last > FILTER_MAX_BITS do last = last - 1 end
    for _, x in ipairs(fps) do
      for ep = m[1], last do
        local off, r = region(f, m[1], ep)
        for _, o in ipairs(probes(x, off, r)) do offsets[#offsets + 1] = o end
      end
    end
    local bits = bitfield('BITFIELD_RO', key, offsets)
    local i = 1
    for _, x in ipairs(fps) do
      local t = {}
      for ep = m[1], last do
        local all = true
        for _ = 1, FILTER_K do
          if bits[i] == 0 then all = false end
          i = i + 1
        end
        t[ep] = all
      end
      res[x] = t
    end
  end
  return res[fp][e] ~= false
end

-- Bucket `key`'s entries, or false when it does not exist.
local function bucket(key)
  local v = memo_bucket[key]
  if v == nil then
    v = redis.call('GET', key) or false
    memo_bucket[key] = v
  end
  return v
end

-- The entry of `width` bytes that starts with `fp`, in any bucket of the slots [now - back, now],
-- or nil.
local function find_entry(base, now, back, fp, h, width)
  for s = now, now - back, -1 do
    local m = slot_epochs(base, s)
    if m then
      for e = m[1], m[2] do
        if may_hold(base, s, m, e, fp) then
          local v = bucket(base .. ':' .. s .. ':' .. e .. ':' .. math.fmod(h, 2 ^ e))
          local p = v and entry_at(v, fp, width)
          if p then return string.sub(v, p, p + width - 1) end
        end
      end
    end
  end
  return nil
end

-- Whether the fingerprint (8 bytes) is in any bucket of the slots [now - back, now].
local function seen(base, now, back, fp, h)
  return find_entry(base, now, back, fp, h, 8) ~= nil
end

-- Appends an entry to its bucket of `slot`, buffered: each slot's hash is read once and written
-- once, and each bucket read once and rewritten once, by flush_appends(), which the script calls
-- before it returns. A slot starts at the epoch its predecessor's count needs (about `per` entries
-- a bucket) and moves to the next one once the entries written exceed per * (2^e0 + ... + 2^e).
-- Rewritten with SET (exact allocation, no append slack); every key written gets the TTL. What is
-- appended is not visible to seen() in the same call: a script that must see its own earlier
-- entries keeps them itself (body-claim-1). With `filtered`, a slot this call starts gets a filter
-- and each entry's first 8 bytes set their bits in it (a slot started without one keeps none: its
-- older entries are not in it).
local slots, buckets, order = {}, {}, {}
local function append_buffered(base, slot, entry, h, per, filtered)
  local meta = base .. ':' .. slot .. ':m'
  local m = slots[meta]
  if not m then
    local v = redis.call('HMGET', meta, 'e0', 'l', 'n', 'f')
    local e0 = tonumber(v[1])
    m = { key = meta, fkey = base .. ':' .. slot .. ':f', new = not e0, added = 0, n = tonumber(v[3] or '0'), bits = {} }
    m.f = tonumber(v[4]) or (not e0 and filtered and per * FILTER_BITS) or nil
    if not e0 then
      local prev = tonumber(redis.call('HGET', base .. ':' .. (slot - 1) .. ':m', 'n') or '0')
      e0 = 0
      while per * 2 ^ e0 < prev and e0 < 20 do e0 = e0 + 1 end
    end
    m.e0, m.l, m.l0 = e0, tonumber(v[2]) or e0, tonumber(v[2]) or e0
    slots[meta] = m
    order[#order + 1] = m
  end
  m.added = m.added + 1
  local e, cap = m.e0, per * 2 ^ m.e0
  while m.n + m.added > cap and e < 24 do
    e = e + 1
    cap = cap + per * 2 ^ e
  end
  if e > m.l then m.l = e end
  local k = base .. ':' .. slot .. ':' .. e .. ':' .. math.fmod(h, 2 ^ e)
  local b = buckets[k]
  if not b then
    b = { bucket(k) or '' }
    buckets[k] = b
    order[#order + 1] = k
  end
  b[#b + 1] = entry
  if m.f and m.f * 2 ^ e <= FILTER_MAX_BITS then
    local off, r = region(m.f, m.e0, e)
    for _, o in ipairs(probes(entry, off, r)) do m.bits[#m.bits + 1] = o end
  end
end

local function flush_appends(ttl)
  for _, x in ipairs(order) do
    if type(x) == 'string' then
      redis.call('SET', x, table.concat(buckets[x]), 'PX', ttl)
    else
      if x.new and x.f then redis.call('HSET', x.key, 'e0', x.e0, 'l', x.l, 'f', x.f)
      elseif x.new then redis.call('HSET', x.key, 'e0', x.e0, 'l', x.l)
      elseif x.l > x.l0 then redis.call('HSET', x.key, 'l', x.l) end
      redis.call('HINCRBY', x.key, 'n', x.added)
      redis.call('PEXPIRE', x.key, ttl)
      if #x.bits > 0 then
        bitfield('BITFIELD', x.fkey, x.bits)
        redis.call('PEXPIRE', x.fkey, ttl)
      end
    end
  end
end
