-- dlock acquire: one atomic attempt to take a lock in any mode.
-- KEYS: [1] the lock hash H {prefix+key}, [2] its fencing counter F. The
-- other keys of the lock (see common.lua) and its release channel are
-- named after H here, as in keys.go, so that the fast path is not sent
-- names it does not use.
-- ARGV: [1] owner, [2] lease in milliseconds, [3] holder info, [4] mode
-- (x exclusive, r shared, s semaphore), [5] '1' to queue the owner if it
-- does not acquire (it then listens on its own channel: see wake), '2' the
-- same for an owner that no Acquire has asked to queue before (so it
-- cannot have lost a place in the queue), '0' not to queue, [6] the
-- semaphore's limit (semaphores only)
-- Returns {1, token} when the owner holds the lock (newly or again),
-- {0, ms} when it does not (ms: the soonest a lease ends, < 0 unknown),
-- {0, ms, fence} when it does not and is queued (fence: the lock's fencing
-- counter),
-- {-1} when the owner's queue entry has expired, {-2, mode, limit} when the
-- lock is in use as another mode (0 exclusive/shared, 2 semaphore) or with
-- another limit.
local owner = redis.call('HGET', KEYS[1], 'owner')
if ARGV[4] == 'x' then
  -- The fast path: an exclusive lock in the simple form. A waiter that
  -- may have lost its place (its entry would be in the qexp set) takes
  -- the general path, which tells it.
  if not owner and (ARGV[5] ~= '1' or not redis.call('ZSCORE', KEYS[1] .. ':qexp', ARGV[1])) then
    local token = redis.call('INCR', KEYS[2])
    redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, 'info', ARGV[3])
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, token}
  end
  if owner == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(redis.call('HGET', KEYS[1], 'token'))}
  end
  if ARGV[5] == '0' and string.byte(owner) ~= 0 then
    -- Held in the simple form, and the owner does not queue: it may wait
    -- on the lock's channel. The field l asks the release to publish
    -- there (see release.lua).
    redis.call('HSET', KEYS[1], 'l', '1')
    return {0, redis.call('PTTL', KEYS[1])}
  end
end

local H, F = KEYS[1], KEYS[2]
local Z, W, E, CH = H .. ':holders', H .. ':queue', H .. ':qexp', H .. ':released'
-- @common
local me, ms, mode, info = ARGV[1], tonumber(ARGV[2]), ARGV[4], ARGV[3]
local queue, limit = ARGV[5] ~= '0', tonumber(ARGV[6])

-- hold makes me a holder of the general form and returns its token.
local function hold()
  local token = redis.call('INCR', F)
  redis.call('HSET', H, 't:' .. me, token, 'i:' .. me, info)
  if mode ~= 's' then
    redis.call('HSET', H, 'm:' .. me, mode)
  end
  redis.call('ZADD', Z, int(now + ms), me)
  return token
end

-- simple makes me the holder of the simple form and returns its token.
-- Waiters that do not queue may have come by while the lock was in the
-- general form, unseen: the field l makes the release publish on the
-- lock's channel for them (see release.lua).
local function simple()
  local token = redis.call('INCR', F)
  redis.call('HSET', H, 'owner', me, 'token', token, 'info', info, 'l', '1')
  redis.call('PEXPIRE', H, ms)
  return token
end

-- simple_to_general turns the simple form held by o into the general form.
local function simple_to_general(o)
  local left = redis.call('PTTL', H)
  if left < 1 then left = 1 end
  local f = redis.call('HMGET', H, 'token', 'info')
  redis.call('DEL', Z, W)
  redis.call('HDEL', H, 'token', 'info')
  redis.call('HSET', H, 'owner', RW, 't:' .. o, f[1], 'i:' .. o, f[2] or '', 'm:' .. o, 'x')
  redis.call('ZADD', Z, int(now + left), o)
end

-- lost_place reports whether me queued before and its entry expired. It
-- holds after prune.
local function lost_place()
  return queue and not redis.call('ZSCORE', W, me) and redis.call('ZSCORE', E, me)
end

if owner and owner ~= RW and owner ~= SEM then
  -- The simple form: one exclusive holder, nobody queued.
  if mode == 's' then
    return {-2, 0, 0}
  end
  if owner == me then
    -- A downgrade (mode r; x took the fast path): readers may join.
    simple_to_general(me)
    redis.call('HSET', H, 'm:' .. me, 'r')
    redis.call('ZADD', Z, int(now + ms), me)
    settle()
    wake(CH)
    return {1, tonumber(redis.call('HGET', H, 't:' .. me))}
  end
  if not queue then
    redis.call('HSET', H, 'l', '1') -- as on the fast path
    return {0, redis.call('PTTL', H)}
  end
  simple_to_general(owner)
  owner = RW
