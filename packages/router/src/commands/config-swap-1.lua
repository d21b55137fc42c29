--[[
  Replaces one field of a config hash only if it still holds the value the caller read, so that
  re-encrypting stored secrets never undoes an admin write made in between.
  KEYS[1] an endpoints hash ({t:<tenant>}:endpoints) or the sources hash
  ARGV[1] the field (endpoint or source id)
  ARGV[2] the value the caller read
  ARGV[3] the value to write
  returns 1 written, 0 the field changed or is gone (nothing written)
]]
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
