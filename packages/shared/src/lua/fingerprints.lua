-- Fingerprint buckets (docs/storage.md), shared by the router's dedup-reserve-1, dedup-promote-1
-- and history-index-3 and ingest's body-claim-1 (pasted in by their `--@include` line). A tenant's ids live under `base`:
-- <base>:<slot>:m is a slot's HASH (e0 = first epoch, l = last epoch, n = entries written) and
-- <base>:<slot>:<epoch>:<n> a STRING of fixed-width entries; epoch e of a slot has 2^e buckets.
--
-- Membership filters (dedup ids and body claims; the event-id index has none): a slot created by a
-- writer that passes `fbits` also has f = filter bits per bucket, fe = its first filtered epoch and
-- fn = entries whose filter bits were set, and each epoch e >= fe a STRING <base>:<slot>:<epoch>:f
-- of f * 2^e bits, allocated whole when the epoch starts. An entry sets two bits, its fingerprint's
-- first and second 32 bits mod the filter's size; a lookup reads an epoch's bucket only when both
-- are set. The rule that keeps it exact: a slot's filters are used only while fn == n, i.e. every
-- entry of the slot went through them. A slot without f (written before filters existed), or one
-- that a writer without filters appended to (n grew, fn did not), is read bucket by bucket as
-- before; a filter's false positive costs one bucket read, never an answer.

-- 16 hex characters to their 8 bytes (two tonumber calls, not one closure call per byte).
local function bin(hex)
  local a, b = tonumber(string.sub(hex, 1, 8), 16), tonumber(string.sub(hex, 9, 16), 16)
  return string.char(
    math.floor(a / 16777216), math.floor(a / 65536) % 256, math.floor(a / 256) % 256, a % 256,
    math.floor(b / 16777216), math.floor(b / 65536) % 256, math.floor(b / 256) % 256, b % 256)
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

-- Reads of one script call, kept for the rest of it: a group commit checks every id against the
-- same slot metas and mostly the same buckets, so each key is read once per call, not once per id
-- (with a 24-slot window that was 25 HMGETs per id). Writes of the call are buffered
-- (append_buffered) and land at its end, so nothing read here goes stale within the call.
local memo_bucket = {}

-- Bucket `key`'s entries, or false when it does not exist.
local function bucket(key)
  local v = memo_bucket[key]
  if v == nil then
    v = redis.call('GET', key) or false
    memo_bucket[key] = v
  end
  return v
end

