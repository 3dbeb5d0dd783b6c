package fence

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/redis/go-redis/v9"
)

// Redis guards values kept in Redis: each value is a hash with the fields
// "value" and "token" (one key, so it works on Redis Cluster too), written
// only by a script that compares the tokens. Create it with NewRedis; it is
// safe for concurrent use.
type Redis struct {
	c redis.UniversalClient
}

// NewRedis returns the guards of values in the Redis that c talks to. A nil
// c is reported by their methods, as a *dlock.ArgError named "client".
func NewRedis(c redis.UniversalClient) *Redis { return &Redis{c: c} }

// setScript writes ARGV[1] and the token ARGV[2] to the hash KEYS[1] unless
// the hash holds a higher token, and sets its time to live to ARGV[3]
// milliseconds (0: none). It returns 1, or the higher token. Tokens are
// decimal strings without leading zeros, compared by length, then 15 digits
// at a time, so that tokens above 2^53 (where Lua's numbers lose precision)
// compare exactly.
var setScript = redis.NewScript(`
local function higher(a, b)
	if #a ~= #b then return #a > #b end
	for i = 1, #a, 15 do
		local x, y = tonumber(string.sub(a, i, i + 14)), tonumber(string.sub(b, i, i + 14))
		if x ~= y then return x > y end
	end
	return false
end
local cur = redis.call('HGET', KEYS[1], 'token')
if cur then
	if not string.match(cur, '^[1-9][0-9]*$') then
		return redis.error_reply('fence: the token field of ' .. KEYS[1] .. ' is not a token: ' .. cur)
	end
	if higher(cur, ARGV[2]) then
		return cur
	end
end
redis.call('HSET', KEYS[1], 'value', ARGV[1], 'token', ARGV[2])
if ARGV[3] == '0' then
	redis.call('PERSIST', KEYS[1])
else
	redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 1`)

// Set writes value to key with token if key holds no higher token (equal
// tokens pass: one holder may write twice), in one atomic step on the
// server. If it holds a higher one, nothing is changed and the error is a
// *StaleTokenError. Every token from 1 to math.MaxUint64 is accepted; the
// token 0, a negative ttl, a nil ctx and a Redis made with a nil client
// are a *dlock.ArgError.
//
// A positive ttl makes the key expire that long after the write; 0 keeps it
// for good. The key's expiry forgets its token too, after which any token
// passes: give a ttl far longer than a holder can be late, or none.
func (r *Redis) Set(ctx context.Context, key, value string, token uint64, ttl time.Duration) error {
	if err := checkUse(ctx, "client", r.c); err != nil {
		return err
	}
	if err := checkToken(token, false); err != nil {
		return err
	}
	if ttl < 0 {
		return &dlock.ArgError{Name: "ttl", Value: ttl, Reason: "must not be negative"}
	}
	ms := ttl.Milliseconds()
	if ttl > 0 && ms == 0 {
		ms = 1
	}
	res, err := setScript.Run(ctx, r.c, []string{key}, value, strconv.FormatUint(token, 10), ms).Result()
	if err != nil {
		return fmt.Errorf("fence: setting %q: %w", key, err)
	}
	switch v := res.(type) {
	case int64:
		return nil
	case string:
		seen, ok := parseToken(v)
		if !ok {
			return fmt.Errorf("fence: setting %q: the stored token %q is not a token", key, v)
		}
		return &StaleTokenError{Resource: key, Token: token, Seen: seen}
	}
	return fmt.Errorf("fence: setting %q: unexpected reply %v", key, res)
}

// Get returns the value of key and the token it was written with. A key
// that does not exist (never set, or expired) is an error wrapping
// redis.Nil.
func (r *Redis) Get(ctx context.Context, key string) (value string, token uint64, err error) {
	if err := checkUse(ctx, "client", r.c); err != nil {
		return "", 0, err
	}
	vs, err := r.c.HMGet(ctx, key, "value", "token").Result()
	if err != nil {
		return "", 0, fmt.Errorf("fence: getting %q: %w", key, err)
	}
	v, hasValue := vs[0].(string)
	t, hasToken := vs[1].(string)
	if !hasValue || !hasToken {
		return "", 0, fmt.Errorf("fence: getting %q: %w", key, redis.Nil)
	}
	token, ok := parseToken(t)
	if !ok {
		return "", 0, fmt.Errorf("fence: getting %q: the stored token %q is not a token", key, t)
	}
	return v, token, nil
}

// parseToken parses a token as Set stores it: a decimal number from 1 to
// math.MaxUint64 without leading zeros, the form the script compares.
func parseToken(s string) (uint64, bool) {
	t, err := strconv.ParseUint(s, 10, 64)
	return t, err == nil && t > 0 && strconv.FormatUint(t, 10) == s
}
