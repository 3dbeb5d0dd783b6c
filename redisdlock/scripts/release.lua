-- dlock release: remove the owner's hold and queue entry, and wake the
-- waiters next in line (see wake in common.lua).
-- KEYS: [1] the lock hash H (the lock's other keys and its channel are
-- named after it, as in acquire.lua); ARGV[1] owner
-- Returns 1 if the owner held the lock or waited for it, 0 if it did not
-- (its remains, such as an expired hold, are removed all the same).
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner == ARGV[1] then
  -- The fast path: the holder of the simple form. Nobody is queued; the
  -- lock's channel wakes waiters that do not queue (Transaction mode,
  -- quorum locks) and observers of the key's releases (leader.Observe),
  -- which no field of the lock can announce: a subscriber is promised
  -- every release after its Subscribe returned. PUBLISH to a channel
  -- nobody listens on costs the server one lookup.
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[1] .. ':released', '')
  return 1
end

local H = KEYS[1]
local F, Z, W, E, CH = H .. ':fence', H .. ':holders', H .. ':queue', H .. ':qexp', H .. ':released'
-- @common
local me = ARGV[1]
local general = owner == RW or owner == SEM
local res, changed, held, pruned = 0, false, false, 0
if general then
  held = redis.call('ZSCORE', Z, me)
  if held then
    redis.call('ZREM', Z, me)
    redis.call('HDEL', H, 't:' .. me, 'i:' .. me, 'm:' .. me)
    changed = true
    if tonumber(held) > now then res = 1 end
  end
end
local queued = redis.call('ZSCORE', E, me)
if queued then
  -- A queue entry, live or expired: either way the owner stops waiting.
  redis.call('ZREM', E, me)
  if redis.call('ZREM', W, me) == 1 then
    redis.call('HDEL', H, 'w:' .. me, 'c:' .. me)
  end
  changed = true
  if not held and tonumber(queued) > now then res = 1 end
end
if general then
  pruned = prune()
  settle()
end
if changed or pruned > 0 then
  wake(CH)
end
return res
