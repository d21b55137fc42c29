--[[
  Drops a "pending" dedup marker, but only if it is still ours: the batch it reserved did not become
  durable, so the id must be free for the client's retry.
  KEYS[1] the id's pending marker ({t:<tenant>}:dd:p:<fingerprint hex>)
  ARGV[1] the marker value this intake set ("p:<token>")
  returns 1 when deleted, 0 when the marker is gone or belongs to someone else
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
