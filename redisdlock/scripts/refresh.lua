-- dlock refresh: reset the lease if, and only if, the owner holds the lock.
-- KEYS: [1] the lock hash H (the other keys are named after it, as in
-- acquire.lua); ARGV[1] owner, ARGV[2] lease in milliseconds
-- Returns 1 if refreshed, 0 if the owner does not hold the lock.
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner == ARGV[1] then
  -- The fast path: the holder of the simple form.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not owner or string.byte(owner) ~= 0 then
  return 0
end

local H = KEYS[1]
local F, Z, W, E = H .. ':fence', H .. ':holders', H .. ':queue', H .. ':qexp'
-- @common
local held = redis.call('ZSCORE', Z, ARGV[1])
if held and tonumber(held) > now then
  redis.call('ZADD', Z, int(now + tonumber(ARGV[2])), ARGV[1])
  settle()
  return 1
end
return 0
