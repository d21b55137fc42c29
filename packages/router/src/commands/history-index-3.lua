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
  ARGV    then one id run per argument, binary: the hour since the epoch (4 bytes, big-endian) and
          the minute of the hour (1 byte), then 6 bytes per event id: its index fingerprint (2)
          and its bucket hash (unsigned 32-bit, big-endian). One argument for hundreds of ids: 4
          arguments per id were most of what parsing a call cost.
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

for i = 4 + nr * 7, #ARGV do
  local run = ARGV[i]
  local h1, h2, h3, h4, minute = string.byte(run, 1, 5)
  local slot, m = ((h1 * 256 + h2) * 256 + h3) * 256 + h4, string.char(minute)
  for j = 6, #run - 5, 6 do
    local b1, b2, b3, b4 = string.byte(run, j + 2, j + 5)
    append_buffered(KEYS[1], slot, string.sub(run, j, j + 1) .. m, ((b1 * 256 + b2) * 256 + b3) * 256 + b4, per)
  end
end
flush_appends(ttl)
return nr
