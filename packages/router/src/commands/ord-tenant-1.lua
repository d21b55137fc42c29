--[[
  Moves a tenant's entry in the global index of tenants with ordered work, only if nobody moved
  it since the caller read it (a newer, earlier time set meanwhile is kept).
  KEYS[1] ordered tenants ZSET   ARGV[1] tenant id   ARGV[2] the score the caller read
  ARGV[3] the new score, or '' to remove the tenant
  returns 1 if changed, 0 if the score had moved
]]
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not cur or tonumber(cur) ~= tonumber(ARGV[2]) then return 0 end
if ARGV[3] == '' then redis.call('ZREM', KEYS[1], ARGV[1]) else redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1]) end
return 1
