--[[
  Gives a tenant's fan-out config a new revision after a write of the tenant or its endpoints
  (docs/architecture.md, "Config revisions"). Only a tenant that exists has one: a write that raced
  the tenant's deletion leaves no revision behind (the tenant's DEL is its owner).
  KEYS[1] the tenant's record
  KEYS[2] the tenant's config revision
  ARGV[1] the new revision (a random token)
  returns 1 when set, 0 when the tenant is gone
]]
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('SET', KEYS[2], ARGV[1])
  return 1
end
redis.call('DEL', KEYS[2])
return 0
