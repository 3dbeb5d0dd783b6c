-- dlock acquire: one atomic attempt to take an exclusive lock.
-- KEYS[1] the lock hash {prefix+key}, KEYS[2] its fencing counter {prefix+key}:fence
-- ARGV[1] owner, ARGV[2] lease in milliseconds, ARGV[3] holder info
-- Returns {1, token} when the owner holds the lock (newly or again),
-- {0, pttl} when another owner does (pttl < 0: no expiry known).
local owner = redis.call('HGET', KEYS[1], 'owner')
if not owner then
  local token = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, 'info', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, token}
end
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('HGET', KEYS[1], 'token'))}
end
return {0, redis.call('PTTL', KEYS[1])}
