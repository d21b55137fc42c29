-- Fingerprint buckets (docs/storage.md), shared by the router's dedup-reserve-1, dedup-promote-1
-- and history-index-3 (pasted in by their `--@include` line). A tenant's ids live under `base`:
-- <base>:<slot>:m is a slot's HASH (e0 = first epoch, l = last epoch, n = entries written) and
-- <base>:<slot>:<epoch>:<n> a STRING of fixed-width entries; epoch e of a slot has 2^e buckets.
--
-- Window masks (dedup ids; the event-id index has none): one table per tenant base
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
--
-- Epoch filters (the same writers): a slot those writers create keeps, in <base>:<slot>:f, a bit
-- filter per epoch past its first two that answers "may epoch e of this slot hold this fingerprint"
-- without reading its bucket (a slot that grew through a burst has 7-9 epochs, and a lookup read a
-- ~2 KiB bucket of each; a slot sized by the one before it stays within two, whose buckets a call's
-- lookups read directly as before). It is a string of 32-bit blocks. The slot's meta records
-- fb = FILTER_BITS * per / 32 (its epochs' blocks per bucket, at least 1); epoch e's region is the
-- blocks [fb * (2^e - 2^f0), fb * (2^(e+1) - 2^f0)), f0 = e0 + 2 its first filtered epoch, and an
-- entry of epoch e sets two bits of one block of it: block x mod the region's size, bits y mod 32
-- and (y / 32) mod 32 (bit 0 the block's first, as BITFIELD counts), x and y its fingerprint's
-- halves. A lookup reads one block per filtered epoch (one BITFIELD_RO GET u32 per id and epoch,
-- all of a slot's in one command). Exact by the masks' rule: a slot's filter is used only while its
-- gn (entries that set their bits) equals n, and only for epochs up to FILTER_MAX_EPOCH.

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

-- Epoch filters: bits per entry of a full epoch (two set per entry in a block of 32: a fingerprint
-- not there passes with odds of ~6 %), and the last epoch that has one (its region ends at
-- 32 * fb * 2^19 bits, 128 MiB at fb 64: far below Redis's 512 MiB strings).
local FILTER_BITS, FILTER_SKIP, FILTER_MAX_EPOCH = 8, 2, 18

-- A fingerprint's two bits in its filter block, as offsets from the block's first bit, from y, the
-- second of its halves (its block in an epoch's region comes from x, the first: see block()).
local function filter_bits(y)
  return math.fmod(y, 32), math.fmod(math.floor(y / 32), 32)
end

-- The first block of epoch e's region in the filter of a slot starting at e0, and its size in
-- blocks; nil for an epoch without one.
local function filter_region(fb, e0, e)
  if e < e0 + FILTER_SKIP or e > FILTER_MAX_EPOCH then return nil end
  return fb * (2 ^ e - 2 ^ (e0 + FILTER_SKIP)), fb * 2 ^ e
end

-- The bit offset of block x of the region that starts at block `first` and has `size` blocks.
local function block(x, first, size)
  return 32 * (first + math.fmod(x, size))
end

-- Whether a slot's mask bit and its filter may be used, from its meta (HMGET of META_FIELDS): only
-- while every entry of the slot went through them (fn == n, gn == n).
local META_FIELDS = { 'e0', 'l', 'n', 'w', 'fn', 'fb', 'gn' }
local function in_use(v)
  return v[4] and v[5] == v[3], v[6] and v[7] == v[3]
end

-- "<g>:<words>" (a slot's w) to its table's name and size.
local function mask_of(base, w)
  local g, words = string.match(w, '^(%d+):(%d+)$')
  return base .. ':w:' .. g, tonumber(words)
end

-- The slots of [now - back, now] that hold entries, newest first, each as its list of epochs; read
-- at the first lookup of a call and kept for the rest of it. The epochs of a slot whose mask bit
-- may be used carry its table (mask) and bit (bit); those whose filter may be used carry their
-- region of it (ffirst, fsize) and a map fingerprint -> whether both its bits are set (hits); the
-- slot's filter record (key, the slot's mask and bit, its filtered epochs) is in `filters`.
-- The metas are read by halving: one EXISTS over a run of slots, then an HMGET per slot if every
-- one of them is there, nothing if none is, and each half in turn otherwise. A young or quiet
-- tenant's window is mostly empty: its lookup pays a few EXISTS instead of 25 HMGETs (~3 us each
-- here, ~75 us of a one-id reserve); a full window pays one EXISTS more than before.
local windows = {}
local function live_window(base, now, back)
  local w = windows[base]
  if w and w.now == now and w.back == back then return w end
  local epochs, tables, filters = {}, {}, {}
  local function meta(s)
    return base .. ':' .. s .. ':m'
  end
  local function add_slot(s)
    local v = redis.call('HMGET', meta(s), unpack(META_FIELDS))
    if not v[1] then return end
    local pre = base .. ':' .. s .. ':'
    local mask_ok, filter_ok = in_use(v)
    local t, bitv, f
    if mask_ok and now - s < 32 then
      t = tables[v[4]]
      if not t then
        local key, words = mask_of(base, v[4])
        t = { key = key, words = words, masks = {} }
        tables[v[4]] = t
        tables[#tables + 1] = t
      end
      bitv = 2 ^ math.fmod(s, 32)
    end
    if filter_ok then
      f = { key = pre .. 'f', mask = t, bit = bitv, eps = {} }
      filters[#filters + 1] = f
    end
    local e0 = tonumber(v[1])
    for e = e0, tonumber(v[2]) do
      local ep = new_epoch(pre, e)
      if t then ep.mask, ep.bit = t, bitv end
      if f then ep.ffirst, ep.fsize = filter_region(tonumber(v[6]), e0, e) end
      if ep.ffirst then
        ep.hits = {}
        f.eps[#f.eps + 1] = ep
      end
      epochs[#epochs + 1] = ep
    end
  end
  -- Slots hi down to lo, newest first.
  local function scan(hi, lo)
    if hi - lo < 2 then
      for s = hi, lo, -1 do add_slot(s) end
      return
    end
    local keys = {}
    for s = hi, lo, -1 do keys[#keys + 1] = meta(s) end
    local n = redis.call('EXISTS', unpack(keys))
    if n == 0 then return end
    if n == #keys then
      for s = hi, lo, -1 do add_slot(s) end
      return
    end
    local mid = math.floor((hi + lo) / 2)
    scan(hi, mid + 1)
    scan(mid, lo)
  end
  -- The live slot (nearly always there) on its own, then the rest of the window.
  add_slot(now)
  scan(now - 1, now - back)
  w = { now = now, back = back, epochs = epochs, tables = tables, filters = filters }
  windows[base] = w
  return w
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
  -- Then each slot's epoch filter, for the fingerprints its mask bit (if it has one) lets through:
  -- one BITFIELD_RO per slot, one block per fingerprint and epoch (the others are no hit).
  for _, f in ipairs(w.filters) do
    local first, todo = f.eps[1], {}
    for i = 1, first and #fps or 0 do
      local fp = fps[i]
      if first.hits[fp] == nil then
        if f.mask and bit.band(f.mask.masks[fp], f.bit) == 0 then
          for _, ep in ipairs(f.eps) do ep.hits[fp] = false end
        else
          first.hits[fp] = false -- asked below (and not twice for a repeated fingerprint)
          todo[#todo + 1] = fp
        end
      end
    end
    -- At most 1,000 blocks (3,000 arguments) per command, as above.
    local per_call = math.max(1, math.floor(1000 / math.max(1, #f.eps)))
    for from = 1, #todo, per_call do
      local to = math.min(#todo, from + per_call - 1)
      local args, need, j = { f.key }, {}, 1
      for i = from, to do
        local x, y = halves(todo[i])
        local b1, b2 = filter_bits(y)
        -- The block's value with just those two bits set (the bit library's signed 32 bits).
        need[i] = bit.bor(bit.lshift(1, 31 - b1), bit.lshift(1, 31 - b2))
        for _, ep in ipairs(f.eps) do
          args[j + 1], args[j + 2], args[j + 3] = 'GET', 'u32', tostring(block(x, ep.ffirst, ep.fsize))
          j = j + 3
        end
      end
      local r, k = redis.call('BITFIELD_RO', unpack(args)), 1
      for i = from, to do
        local v = need[i]
        for _, ep in ipairs(f.eps) do
          ep.hits[todo[i]] = bit.band(r[k], v) == v
          k = k + 1
        end
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
    if (t and not t.masks[fp]) or (ep.hits and ep.hits[fp] == nil) then
      probe(base, now, back, { fp })
    end
    if (not t or bit.band(t.masks[fp], ep.bit) ~= 0) and (not ep.hits or ep.hits[fp]) then
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
-- see its own earlier entries keeps them itself.
-- `fbits` (mask words per entry, nil = no masks) puts a slot this call creates in the current
-- window mask (or a new one, see above) and gives it an epoch filter; in a slot whose mask bit is
-- in use (fn == n) every entry sets it, in one whose filter is in use (gn == n) every entry sets its
-- two filter bits; in any other slot, or from a caller without `fbits`, only n grows, so that
-- slot's mask bit and filter are never used again.
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
  -- The epoch filter too (BITFIELD grows a string as APPEND does), with the first step.
  if c == 0 then
    local f = redis.call('GET', base .. ':' .. slot .. ':f')
    if f then redis.call('SET', base .. ':' .. slot .. ':f', f, 'KEEPTTL') end
  end
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
    local v = redis.call('HMGET', meta, unpack(META_FIELDS))
    local e0 = tonumber(v[1])
    local mask_ok, filter_ok = in_use(v)
    m = { key = meta, new = not e0, added = 0, n = tonumber(v[3] or '0'), epochs = {} }
    if fbits and (not e0 or filter_ok) then
      m.fb, m.fset = tonumber(v[6]) or math.max(1, math.floor(FILTER_BITS * per / 32)), {}
    end
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
    elseif fbits and mask_ok then
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
    if m.fb then ep.ffirst, ep.fsize = filter_region(m.fb, m.e0, e) end
    m.epochs[e] = ep
  end
  local x, y
  if m.mask or ep.ffirst then x, y = halves(entry) end
  if m.mask then
    local t = m.mask
    t.set[#t.set + 1] = 32 * math.fmod(x, t.words) + m.bitoff
    t.set[#t.set + 1] = 32 * math.fmod(y, t.words) + m.bitoff
  end
  if ep.ffirst then
    local b1, b2 = filter_bits(y)
    local off, fset = block(x, ep.ffirst, ep.fsize), m.fset
    fset[#fset + 1] = off + b1
    fset[#fset + 1] = off + b2
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

-- BITFIELD `key` SET u1 <offset> 1 for every offset of `list`, 1,000 at a time. (Offsets go as
-- strings: redis.call converts a Lua number argument at ~twice the cost of tostring here.)
local function set_bits(key, list)
  for from = 1, #list, 1000 do
    local args, j = { key }, 1
    for i = from, math.min(#list, from + 999) do
      args[j + 1], args[j + 2], args[j + 3], args[j + 4] = 'SET', 'u1', tostring(list[i]), '1'
      j = j + 4
    end
    redis.call('BITFIELD', unpack(args))
  end
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
      set_bits(x.key, x.set)
      redis.call('PEXPIRE', x.key, ttl)
      redis.call('PEXPIRE', x.ptr, ttl)
    else
      -- A slot: n, and the counts of entries that went through its mask (fn) and its filter (gn)
      -- where they are in use, move together (the script is atomic, so setting them is the
      -- increment).
      local n = x.n + x.added
      local f = { 'n', n }
      local function field(k, v)
        f[#f + 1] = k
        f[#f + 1] = v
      end
      if x.new then
        field('e0', x.e0)
        field('l', x.l)
        if x.w then field('w', x.w) end
        if x.fb then field('fb', x.fb) end
      elseif x.l > x.l0 then
        field('l', x.l)
      end
      if x.w then field('fn', n) end
      if x.fb then field('gn', n) end
      redis.call('HSET', x.key, unpack(f))
      redis.call('PEXPIRE', x.key, ttl)
      -- The filter's first bits come with the call that takes the slot into its first filtered
      -- epoch (l grows), which gives it the TTL; like a bucket, it was created in this slot, so
      -- that TTL already covers the slot's end plus the window.
      if x.fb and #x.fset > 0 then
        local fk = x.pre .. 'f'
        set_bits(fk, x.fset)
        if x.new or x.l > x.l0 then redis.call('PEXPIRE', fk, ttl) end
      end
    end
  end
end
