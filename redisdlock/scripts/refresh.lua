-- dlock refresh: reset the lease if, and only if, the owner holds the lock.
-- KEYS[1] the lock hash; ARGV[1] owner, ARGV[2] lease in milliseconds
-- Returns 1 if refreshed, 0 if the owner does not hold the lock.
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
