--[[
  Marks an intake job whose events' dedup ids its intake has promoted (docs/architecture.md, "Dedup
  at the door"): the job hash's `progress` field, which BullMQ hands the worker with the job, becomes
  1, and the worker skips its redo of the promote. Only a job that still exists is marked: a job
  already finished (its hash removed) is not created again as a stray key.
  KEYS[1] the job's hash
  returns 1 when marked, 0 when the job is gone
]]
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'progress', '1')
  return 1
end
return 0
