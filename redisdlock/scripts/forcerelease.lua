-- dlock force release: delete the lock, its holders and its queue, whoever
-- holds it, and wake the waiters.
-- KEYS: H, F, Z, W, E as for acquire; ARGV[1] the release channel
-- Returns the number of live holds removed.
local H, F, Z, W, E = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- @common
local owner = redis.call('HGET', H, 'owner')
local n = 0
if owner == RW or owner == SEM then
  n = redis.call('ZCOUNT', Z, '(' .. int(now), '+inf')
elseif owner then
  n = 1
end
if redis.call('DEL', H, Z, W, E) > 0 then
  redis.call('PUBLISH', ARGV[1], '')
end
return n
