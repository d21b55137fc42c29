-- Fingerprint buckets (docs/storage.md), shared by the router's dedup-reserve-1, dedup-promote-1
-- and history-index-3 and ingest's body-claim-1 (pasted in by their `--@include` line). A tenant's ids live under `base`:
-- <base>:<slot>:m is a slot's HASH (e0 = first epoch, l = last epoch, n = entries written) and
-- <base>:<slot>:<epoch>:<n> a STRING of fixed-width entries; epoch e of a slot has 2^e buckets.

-- 16 hex characters to their 8 bytes.
local function bin(hex)
  return (hex:gsub('..', function(c) return string.char(tonumber(c, 16)) end))
end

-- Whether `s` holds `needle` at an entry boundary (entries of `width` bytes).
local function has(s, needle, width)
  local i = 1
  while true do
    local p = string.find(s, needle, i, true)
    if not p then return false end
    if (p - 1) % width == 0 then return true end
    i = p + 1
  end
end

-- Whether the fingerprint (8 bytes) is in any bucket of the slots [now - back, now].
local function seen(base, now, back, fp, h)
  for s = now, now - back, -1 do
    local m = redis.call('HMGET', base .. ':' .. s .. ':m', 'e0', 'l')
    if m[1] then
      for e = tonumber(m[1]), tonumber(m[2]) do
        local v = redis.call('GET', base .. ':' .. s .. ':' .. e .. ':' .. math.fmod(h, 2 ^ e))
        if v and has(v, fp, 8) then return true end
      end
    end
  end
  return false
end

-- Appends an entry to its bucket of `slot`. A slot starts at the epoch its predecessor's count
-- needs (about `per` entries a bucket) and moves to the next one once the entries written exceed
-- per * (2^e0 + ... + 2^e). Rewritten with SET (exact allocation, no append slack); every key
-- written gets the TTL.
local function append(base, slot, entry, h, per, ttl)
  local meta = base .. ':' .. slot .. ':m'
  local e0 = tonumber(redis.call('HGET', meta, 'e0'))
  if not e0 then
    local prev = tonumber(redis.call('HGET', base .. ':' .. (slot - 1) .. ':m', 'n') or '0')
    e0 = 0
    while per * 2 ^ e0 < prev and e0 < 20 do e0 = e0 + 1 end
    redis.call('HSET', meta, 'e0', e0, 'l', e0)
  end
  local n = redis.call('HINCRBY', meta, 'n', 1)
  local e, cap = e0, per * 2 ^ e0
  while n > cap and e < 24 do
    e = e + 1
    cap = cap + per * 2 ^ e
  end
  if e > tonumber(redis.call('HGET', meta, 'l')) then redis.call('HSET', meta, 'l', e) end
  redis.call('PEXPIRE', meta, ttl)
  local k = base .. ':' .. slot .. ':' .. e .. ':' .. math.fmod(h, 2 ^ e)
  redis.call('SET', k, (redis.call('GET', k) or '') .. entry, 'PX', ttl)
end

-- append() for a script that only writes (history-index-3): each slot's hash is read once and
-- written once, and each bucket read once and rewritten once, by flush_appends(), which the
-- script calls before it returns. A script that reads buckets between appends (the dedup and
-- body-claim scripts) uses append(), which writes at once.
local slots, buckets, order = {}, {}, {}
local function append_buffered(base, slot, entry, h, per)
  local meta = base .. ':' .. slot .. ':m'
  local m = slots[meta]
  if not m then
    local v = redis.call('HMGET', meta, 'e0', 'l', 'n')
    local e0 = tonumber(v[1])
    m = { key = meta, new = not e0, added = 0, n = tonumber(v[3] or '0') }
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
    b = { redis.call('GET', k) or '' }
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
