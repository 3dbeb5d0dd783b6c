-- dlock readhold: read the owner's live hold, changing nothing
-- (Driver.ReadHold). KEYS: [1] the lock hash H; ARGV[1] owner
-- Returns {token, mode, limit, ms left}, with the mode as driver.Mode
-- numbers it (0 exclusive, 1 shared, 2 semaphore), or {} if the owner
-- holds nothing live on the lock.
local H, owner = KEYS[1], ARGV[1]
local f = redis.call('HMGET', H, 'owner', 'token', 'limit', 't:' .. owner, 'm:' .. owner)
if f[1] == owner then
  -- The simple form: the hash expires with the hold.
  local left = redis.call('PTTL', H)
  if left <= 0 then
    return {}
  end
  return {tonumber(f[2]), 0, 0, left}
end
if (f[1] ~= '\0rw' and f[1] ~= '\0sem') or not f[4] then
  return {}
end
-- The general form (see scripts/common.lua): the owner is a member of the
-- holders zset, scored with the end of its lease.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local ends = redis.call('ZSCORE', H .. ':holders', owner)
if not ends or tonumber(ends) <= now then
  return {}
end
local mode, limit = 2, tonumber(f[3])
if f[1] == '\0rw' then
  mode, limit = 1, 0
  if f[5] == 'x' then
    mode = 0
  end
end
return {tonumber(f[4]), mode, limit, tonumber(ends) - now}
