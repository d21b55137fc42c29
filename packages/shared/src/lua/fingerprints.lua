-- Fingerprint buckets (docs/storage.md), shared by the router's dedup-reserve-1, dedup-promote-1
-- and history-index-3 and ingest's body-claim-1 (pasted in by their `--@include` line). A tenant's ids live under `base`:
-- <base>:<slot>:m is a slot's HASH (e0 = first epoch, l = last epoch, n = entries written) and
-- <base>:<slot>:<epoch>:<n> a STRING of fixed-width entries; epoch e of a slot has 2^e buckets.
--
-- Window masks (dedup ids and body claims; the event-id index has none): one table per tenant base
-- answers "which slots of the window may hold this fingerprint" in one read. <base>:w:<g> is a
-- STRING of `words` 32-bit words; bit p of a word (offset 32 * word + 31 - p) belongs to the slot
-- whose number is p mod 32. An entry sets its slot's bit in two words, its fingerprint's first and
-- second 32 bits mod `words`; a lookup ANDs the two words and reads a slot's bucket only when the
-- slot's bit is set. <base>:w (HASH g = current table, words = its size) names the table new slots
-- go to; a slot created by a writer that passes `fbits` records its table in its meta (w =
-- "<g>:<words>") and starts by clearing its bit in every word (the bit of the slot 32 before it). A
-- new table, fbits * 1.25 words per entry of the slot before, is started when the current one is
-- under fbits or over 4 * fbits words per such entry. A slot whose predecessor is empty gets none.
-- The rule that keeps it exact: a slot's mask bit is used only while its fn == n, i.e. every entry
-- of the slot went through the mask (fn counts them), and only for the 32 newest slots. A slot
-- without w (written before masks existed), or one that a writer without them appended to (n grew,
-- fn did not), is read bucket by bucket as before; a false positive costs a bucket read, never an
-- answer.

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

-- The two 32-bit halves of an 8-byte fingerprint: its two words in a window mask.
local function halves(fp)
  local b1, b2, b3, b4, b5, b6, b7, b8 = string.byte(fp, 1, 8)
  return ((b1 * 256 + b2) * 256 + b3) * 256 + b4, ((b5 * 256 + b6) * 256 + b7) * 256 + b8
end

