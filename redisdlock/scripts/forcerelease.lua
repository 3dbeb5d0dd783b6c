-- dlock force release: delete the lock whoever holds it, and wake the waiters.
-- KEYS[1] the lock hash; ARGV[1] the release channel
-- Returns the number of holds removed (0 or 1).
local n = redis.call('DEL', KEYS[1])
if n > 0 then
  redis.call('PUBLISH', ARGV[1], '')
end
return n
