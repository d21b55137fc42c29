-- Fingerprint buckets (docs/storage.md), shared by the router's dedup-reserve-1, dedup-promote-1
-- and history-index-3 and ingest's body-claim-1 (pasted in by their `--@include` line). A tenant's ids live under `base`:
-- <base>:<slot>:m is a slot's HASH (e0 = first epoch, l = last epoch, n = entries written) and
-- <base>:<slot>:<epoch>:<n> a STRING of fixed-width entries; epoch e of a slot has 2^e buckets.

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

-- The slots of [now - back, now] that hold entries, newest first, each as its list of epochs; read
-- (one HMGET per slot) at the first lookup of a call and kept for the rest of it.
local windows = {}
local function live_epochs(base, now, back)
  local w = windows[base]
  if w and w.now == now and w.back == back then return w.epochs end
  local epochs = {}
  for s = now, now - back, -1 do
    local v = redis.call('HMGET', base .. ':' .. s .. ':m', 'e0', 'l')
    if v[1] then
      local pre = base .. ':' .. s .. ':'
      for e = tonumber(v[1]), tonumber(v[2]) do epochs[#epochs + 1] = new_epoch(pre, e) end
    end
  end
  windows[base] = { now = now, back = back, epochs = epochs }
  return epochs
end

-- The entry of `width` bytes that starts with `fp`, in any bucket of the slots [now - back, now],
-- or nil.
local function find_entry(base, now, back, fp, h, width)
  local epochs = live_epochs(base, now, back)
  for i = 1, #epochs do
    local v = bucket(bucket_name(epochs[i], h))
    local p = v and entry_at(v, fp, width)
    if p then return string.sub(v, p, p + width - 1) end
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
local slots, buckets, order = {}, {}, {}
local function append_buffered(base, slot, entry, h, per)
  local by = slots[base]
  if not by then
    by = {}
    slots[base] = by
  end
  local m = by[slot]
  if not m then
    local meta = base .. ':' .. slot .. ':m'
    local v = redis.call('HMGET', meta, 'e0', 'l', 'n')
    local e0 = tonumber(v[1])
    m = { key = meta, new = not e0, added = 0, n = tonumber(v[3] or '0'), epochs = {} }
    if not e0 then
      local prev = tonumber(redis.call('HGET', base .. ':' .. (slot - 1) .. ':m', 'n') or '0')
      e0 = 0
      while per * 2 ^ e0 < prev and e0 < 20 do e0 = e0 + 1 end
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
    else
      if x.new then redis.call('HSET', x.key, 'e0', x.e0, 'l', x.l)
      elseif x.l > x.l0 then redis.call('HSET', x.key, 'l', x.l) end
      redis.call('HINCRBY', x.key, 'n', x.added)
      redis.call('PEXPIRE', x.key, ttl)
    end
  end
end