-- "<g>:<words>" (a slot's w) to its table's name and size.
local function mask_of(base, w)
  local g, words = string.match(w, '^(%d+):(%d+)$')
  return base .. ':w:' .. g, tonumber(words)
end

-- The slots of [now - back, now] that hold entries, newest first, each as its list of epochs; read
-- (one HMGET per slot) at the first lookup of a call and kept for the rest of it. The epochs of a
-- slot whose mask bit may be used carry its table (mask) and bit (bit).
local windows = {}
local function live_window(base, now, back)
  local w = windows[base]
  if w and w.now == now and w.back == back then return w end
  local epochs, tables = {}, {}
  for s = now, now - back, -1 do
    local v = redis.call('HMGET', base .. ':' .. s .. ':m', 'e0', 'l', 'n', 'w', 'fn')
    if v[1] then
      local pre = base .. ':' .. s .. ':'
      local t
      if v[4] and v[5] == v[3] and now - s < 32 then
        t = tables[v[4]]
        if not t then
          local key, words = mask_of(base, v[4])
          t = { key = key, words = words, masks = {} }
          tables[v[4]] = t
          tables[#tables + 1] = t
        end
      end
      for e = tonumber(v[1]), tonumber(v[2]) do
        local ep = new_epoch(pre, e)
        if t then ep.mask, ep.bit = t, 2 ^ math.fmod(s, 32) end
        epochs[#epochs + 1] = ep
      end
    end
  end
  w = { now = now, back = back, epochs = epochs, tables = tables }
  windows[base] = w
  return w
end

local function live_epochs(base, now, back)
  return live_window(base, now, back).epochs
end

-- Reads the window's masks for the fingerprints `fps` (8 bytes each) at once: one BITFIELD_RO per
-- table (usually one) for the whole list. find_entry then skips a slot whose bit is clear.
-- Fingerprints not read here are read by find_entry itself, one at a time.
local function probe(base, now, back, fps)
  local w = live_window(base, now, back)
  for _, t in ipairs(w.tables) do
    local todo = {}
    for i = 1, #fps do
      if not t.masks[fps[i]] then
        t.masks[fps[i]] = 0
        todo[#todo + 1] = fps[i]
      end
    end
    -- At most 500 fingerprints (3,000 arguments) per command: Lua's unpack has a stack limit.
    for from = 1, #todo, 500 do
      local to = math.min(#todo, from + 499)
      local args, j = { t.key }, 1
      for i = from, to do
        local x, y = halves(todo[i])
        args[j + 1], args[j + 2], args[j + 3] = 'GET', 'u32', '#' .. math.fmod(x, t.words)
        args[j + 4], args[j + 5], args[j + 6] = 'GET', 'u32', '#' .. math.fmod(y, t.words)
        j = j + 6
      end
      local r = redis.call('BITFIELD_RO', unpack(args))
      for i = from, to do
        local k = 2 * (i - from)
        t.masks[todo[i]] = bit.band(r[k + 1], r[k + 2])
      end
    end
  end
end

-- The entry of `width` bytes that starts with `fp`, in any bucket of the slots [now - back, now],
-- or nil. `fp` is an entry's first 8 bytes, what the masks hold: a slot whose bit is clear for it
-- is skipped.
local function find_entry(base, now, back, fp, h, width)
  local w = live_window(base, now, back)
  local epochs = w.epochs
  for i = 1, #epochs do
    local ep = epochs[i]
    local t = ep.mask
    if t and not t.masks[fp] then
      probe(base, now, back, { fp })
    end
    if not t or bit.band(t.masks[fp], ep.bit) ~= 0 then
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
-- once, and each bucket read once and written once, by flush_appends(), which the script calls
-- before it returns. A slot starts at the epoch its predecessor's count needs (about `per` entries
-- a bucket) and moves to the next one once the entries written exceed per * (2^e0 + ... + 2^e).
-- A new bucket is created with SET and the TTL; an existing one (created in this slot, so its TTL
-- already covers the slot's end plus the window) gets only the call's new entries with APPEND: the
-- AOF and the replicas receive those bytes, not the whole bucket again (~1 KiB a write). APPEND
-- leaves the string's allocation up to twice its length; the slot after it takes that slack back
-- (compact_step). What is appended is not visible to seen() in the same call: a script that must
-- see its own earlier entries keeps them itself (body-claim-1).
-- `fbits` (mask words per entry, nil = no masks) puts a slot this call creates in the current
-- window mask (or a new one, see above); in a slot whose mask bit is in use (fn == n) every entry
-- sets it; in any other slot, or from a caller without `fbits`, only n grows, so that slot's mask
-- bit is never used again.
local slots, buckets, order = {}, {}, {}
local mask_tables = {}

-- The window mask a new slot of `base` goes to, sized for `prev` entries a slot: its record
-- {key, words, g, fresh}, kept for the call.
local function mask_for(base, prev, fbits)
  local t = mask_tables[base]
  if t then return t end
  local ptr = base .. ':w'
  local v = redis.call('HMGET', ptr, 'g', 'words')
  local g, words, want = tonumber(v[1]), tonumber(v[2]), fbits * math.max(prev, 1)
  if g and words >= want and words <= 4 * want then
    t = { g = g, words = words, clears = {} }
  else
    -- A new table, under a number no live table has (the pointer may have expired first).
    g = (g or 0) + 1
    while redis.call('EXISTS', base .. ':w:' .. g) == 1 do g = g + 1 end
    t = { g = g, words = math.ceil(want * 1.25), fresh = true }
  end
  t.key, t.ptr, t.set = base .. ':w:' .. t.g, ptr, {}
  mask_tables[base] = t
  order[#order + 1] = t
  return t
end

-- Buckets of a slot that stopped taking entries are rewritten exactly, COMPACT_STEP per call of
-- the slot after it: `SET ... KEEPTTL` of the same bytes drops APPEND's spare allocation (the
-- live slot alone keeps it: about 1/25 of a window). The slot's meta keeps the cursor (`c`, the
-- buckets done, counted over its epochs in order); once it reaches the slot's bucket count, a call
-- costs one HMGET. A slot has about `entries / per` buckets and gets far more calls than that in
-- the slot after it, so the walk ends early in that slot; an unfinished one only leaves slack.
local COMPACT_STEP = 16
local compacted = {}

local function compact_step(base, slot)
  local meta = base .. ':' .. slot .. ':m'
  if compacted[meta] then return end
  compacted[meta] = true
  local v = redis.call('HMGET', meta, 'e0', 'l', 'c')
  local e0, l = tonumber(v[1]), tonumber(v[2])
  if not e0 then return end
  local c, total = tonumber(v[3] or '0'), 0
  for e = e0, l do total = total + 2 ^ e end
  if c >= total then return end
  local from, budget, first = 0, COMPACT_STEP, c
  for e = e0, l do
    local size = 2 ^ e
    if c < from + size then
      local pre = base .. ':' .. slot .. ':' .. e .. ':'
      while c < from + size and budget > 0 do
        local k = pre .. (c - from)
        local b = redis.call('GET', k)
        if b then redis.call('SET', k, b, 'KEEPTTL') end
        c, budget = c + 1, budget - 1
      end
    end
    from = from + size
    if budget == 0 then break end
  end
  if c > first then redis.call('HSET', meta, 'c', c) end
end

local function append_buffered(base, slot, entry, h, per, fbits)
  local by = slots[base]
  if not by then
    by = {}
    slots[base] = by
  end
  local m = by[slot]
  if not m then
    compact_step(base, slot - 1)
    local meta = base .. ':' .. slot .. ':m'
    local v = redis.call('HMGET', meta, 'e0', 'l', 'n', 'w', 'fn')
    local e0 = tonumber(v[1])
    m = { key = meta, new = not e0, added = 0, n = tonumber(v[3] or '0'), epochs = {} }
    if not e0 then
      local prev = tonumber(redis.call('HGET', base .. ':' .. (slot - 1) .. ':m', 'n') or '0')
      e0 = 0
      while per * 2 ^ e0 < prev and e0 < 20 do e0 = e0 + 1 end
      -- No mask for a slot whose predecessor is empty (a tenant's first slot): its table would be
      -- sized for nothing and say "maybe" for every id, at the cost of writing it.
      if fbits and prev > 0 then
        m.mask = mask_for(base, prev, fbits)
        m.w = m.mask.g .. ':' .. m.mask.words
        -- The slot's bit, cleared in every word first unless the table is new.
        if not m.mask.fresh then m.mask.clears[#m.mask.clears + 1] = math.fmod(slot, 32) end
      end
    elseif fbits and v[4] and v[5] == v[3] then
      local key, words = mask_of(base, v[4])
      m.mask, m.w = { key = key, ptr = base .. ':w', words = words, set = {} }, v[4]
      order[#order + 1] = m.mask
    end
    if m.mask then m.bitoff = 31 - math.fmod(slot, 32) end
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
  end
  if m.mask then
    local t, x, y = m.mask, halves(entry)
    t.set[#t.set + 1] = 32 * math.fmod(x, t.words) + m.bitoff
    t.set[#t.set + 1] = 32 * math.fmod(y, t.words) + m.bitoff
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
      local b = buckets[x]
      if b[1] == '' then redis.call('SET', x, table.concat(b), 'PX', ttl)
      else redis.call('APPEND', x, table.concat(b, '', 2)) end
    elseif x.set then
      -- A window mask: a new one allocated whole; a new slot's bit cleared in every word (BITOP AND
      -- with a word pattern that has only that bit clear); then every bit its entries set, in one
      -- BITFIELD per 500 entries.
      if x.fresh then
        redis.call('SET', x.key, string.rep('\0', 4 * x.words), 'PX', ttl)
        redis.call('HSET', x.ptr, 'g', x.g, 'words', x.words)
      end
      for _, plane in ipairs(x.clears or {}) do
        local off = 31 - plane
        local word = { '\255', '\255', '\255', '\255' }
        word[math.floor(off / 8) + 1] = string.char(255 - 2 ^ (7 - off % 8))
        local tmp = x.key .. ':clear'
        redis.call('SET', tmp, string.rep(table.concat(word), x.words))
        redis.call('BITOP', 'AND', x.key, x.key, tmp)
        redis.call('DEL', tmp)
      end
      for from = 1, #x.set, 1000 do
        local args, j = { x.key }, 1
        for i = from, math.min(#x.set, from + 999) do
          args[j + 1], args[j + 2], args[j + 3], args[j + 4] = 'SET', 'u1', x.set[i], 1
          j = j + 4
        end
        redis.call('BITFIELD', unpack(args))
      end
      redis.call('PEXPIRE', x.key, ttl)
      redis.call('PEXPIRE', x.ptr, ttl)
    elseif x.w then
      -- A slot whose mask bit is in use: n and fn move together (the script is atomic, so setting
      -- them is the increment).
      local n = x.n + x.added
      if x.new then redis.call('HSET', x.key, 'e0', x.e0, 'l', x.l, 'n', n, 'w', x.w, 'fn', n)
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
