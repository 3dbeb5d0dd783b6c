-- Raises the fencing counter KEYS[1] to ARGV[1], a decimal integer, and
-- leaves a larger counter alone (Driver.RaiseToken). Returns 1 if it
-- raised the counter, 0 if not.
--
-- The values are compared as decimal text without leading zeros (by
-- length, then byte by byte): Lua numbers are doubles and lose precision
-- past 2^53, where counters of up to 2^63 - 1 still must compare exactly.
local cur = redis.call('GET', KEYS[1])
local want = ARGV[1]
if cur then
  if not string.match(cur, '^[1-9]%d*$') and cur ~= '0' then
    return redis.error_reply('the fencing counter ' .. KEYS[1] .. ' holds ' .. cur .. ', not a count')
  end
  if #cur > #want or (#cur == #want and cur >= want) then
    return 0
  end
end
redis.call('SET', KEYS[1], want)
return 1