end

local pruned = prune()
if owner and redis.call('ZCARD', Z) + redis.call('ZCARD', W) == 0 then
  redis.call('DEL', H, Z, W)
  owner = nil
end
if pruned > 0 then
  -- Expired holds or queue entries ended: whoever is next in line may be
  -- let in (this owner too, in a moment).
  wake(CH)
end

if not owner then
  -- Nobody holds or waits.
  if lost_place() then
    return {-1}
  end
  redis.call('DEL', Z, W)
  if mode == 'x' then
    return {1, simple()}
  end
  if mode == 'r' then
    redis.call('HSET', H, 'owner', RW)
  else
    redis.call('HSET', H, 'owner', SEM, 'limit', ARGV[6])
  end
  local token = hold()
  settle()
  return {1, token}
end

-- The general form, with live holders or waiters.
local held = redis.call('ZSCORE', Z, me)
if held then
  local m = 's'
  if owner == RW then m = redis.call('HGET', H, 'm:' .. me) end
  if (m == 's') ~= (mode == 's') then
    return {-2, owner == SEM and 2 or 0, tonumber(redis.call('HGET', H, 'limit') or '0')}
  end
  if m == 'r' and mode == 'x' then
    return {-2, 1, 0} -- an upgrade
  end
  redis.call('ZADD', Z, int(now + ms), me)
  if m == 'x' and mode == 'r' then
    redis.call('HSET', H, 'm:' .. me, 'r') -- a downgrade
    wake(CH)
  end
  settle()
  return {1, tonumber(redis.call('HGET', H, 't:' .. me))}
end
if (mode == 's') ~= (owner == SEM) then
  return {-2, owner == SEM and 2 or 0, tonumber(redis.call('HGET', H, 'limit') or '0')}
end
if owner == SEM and tonumber(redis.call('HGET', H, 'limit')) ~= limit then
  return {-2, 2, tonumber(redis.call('HGET', H, 'limit'))}
end

-- Who is ahead of me in the queue?
local place = redis.call('ZSCORE', W, me)
local ahead
if place then
  ahead = redis.call('ZRANGEBYSCORE', W, '-inf', '(' .. place)
else
  if lost_place() then
    settle()
    return {-1}
  end
  ahead = redis.call('ZRANGE', W, 0, -1)
end

local holders = redis.call('ZCARD', Z)
local admit
if mode == 'x' then
  admit = holders == 0 and #ahead == 0
elseif mode == 'r' then
  admit = true
  if holders > 0 then
    local first = redis.call('ZRANGE', Z, 0, 0)
    admit = redis.call('HGET', H, 'm:' .. first[1]) ~= 'x'
  end
  for _, o in ipairs(ahead) do
    if not admit then break end
    admit = redis.call('HGET', H, 'w:' .. o) ~= 'x'
  end
else
  admit = holders + #ahead < limit
end

if admit then
  if place then
    redis.call('ZREM', W, me)
    redis.call('ZREM', E, me)
    redis.call('HDEL', H, 'w:' .. me, 'c:' .. me)
    -- No signal: whoever else this lock can let in now was signalled
    -- with this owner, by the change that let it in.
  end
  if mode == 'x' and redis.call('ZCARD', W) == 0 then
    -- Alone again: back to the simple form.
    redis.call('DEL', H, Z, W)
    return {1, simple()}
  end
  local token = hold()
  settle()
  return {1, token}
end

if queue then
  if not place then
    redis.call('ZADD', W, redis.call('HINCRBY', H, 'seq', 1), me)
    redis.call('HSET', H, 'w:' .. me, mode, 'c:' .. me, '1', 'i:' .. me, info)
  end
  redis.call('ZADD', E, int(now + ms), me)
end
settle()
local first = redis.call('ZRANGE', Z, 0, 0, 'WITHSCORES')
local soonest = first[2] and tonumber(first[2]) - now or -1
if queue then
  -- The fencing counter now: a release that hands the lock to me later
  -- takes a larger token (see grant in release.lua).
  return {0, soonest, tonumber(redis.call('GET', F) or '0')}
end
return {0, soonest}