-- One epoch of a slot: its bucket count and the names of the buckets used so far in this call
-- (building `<base>:<slot>:<epoch>:<n>` for every lookup was most of a lookup's time).
local function new_epoch(pre, e)
  return { e = e, mod = 2 ^ e, pre = pre .. e .. ':', names = {} }
end

local function bucket_name(ep, h)
  local n = math.fmod(h, ep.mod)
  local k = ep.names[n]
  if not k then
    k = ep.pre .. n
    ep.names[n] = k
  end
  return k
end

-- The two 32-bit halves of an 8-byte fingerprint: where it sits in a filter.
local function halves(fp)
  local b1, b2, b3, b4, b5, b6, b7, b8 = string.byte(fp, 1, 8)
  return ((b1 * 256 + b2) * 256 + b3) * 256 + b4, ((b5 * 256 + b6) * 256 + b7) * 256 + b8
end

-- The slots of [now - back, now] that hold entries, newest first, each as its list of epochs; read
-- (one HMGET per slot) at the first lookup of a call and kept for the rest of it. An epoch whose
-- filter may be used carries its key (fkey) and size in bits (fm).
local windows = {}
local function live_window(base, now, back)
  local w = windows[base]
  if w and w.now == now and w.back == back then return w end
  local epochs = {}
  for s = now, now - back, -1 do
    local v = redis.call('HMGET', base .. ':' .. s .. ':m', 'e0', 'l', 'n', 'f', 'fe', 'fn')
    if v[1] then
      local pre = base .. ':' .. s .. ':'
      local f = v[4] and v[6] == v[3] and tonumber(v[4])
      local fe = f and tonumber(v[5])
      for e = tonumber(v[1]), tonumber(v[2]) do
        local ep = new_epoch(pre, e)
        if f and e >= fe then
          ep.fkey, ep.fm, ep.pass = ep.pre .. 'f', f * 2 ^ e, {}
        end
        epochs[#epochs + 1] = ep
      end
    end
  end
  w = { now = now, back = back, epochs = epochs, probed = {} }
  windows[base] = w
  return w
end

local function live_epochs(base, now, back)
  return live_window(base, now, back).epochs
end

-- Reads the filters of the window for the fingerprints `fps` (8 bytes each) at once: one BITFIELD_RO
-- per filtered epoch for the whole list (a call's ids share the window's slots). find_entry then
-- skips an epoch whose filter rules a fingerprint out. Fingerprints not probed here are probed by
-- find_entry itself, one at a time.
local function probe(base, now, back, fps)
  local w = live_window(base, now, back)
  local todo, ab = {}, {}
  for i = 1, #fps do
    local fp = fps[i]
    if not w.probed[fp] and not ab[fp] then
      local a, b = halves(fp)
      ab[fp] = { a, b }
      todo[#todo + 1] = fp
    end
  end
  if #todo == 0 then return end
  for _, ep in ipairs(w.epochs) do
    if ep.fkey then
      -- At most 500 fingerprints (3,000 arguments) per command: Lua's unpack has a stack limit.
      for from = 1, #todo, 500 do
        local to = math.min(#todo, from + 499)
        local args, j = { ep.fkey }, 1
        for i = from, to do
          local x = ab[todo[i]]
          args[j + 1], args[j + 2], args[j + 3] = 'GET', 'u1', math.fmod(x[1], ep.fm)
          args[j + 4], args[j + 5], args[j + 6] = 'GET', 'u1', math.fmod(x[2], ep.fm)
          j = j + 6
        end
        local r = redis.call('BITFIELD_RO', unpack(args))
        for i = from, to do
          local k = 2 * (i - from)
          if r[k + 1] == 1 and r[k + 2] == 1 then ep.pass[todo[i]] = true end
        end
      end
    end
  end
  for i = 1, #todo do w.probed[todo[i]] = true end
end

-- The entry of `width` bytes that starts with `fp`, in any bucket of the slots [now - back, now],
-- or nil.
-- `fp` is an entry's first 8 bytes, what the filters hold: an epoch whose filter rules it out is
-- skipped.
local function find_entry(base, now, back, fp, h, width)
  local w = live_window(base, now, back)
  if not w.probed[fp] then probe(base, now, back, { fp }) end
  local epochs = w.epochs
  for i = 1, #epochs do
    local ep = epochs[i]
    if not ep.fkey or ep.pass[fp] then
      local v = bucket(bucket_name(ep, h))
      local p = v and entry_at(v, fp, width)
      if p then return string.sub(v, p, p + width - 1) end
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
-- entries keeps them itself (body-claim-1).
-- `fbits` (filter bits per entry a bucket is sized for; nil = no filters) gives a slot this call
-- creates its filters: f = fbits * per bits per bucket, from epoch max(e0, FILTER_FROM). In a slot
-- whose filters are in use (fn == n) every entry sets its two bits; in any other slot, or from a
-- caller without `fbits`, only n grows, so that slot's filters are never used again.
local FILTER_FROM = 1
local slots, buckets, order = {}, {}, {}
local function append_buffered(base, slot, entry, h, per, fbits)
  local by = slots[base]
  if not by then
    by = {}
    slots[base] = by
  end
  local m = by[slot]
  if not m then
    local meta = base .. ':' .. slot .. ':m'
    local v = redis.call('HMGET', meta, 'e0', 'l', 'n', 'f', 'fe', 'fn')
    local e0 = tonumber(v[1])
    m = { key = meta, new = not e0, added = 0, n = tonumber(v[3] or '0'), epochs = {} }
    if not e0 then
      local prev = tonumber(redis.call('HGET', base .. ':' .. (slot - 1) .. ':m', 'n') or '0')
      e0 = 0
      while per * 2 ^ e0 < prev and e0 < 20 do e0 = e0 + 1 end
      if fbits then m.f, m.fe = fbits * per, math.max(e0, FILTER_FROM) end
    elseif fbits and v[4] and v[6] == v[3] then
      m.f, m.fe = tonumber(v[4]), tonumber(v[5])
    end
    m.e0, m.l, m.l0 = e0, tonumber(v[2]) or e0, tonumber(v[2]) or e0
    m.pre = base .. ':' .. slot .. ':'
    by[slot] = m
    order[#order + 1] = m
  end
  m.added = m.added + 1
  local e, cap = m.e0, per * 2 ^ m.e0
  while m.n + m.added > cap and e < 24 do
    e = e + 1
    cap = cap + per * 2 ^ e
  end
  if e > m.l then m.l = e end
  local ep = m.epochs[e]
  if not ep then
    ep = new_epoch(m.pre, e)
    m.epochs[e] = ep
    if m.f and e >= m.fe then
      -- An epoch's filter is new when its epoch is: allocated whole at the flush.
      ep.fkey, ep.fm, ep.set, ep.fresh = ep.pre .. 'f', m.f * 2 ^ e, {}, m.new or e > m.l0
      order[#order + 1] = ep
    end
  end
  if ep.set then
    local a, b = halves(entry)
    ep.set[#ep.set + 1] = math.fmod(a, ep.fm)
    ep.set[#ep.set + 1] = math.fmod(b, ep.fm)
  end
  local k = bucket_name(ep, h)
  local b = buckets[k]
  if not b then
    b = { bucket(k) or '' }
    buckets[k] = b
    order[#order + 1] = k
  end
  b[#b + 1] = entry
end

local function flush_appends(ttl)
  for _, x in ipairs(order) do
    if type(x) == 'string' then
      redis.call('SET', x, table.concat(buckets[x]), 'PX', ttl)
    elseif x.set then
      -- An epoch's filter: every bit its entries set, in one BITFIELD per 500 entries.
      if x.fresh then redis.call('SET', x.fkey, string.rep('\0', math.ceil(x.fm / 8)), 'PX', ttl) end
      for from = 1, #x.set, 1000 do
        local args, j = { x.fkey }, 1
        for i = from, math.min(#x.set, from + 999) do
          args[j + 1], args[j + 2], args[j + 3], args[j + 4] = 'SET', 'u1', x.set[i], 1
          j = j + 4
        end
        redis.call('BITFIELD', unpack(args))
      end
      if not x.fresh then redis.call('PEXPIRE', x.fkey, ttl) end
    elseif x.f then
      -- A slot whose filters are in use: n and fn move together (the script is atomic, so setting
      -- them is the increment).
      local n = x.n + x.added
      if x.new then redis.call('HSET', x.key, 'e0', x.e0, 'l', x.l, 'n', n, 'f', x.f, 'fe', x.fe, 'fn', n)
      elseif x.l > x.l0 then redis.call('HSET', x.key, 'l', x.l, 'n', n, 'fn', n)
      else redis.call('HSET', x.key, 'n', n, 'fn', n) end
      redis.call('PEXPIRE', x.key, ttl)
    else
      if x.new then redis.call('HSET', x.key, 'e0', x.e0, 'l', x.l)
      elseif x.l > x.l0 then redis.call('HSET', x.key, 'l', x.l) end
      redis.call('HINCRBY', x.key, 'n', x.added)
      redis.call('PEXPIRE', x.key, ttl)
    end
  end
end
