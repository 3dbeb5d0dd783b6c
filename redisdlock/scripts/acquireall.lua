-- dlock acquire-all: one atomic attempt to take several locks, all or none.
-- KEYS: five per lock, lock after lock, each five as for acquire.lua: the
-- lock hash H, its fencing counter F, the holders Z, the queue W and the
-- queue entries' leases E (see common.lua)
-- ARGV: five per lock, in the same order: [1] owner, [2] lease in
-- milliseconds, [3] holder info, [4] mode (x exclusive, r shared, s
-- semaphore), [5] the semaphore's limit
-- Every owner is new (it holds nothing and is not queued), and nobody is
-- queued for it. Returns {1, token...} when every owner now holds its lock,
-- {0, i, ms} when lock i (counted from 1) cannot be taken now (ms: the
-- soonest a lease ends, < 0 unknown), {-2, i, mode, limit} when lock i is in
-- use as another mode (0 exclusive/shared, 2 semaphore) or with another
-- limit. Nothing is taken unless everything is: every check is made before
-- the first write, and the script runs alone.
local H, F, Z, W, E
-- @common
local n = #KEYS / 5

local function lock(i)
  local b = (i - 1) * 5
  H, F, Z, W, E = KEYS[b + 1], KEYS[b + 2], KEYS[b + 3], KEYS[b + 4], KEYS[b + 5]
  return ARGV[b + 1], tonumber(ARGV[b + 2]), ARGV[b + 3], ARGV[b + 4], tonumber(ARGV[b + 5])
end

-- The checks. Pruning and settling remove expired records only.
for i = 1, n do
  local _, _, _, mode, limit = lock(i)
  local owner = redis.call('HGET', H, 'owner')
  if owner and owner ~= RW and owner ~= SEM then
    -- The simple form: one live exclusive holder.
    if mode == 's' then
      return {-2, i, 0, 0}
    end
    return {0, i, redis.call('PTTL', H)}
  end
  if owner then
    prune()
    if settle() then
      local have = tonumber(redis.call('HGET', H, 'limit') or '0')
      if (mode == 's') ~= (owner == SEM) then
        return {-2, i, owner == SEM and 2 or 0, have}
      end
      if owner == SEM and have ~= limit then
        return {-2, i, 2, have}
      end
      local holders, waiting = redis.call('ZCARD', Z), redis.call('ZCARD', W)
      local admit
      if mode == 'x' then
        admit = holders + waiting == 0
      elseif mode == 'r' then
        -- No writer holds the lock (a writer holds it alone) and none
        -- waits: a queued writer holds new readers back.
        admit = true
        if holders > 0 then
          local first = redis.call('ZRANGE', Z, 0, 0)
          admit = redis.call('HGET', H, 'm:' .. first[1]) ~= 'x'
        end
        for _, o in ipairs(redis.call('ZRANGE', W, 0, -1)) do
          if not admit then break end
          admit = redis.call('HGET', H, 'w:' .. o) ~= 'x'
        end
      else
        admit = holders + waiting < limit
      end
      if not admit then
        local first = redis.call('ZRANGE', Z, 0, 0, 'WITHSCORES')
        if first[2] then
          return {0, i, tonumber(first[2]) - now}
        end
        return {0, i, -1}
      end
    end
  end
end

-- The writes.
local reply = {1}
for i = 1, n do
  local me, ms, info, mode = lock(i)
  local owner = redis.call('HGET', H, 'owner')
  local token = redis.call('INCR', F)
  if not owner then
    redis.call('DEL', Z, W)
  end
  if not owner and mode == 'x' then
    redis.call('HSET', H, 'owner', me, 'token', token, 'info', info)
    redis.call('PEXPIRE', H, ms)
  else
    if not owner and mode == 'r' then
      redis.call('HSET', H, 'owner', RW)
    elseif not owner then
      redis.call('HSET', H, 'owner', SEM, 'limit', ARGV[i * 5])
    end
    redis.call('HSET', H, 't:' .. me, token, 'i:' .. me, info)
    if mode ~= 's' then
      redis.call('HSET', H, 'm:' .. me, mode)
    end
    redis.call('ZADD', Z, int(now + ms), me)
    settle()
  end
  reply[i + 1] = token
end
return reply
