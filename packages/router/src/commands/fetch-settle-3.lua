--[[
  Whether a worker's queue has nothing waiting; if so, also takes back the queue's base marker
  ("0"), so the worker's next blocking wait (BZPOPMIN on the marker) sleeps until a job is added
  instead of waking at once for nothing (docs/architecture.md, "Fetching jobs"). BullMQ's
  moveToActive re-adds that marker after every job it takes, so at a calm rate a worker asked
  Redis twice more per job (a BZPOPMIN and an empty moveToActive). Atomic: a job added after this
  script adds the marker again, so no wake-up is lost. Delayed jobs' markers (member "1", scored
  by their due time) are left alone: they still wake the worker when a delayed job falls due.
  KEYS[1] the queue's wait list
  KEYS[2] its prioritized set
  KEYS[3] its marker set
  returns 1 when nothing was waiting (the base marker is gone), 0 when a job waits
]]
if redis.call('LLEN', KEYS[1]) == 0 and redis.call('ZCARD', KEYS[2]) == 0 then
  redis.call('ZREM', KEYS[3], '0')
  return 1
end
return 0
