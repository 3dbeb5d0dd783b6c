-- common: the general form of a lock, shared by the scripts that need it.
-- It is spliced into each script at the line "-- @common", after the fast
-- path of the simple form, so that the fast path neither runs nor compiles
-- into anything it does not need.
--
-- A lock is in one of two forms. The simple form is the hash with the
-- fields owner, token, info and a PEXPIRE equal to the lease: exactly one
-- exclusive holder and nobody queued. Every other state is the general
-- form: the hash's owner field is a marker (RW for exclusive/shared locks,
-- SEM for semaphores, neither of which can be an owner), holders are the
-- members of the zset Z (score: the time their lease ends, on the server's
-- clock, in ms), their details the hash fields t:OWNER (token), i:OWNER
-- (info) and m:OWNER (mode x or r; RW only); waiters are the members of the
-- zset W (score: their place in line, from the hash's seq counter), with
-- the time their queue entry expires in the zset E and their mode in the
-- hash field w:OWNER. E keeps an expired entry for a minute more (GONE), so
-- that its owner learns that it lost its place instead of queueing again
-- at the back. The hash, Z and W expire when the last holder's or waiter's
-- lease ends, so that the hash exists exactly while someone holds or
-- waits: the fast path, which takes a lock whose hash is absent, never
-- passes a waiter.
local RW, SEM = '\0rw', '\0sem'
local GONE = 60000
if redis.replicate_commands then
  -- Redis before 5 replicates scripts verbatim unless told to replicate
  -- their effects, and refuses writes after TIME otherwise.
  redis.replicate_commands()
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local function int(n)
  return string.format('%d', n)
end

-- prune drops the expired holders and waiters (keeping the waiters' entries
-- in E) and forgets E's entries that expired more than GONE ago.
local function prune()
  local dead = redis.call('ZRANGEBYSCORE', Z, '-inf', int(now))
  for _, o in ipairs(dead) do
    redis.call('ZREM', Z, o)
    redis.call('HDEL', H, 't:' .. o, 'i:' .. o, 'm:' .. o)
  end
  redis.call('ZREMRANGEBYSCORE', E, '-inf', int(now - GONE))
  local gone = redis.call('ZRANGEBYSCORE', E, '-inf', int(now))
  for _, o in ipairs(gone) do
    if redis.call('ZREM', W, o) == 1 then
      redis.call('HDEL', H, 'w:' .. o)
    end
  end
end

-- settle makes the general form's keys expire with its longest lease (E a
-- minute later), and deletes them if no holder or waiter is left. It
-- reports whether any is.
local function settle()
  local at, last = 0, 0
  local z = redis.call('ZRANGE', Z, -1, -1, 'WITHSCORES')
  if z[2] then at = tonumber(z[2]) end
  local e = redis.call('ZRANGE', E, -1, -1, 'WITHSCORES')
  if e[2] then last = tonumber(e[2]) end
  if last > 0 then
    redis.call('PEXPIREAT', E, int(last + GONE))
  end
  if last > at then at = last end
  if at <= now then
    redis.call('DEL', H, Z, W)
    return false
  end
  for _, k in ipairs({H, Z, W}) do
    redis.call('PEXPIREAT', k, int(at))
  end
  return true
end
