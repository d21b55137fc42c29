--[[
  Gives back one event of a tenant's daily quota (the event was a duplicate, or was not accepted).
  Never creates the counter: a DECR on a missing key would leave a key without a TTL.
  KEYS[1] the day's counter ({t:<tenant>}:quota:<YYYYMMDD>)
  returns the count after the refund, or -1 when the counter is gone
]]
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
return redis.call('DECR', KEYS[1])
