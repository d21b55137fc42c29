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

-- Filter parameters: 16 bits per target entry, 3 bits per entry in one 32-bit block of its region
-- (a blocked filter: one BITFIELD op per fingerprint and epoch). A full region answers "maybe" for
-- ~1 % of absent fingerprints, a half-full one for ~0.2 %. Regions past FILTER_MAX_BITS (a slot of
-- ~16 M entries at 256 per bucket) are not filtered: their buckets are always read.
local FILTER_BITS, FILTER_MAX_BITS = 16, 2 ^ 28
local POW2 = {}
for e = 0, 30 do POW2[e] = 2 ^ e end

-- Fingerprint `fp` (8 bytes)'s block in a region of `r` bits (r a multiple of 32), from its first
-- 32 bits, and three bits of that block (0 = the block's last bit), from the bytes after them.
local function probe(fp, r)
  local b1, b2, b3, b4, b5, b6, b7 = string.byte(fp, 1, 7)
  local a = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
  return math.fmod(a, r / 32), b5 % 32, b6 % 32, b7 % 32
end

-- Where epoch e's region of a slot whose filter starts at epoch e0 with f bits begins, and its size.
local function region(f, e0, e)
  return f * (POW2[e] - POW2[e0]), f * POW2[e]
end

-- Reads of one script call, kept for the rest of it: a group commit checks every id against the
-- same slot metas and mostly the same buckets, so each key is read once per call, not once per id
-- (with a 24-slot window that was 25 HMGETs per id). Writes of the call are buffered
-- (append_buffered) and land at its end, so nothing read here goes stale within the call.
local memo_live, memo_bucket = {}, {}

-- The slots of [now - back, now] that exist, newest first, each { e0, l, f (filter bits or nil),
-- prefix = '<base>:<slot>:', passed = {} }: read once per call.
local function live_slots(base, now, back)
  local k = base .. ':' .. now .. ':' .. back
  local list = memo_live[k]
  if not list then
    list = {}
    for s = now, now - back, -1 do
      local prefix = base .. ':' .. s .. ':'
      local v = redis.call('HMGET', prefix .. 'm', 'e0', 'l', 'f')
      if v[1] then
        list[#list + 1] = { e0 = tonumber(v[1]), l = tonumber(v[2]), f = tonumber(v[3]), prefix = prefix, passed = {} }
      end
    end
    memo_live[k] = list
  end
  return list
end

-- The fingerprints this call will look up (filter_want), so that a slot's filter is read once for
-- all of them.
local wanted = {}
local function filter_want(fp)
  wanted[#wanted + 1] = fp
end

-- Whether epoch e of live slot `sl` may hold fingerprint fp: true without a filter or past its
-- size, else what the slot's filter says; one BITFIELD_RO reads it for every wanted fingerprint
-- not asked yet and every filtered epoch of the slot.
local function may_hold(sl, e, fp)
  local f = sl.f
  if not f or f * POW2[e] > FILTER_MAX_BITS then return true end
  local res = sl.passed
  if res[fp] == nil then
    local fps, ops, here = {}, {}, {}
    for _, x in ipairs(wanted) do
      if res[x] == nil and not here[x] then
        here[x] = true
        fps[#fps + 1] = x
      end
    end
    if not here[fp] then fps[#fps + 1] = fp end
    local last = sl.l
    while last > sl.e0 and f * POW2[last] > FILTER_MAX_BITS do last = last - 1 end
    local masks = {}
    for _, x in ipairs(fps) do
      for ep = sl.e0, last do
        local off, r = region(f, sl.e0, ep)
        local block, b1, b2, b3 = probe(x, r)
        ops[#ops + 1] = off + block * 32
        masks[#masks + 1] = bit.bor(bit.lshift(1, b1), bit.lshift(1, b2), bit.lshift(1, b3))
      end
    end
    local words = {}
    for i = 1, #ops, 2000 do
      local args = {}
      for j = i, math.min(i + 1999, #ops) do
        args[#args + 1] = 'GET'
        args[#args + 1] = 'u32'
        args[#args + 1] = ops[j]
      end
      for _, w in ipairs(redis.call('BITFIELD_RO', sl.prefix .. 'f', unpack(args))) do words[#words + 1] = w end
    end
    local i = 1
    for _, x in ipairs(fps) do
      local t = {}
      for ep = sl.e0, last do
        t[ep] = bit.band(words[i], masks[i]) == masks[i]
        i = i + 1
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
  for _, sl in ipairs(live_slots(base, now, back)) do
    for e = sl.e0, sl.l do
      if may_hold(sl, e, fp) then
        local v = bucket(sl.prefix .. e .. ':' .. math.fmod(h, POW2[e]))
        local p = v and entry_at(v, fp, width)
        if p then return string.sub(v, p, p + width - 1) end
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
-- once, and each bucket gets ONE `APPEND` of this call's entries, by flush_appends(), which the
-- script calls before it returns. A slot starts at the epoch its predecessor's count needs (about
-- `per` entries a bucket) and moves to the next one once the entries written exceed
-- per * (2^e0 + ... + 2^e). What is appended is not visible to seen() in the same call: a script
-- that must see its own earlier entries keeps them itself (body-claim-1). With `filtered`, a slot
-- this call starts gets a filter and each entry's first 8 bytes set their bits in it (a slot started
-- without one keeps none: its older entries are not in it).
--
-- Why APPEND and not a rewrite: a `SET` of the whole bucket (~2 KiB) for each 8-byte entry was what
-- Redis wrote to its AOF and sent its replicas, ~20 µs per write on an AOF Redis (docs/storage.md,
-- "Appends and compaction"). APPEND sends only the entry, but grows a string with slack (up to 2x):
-- so while a slot is the current one its buckets keep that slack, and the calls that write the slot
-- after it rewrite its buckets exactly, COMPACT_STEP at a time (compact_step below).
local COMPACT_STEP = 32
local slots, buckets, order = {}, {}, {}
local function append_buffered(base, slot, entry, h, per, filtered)
  local meta = base .. ':' .. slot .. ':m'
  local m = slots[meta]
  if not m then
    local v = redis.call('HMGET', meta, 'e0', 'l', 'n', 'f')
    local e0 = tonumber(v[1])
    m = { key = meta, base = base, slot = slot, fkey = base .. ':' .. slot .. ':f', new = not e0, added = 0, n = tonumber(v[3] or '0'), bits = {} }
    m.f = tonumber(v[4]) or (not e0 and filtered and math.ceil(per * FILTER_BITS / 32) * 32) or nil
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
    b = {}
    buckets[k] = b
    order[#order + 1] = k
  end
  b[#b + 1] = entry
  if m.f and m.f * POW2[e] <= FILTER_MAX_BITS then
    local off, r = region(m.f, m.e0, e)
    local block, b1, b2, b3 = probe(entry, r)
    local at = off + block * 32 + 31
    m.bits[#m.bits + 1] = at - b1
    m.bits[#m.bits + 1] = at - b2
    m.bits[#m.bits + 1] = at - b3
  end
end

-- Rewrites up to COMPACT_STEP buckets of slot `slot` of `base` exactly (GET, then SET ... KEEPTTL:
-- no APPEND slack), from where the last step left off (its meta's `c`, an index over the buckets
-- of epochs e0..l in order). Called for the slot before the one being written, which no longer
-- grows.
local function compact_step(base, slot)
  local meta = base .. ':' .. slot .. ':m'
  local v = redis.call('HMGET', meta, 'e0', 'l', 'c')
  local e0, l = tonumber(v[1]), tonumber(v[2])
  if not e0 then return end
  local total = POW2[l + 1] - POW2[e0]
  local c = tonumber(v[3] or '0')
  if c >= total then return end
  local stop = math.min(total, c + COMPACT_STEP)
  for i = c, stop - 1 do
    -- index i is bucket (i - (2^e - 2^e0)) of the epoch e with 2^e - 2^e0 <= i < 2^(e+1) - 2^e0
    local e = e0
    while i >= POW2[e + 1] - POW2[e0] do e = e + 1 end
    local k = base .. ':' .. slot .. ':' .. e .. ':' .. (i - (POW2[e] - POW2[e0]))
    local cur = redis.call('GET', k)
    if cur then redis.call('SET', k, cur, 'KEEPTTL') end
  end
  redis.call('HSET', meta, 'c', stop)
end

local function flush_appends(ttl)
  local compacted = {}
  for _, x in ipairs(order) do
    if type(x) == 'string' then
      -- A bucket new in this call gets the TTL; one that exists keeps the TTL its first write gave
      -- (every write of a slot falls within the slot, and the TTL is the window plus one slot).
      local add = table.concat(buckets[x])
      if redis.call('APPEND', x, add) == #add then redis.call('PEXPIRE', x, ttl) end
    else
      if x.new and x.f then redis.call('HSET', x.key, 'e0', x.e0, 'l', x.l, 'f', x.f)
      elseif x.new then redis.call('HSET', x.key, 'e0', x.e0, 'l', x.l)
      elseif x.l > x.l0 then redis.call('HSET', x.key, 'l', x.l) end
      redis.call('HINCRBY', x.key, 'n', x.added)
      redis.call('PEXPIRE', x.key, ttl)
      for i = 1, #x.bits, 1000 do
        local args = {}
        for j = i, math.min(i + 999, #x.bits) do
          args[#args + 1] = 'SET'
          args[#args + 1] = 'u1'
          args[#args + 1] = x.bits[j]
          args[#args + 1] = 1
        end
        redis.call('BITFIELD', x.fkey, unpack(args))
      end
      if #x.bits > 0 then redis.call('PEXPIRE', x.fkey, ttl) end
      local prev = x.base .. ':' .. (x.slot - 1)
      if not compacted[prev] then
        compacted[prev] = true
        compact_step(x.base, x.slot - 1)
      end
    end
  end
end
