--[[
  After Kafka acknowledged a flush of history records of ONE tenant (docs/storage.md): merges the
  offset ranges of its records per minute into the hour hashes of the events and attempts topics,
  and appends each logged event id to the event-id index (3-byte entries: 2 fingerprint bytes and
  the minute of the hour, in the fingerprint-bucket layout of dedup-promote-1.lua).
  KEYS[1] the tenant's event-id index base ({t:<tenant>}:ix)
  KEYS[2] the events topic's minute-hash base ({t:<tenant>}:el); hashes <base>:<hour>
  KEYS[3] the attempts topic's minute-hash base ({t:<tenant>}:al)
  ARGV[1] TTL of every key written, in milliseconds (retention plus an hour)
  ARGV[2] target entries per index bucket
  ARGV[3] how many ranges follow
  ARGV    then 7 per range: topic ("e" or "a"), hour, minute, partition, first offset, last offset, count
  ARGV    then 4 per event id: hour, minute, fingerprint (4 hex), bucket hash (unsigned 32-bit)
  returns the number of ranges merged
]]
--@include fingerprints.lua

local ttl, per, nr = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

for i = 4, 3 + nr * 7, 7 do
  local base = ARGV[i] == 'e' and KEYS[2] or KEYS[3]
  local key = base .. ':' .. ARGV[i + 1]
  local field = ARGV[i + 2] .. ':' .. ARGV[i + 3]
  local first, last, count = tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6])
  local cur = redis.call('HGET', key, field)
  if cur then
    local a, b, c = string.match(cur, '^(%d+):(%d+):(%d+)$')
    if a then
      if tonumber(a) < first then first = tonumber(a) end
      if tonumber(b) > last then last = tonumber(b) end
      count = count + tonumber(c)
    end
  end
  redis.call('HSET', key, field, string.format('%d:%d:%d', first, last, count))
  redis.call('PEXPIRE', key, ttl)
end

for i = 4 + nr * 7, #ARGV, 4 do
  local slot, minute, hex, hb = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), ARGV[i + 2], tonumber(ARGV[i + 3])
  local entry = string.char(tonumber(hex:sub(1, 2), 16), tonumber(hex:sub(3, 4), 16), minute)
  append_buffered(KEYS[1], slot, entry, hb, per)
end
flush_appends(ttl)
return nr
