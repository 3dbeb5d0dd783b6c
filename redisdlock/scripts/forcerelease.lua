-- dlock force release: delete the lock, its holders and its queue, whoever
-- holds it, and wake every waiter: on the lock's channel, and on the
-- channel of each waiter that listens on its own (see wake in common.lua).
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
local own = {}
for _, o in ipairs(redis.call('ZRANGE', W, 0, -1)) do
  if redis.call('HEXISTS', H, 'c:' .. o) == 1 then
    own[#own + 1] = ARGV[1] .. ':' .. o
  end
end
if redis.call('DEL', H, Z, W, E) > 0 then
  redis.call('PUBLISH', ARGV[1], '')
  for _, ch in ipairs(own) do
    redis.call('PUBLISH', ch, '')
  end
end
return n
