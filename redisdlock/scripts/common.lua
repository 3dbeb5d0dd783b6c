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
-- hash field w:OWNER, its info in i:OWNER; a waiter that listens for its
-- turn on a channel of its own (see wake) also has the field c:OWNER, and
-- a release may hand it the lock (see grant in release.lua). E keeps an
-- expired entry for a minute more (GONE), so that its owner learns that it
-- lost its place instead of queueing again at the back. The hash, Z and W expire when the last holder's or waiter's
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

-- prune drops the expired holders (dead: their list, if the caller has
-- read it) and waiters (keeping the waiters' entries in E) and forgets E's
-- entries that expired more than GONE ago. It returns the number of
-- holders and waiters dropped.
local function prune(dead)
  dead = dead or redis.call('ZRANGEBYSCORE', Z, '-inf', int(now))
  for _, o in ipairs(dead) do
    redis.call('ZREM', Z, o)
    redis.call('HDEL', H, 't:' .. o, 'i:' .. o, 'm:' .. o)
  end
  local n = #dead
  local gone, forget = redis.call('ZRANGEBYSCORE', E, '-inf', int(now), 'WITHSCORES'), false
  for i = 1, #gone, 2 do
    local o = gone[i]
    if tonumber(gone[i + 1]) <= now - GONE then
      forget = true
    elseif redis.call('ZREM', W, o) == 1 then
      redis.call('HDEL', H, 'w:' .. o, 'c:' .. o, 'i:' .. o)
      n = n + 1
    end
  end
  if forget then
    redis.call('ZREMRANGEBYSCORE', E, '-inf', int(now - GONE))
  end
  return n
end

-- wake signals the waiters that a change (a hold or a queue entry ended, a
-- writer became a reader) may let in, now that the change is made. ch is
-- the lock's channel. A waiter queued by this version listens on a channel
-- of its own, ch .. ':' .. OWNER (its hash field c:OWNER says so), so that
-- a release wakes the waiters next in line and nobody else: the head of the
-- queue, or, when the head is a reader and no writer holds the lock, every
-- reader before the first queued writer, or, for a semaphore, as many
-- waiters from the head as permits are free (at least one). A waiter queued
-- by an older version (no c:OWNER) listens on ch: it is signalled there,
-- and with it every other such waiter. With nobody queued the signal goes
-- to ch, where waiters that do not queue (Transaction mode) listen.
-- Expired entries are not woken: wake runs after prune.
local function wake(ch)
  local owner = redis.call('HGET', H, 'owner')
  local n = 1
  local q
  if owner == SEM then
    n = tonumber(redis.call('HGET', H, 'limit') or '1') - redis.call('ZCARD', Z)
    if n < 1 then n = 1 end
    q = redis.call('ZRANGE', W, 0, n - 1)
  else
    q = redis.call('ZRANGE', W, 0, 0)
    if q[1] and redis.call('HGET', H, 'w:' .. q[1]) == 'r' then
      local first = redis.call('ZRANGE', Z, 0, 0)
      if not first[1] or redis.call('HGET', H, 'm:' .. first[1]) ~= 'x' then
        q = redis.call('ZRANGE', W, 0, -1)
        n = #q
      end
    end
  end
  if not q[1] then
    redis.call('PUBLISH', ch, '')
    return
  end
  local shared = false
  for i = 1, n do
    local o = q[i]
    if not o or (i > 1 and owner ~= SEM and redis.call('HGET', H, 'w:' .. o) ~= 'r') then
      break
    end
    if redis.call('HEXISTS', H, 'c:' .. o) == 1 then
      redis.call('PUBLISH', ch .. ':' .. o, '')
    elseif not shared then
      shared = true
      redis.call('PUBLISH', ch, '')
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
