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

-- GRACE bounds, in ms, the hold that grant gives a waiter before the
-- waiter has renewed or confirmed it.
local GRACE = 3000

local res, changed, mine = 0, false, false

-- drop removes the releaser's live hold (prune removes an expired one).
local function drop()
  if mine then
    redis.call('ZREM', Z, me)
    redis.call('HDEL', H, 't:' .. me, 'i:' .. me, 'm:' .. me)
  end
end

-- grant hands a lock of exclusive and shared holds that nobody holds any
-- more to q[1], the head of its queue, if that is a writer that listens on
-- a channel of its own (c:OWNER: a waiter of this version, whose acquire
-- finds itself the holder), and signals it with "TOKEN LEASE": the hold's
-- token, and its lease in ms from now. The head may take the hold on that
-- signal alone (see grants.go), and its first renewal extends it to the
-- head's own lease; or its acquire confirms and extends it. Until then the
-- head holds for the rest of its queue entry's lease, at most GRACE: a head
-- that died or gave up keeps the lock from the next in line no longer than
-- that, and one that comes later queues again. Alone in the queue (no
-- q[2]), the head becomes the holder of the simple form, whose
-- confirmation is the acquire's (or refresh's) fast path. It reports
-- whether it handed the lock over (and then signalled, and settled the
-- keys). It runs after prune, and before drop: a hold of the releaser's
-- own goes with the keys of the simple form.
local function grant(q)
  local o = q[1]
  if owner ~= RW or not o then
    return false
  end
  local f = redis.call('HMGET', H, 'w:' .. o, 'c:' .. o, 'i:' .. o)
  local ends = f[1] == 'x' and f[2] and redis.call('ZSCORE', E, o)
  if not ends then
    return false
  end
  local lease = math.min(tonumber(ends) - now, GRACE)
  local token = redis.call('INCR', F)
  redis.call('ZREM', E, o)
  if q[2] then
    drop()
    redis.call('ZREM', W, o)
    redis.call('HDEL', H, 'w:' .. o, 'c:' .. o)
    redis.call('HSET', H, 't:' .. o, token, 'i:' .. o, f[3] or '', 'm:' .. o, 'x')
    redis.call('ZADD', Z, int(now + lease), o)
    settle()
  else
    redis.call('DEL', H, Z, W)
    redis.call('HSET', H, 'owner', o, 'token', token, 'info', f[3] or '', 'l', '1')
    redis.call('PEXPIRE', H, int(lease))
  end
  redis.call('PUBLISH', CH .. ':' .. o, token .. ' ' .. int(lease))
  return true
end

-- The two holds of an exclusive/shared lock that end first: with fewer, all
-- of them, as in a lock held exclusively. dead lists the expired ones then.
local z = owner == RW and redis.call('ZRANGE', Z, 0, 1, 'WITHSCORES') or {}
local held, dead
if owner == RW and not z[3] then
  held, dead = z[1] == me and z[2], {}
  if z[2] and tonumber(z[2]) <= now then dead[1] = z[1] end
else
  held = general and redis.call('ZSCORE', Z, me)
end
if held then
  changed = true
  mine = tonumber(held) > now -- a live hold, which prune leaves to drop
  if mine then res = 1 end
end
local queued = redis.call('ZSCORE', E, me)
if queued then
  -- A queue entry, live or expired: either way the owner stops waiting.
  redis.call('ZREM', E, me)
  if redis.call('ZREM', W, me) == 1 then
    redis.call('HDEL', H, 'w:' .. me, 'c:' .. me, 'i:' .. me)
  end
  changed = true
  if not held and tonumber(queued) > now then res = 1 end
end
if not general then
  if changed then wake(CH) end
  return res
end

if prune(dead) > 0 then changed = true end
local left = dead and #z / 2 - #dead or redis.call('ZCARD', Z)
if left == (mine and 1 or 0) then
  -- Nobody else holds the lock.
  local q = redis.call('ZRANGE', W, 0, 1)
  if grant(q) then
    return res
  end
  if not q[1] then
    -- Nor waits for it: the keys go, and E expires on its own.
    redis.call('DEL', H, Z, W)
    if changed then redis.call('PUBLISH', CH, '') end
    return res
  end
end
drop()
settle()
if changed then
  wake(CH)
end
return res
