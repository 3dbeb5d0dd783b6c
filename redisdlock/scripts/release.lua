-- dlock release: delete the lock if, and only if, the owner holds it, and
-- wake the waiters.
-- KEYS[1] the lock hash; ARGV[1] owner, ARGV[2] the release channel
-- Returns 1 if released, 0 if the owner does not hold the lock.
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '')
  return 1
end
return 0
