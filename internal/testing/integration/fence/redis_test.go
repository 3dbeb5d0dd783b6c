package fence_test

import (
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/fence"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	_ "github.com/dlockhq/dlock/redisdlock" // the redis:// store
)

// newRedis returns a client of the test server, and a key prefix private to
// the test.
func newRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	o, err := redis.ParseURL(testsrv.Get(t, testsrv.Redis).URL)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c, testsrv.DatabaseName(t.Name()) + ":"
}

// wantValue fails the test unless key holds value and token.
func wantValue(t *testing.T, f *fence.Redis, key, value string, token uint64) {
	t.Helper()
	v, tok, err := f.Get(testCtx(t), key)
	if err != nil || v != value || tok != token {
		t.Fatalf("Get(%q) = %q, %d, %v; want %q, %d", key, v, tok, err, value, token)
	}
}

// A value is written with a token at least the stored one, and a lower
// token is refused without a change.
func TestRedisSet(t *testing.T) {
	ctx := testCtx(t)
	c, p := newRedis(t)
	f := fence.NewRedis(c)
	k := p + "phone:13800000000"

	if _, _, err := f.Get(ctx, k); !errors.Is(err, redis.Nil) {
		t.Fatalf("Get of a missing key: %v, want redis.Nil", err)
	}
	for _, st := range []struct {
		value       string
		token, want uint64
		stale       bool
	}{
		{"a", 9, 9, false},
		{"b", 9, 9, false}, // the same holder writes again
		{"c", 8, 9, true},
		{"d", 10, 10, false}, // longer, and lower as a string
		{"e", 9, 10, true},   // shorter, and higher as a string
		{"f", 1 << 53, 1 << 53, false},
		{"g", 1<<53 + 1, 1<<53 + 1, false},
		{"h", 1 << 53, 1<<53 + 1, true}, // equal as floating-point numbers
		{"i", math.MaxUint64 - 1, math.MaxUint64 - 1, false},
		{"j", math.MaxUint64 - 2, math.MaxUint64 - 1, true},
		{"k", math.MaxUint64, math.MaxUint64, false},
	} {
		err := f.Set(ctx, k, st.value, st.token, 0)
		if st.stale {
			wantStale(t, err, k, st.token, st.want)
		} else if err != nil {
			t.Fatalf("Set(%q, %d): %v", st.value, st.token, err)
		}
		v, tok, err := f.Get(ctx, k)
		if err != nil || tok != st.want || (st.stale == (v == st.value)) {
			t.Fatalf("after Set(%q, %d): Get = %q, %d, %v", st.value, st.token, v, tok, err)
		}
	}
	wantValue(t, f, k, "k", math.MaxUint64)
}

// A positive ttl sets the key's expiry and 0 removes it; refusals leave it.
func TestRedisTTL(t *testing.T) {
	ctx := testCtx(t)
	c, p := newRedis(t)
	f := fence.NewRedis(c)
	k := p + "k"
	pttl := func() time.Duration {
		t.Helper()
		d, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if err := f.Set(ctx, k, "v", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if d := pttl(); d <= 0 || d > time.Hour {
		t.Fatalf("expiry %v after a ttl of 1h", d)
	}
	if err := f.Set(ctx, k, "v", 2, 0); err != nil {
		t.Fatal(err)
	}
	if d := pttl(); d != -1 {
		t.Fatalf("expiry %v after a ttl of 0, want none (-1)", d)
	}
	wantStale(t, f.Set(ctx, k, "v", 1, time.Hour), k, 1, 2)
	if d := pttl(); d != -1 {
		t.Fatalf("a refused Set changed the expiry to %v", d)
	}
}

// Writers with tokens 1 to n race on one key: it ends with the highest
// token's value, and every refused writer had seen a higher token.
func TestRedisConcurrent(t *testing.T) {
	const n = 32
	ctx := testCtx(t)
	c, p := newRedis(t)
	f := fence.NewRedis(c)
	k := p + "k"
	errs := race(n, func(token uint64) error {
		return f.Set(ctx, k, strconv.FormatUint(token, 10), token, 0)
	})
	for i, err := range errs {
		var se *fence.StaleTokenError
		if err != nil && (!errors.As(err, &se) || se.Seen <= uint64(i+1)) {
			t.Errorf("token %d: %v", i+1, err)
		}
	}
	wantValue(t, f, k, strconv.Itoa(n), n)
}

// The script is loaded again when the server has forgotten it.
func TestRedisScriptFlushed(t *testing.T) {
	ctx := testCtx(t)
	c, p := newRedis(t)
	f := fence.NewRedis(c)
	if err := f.Set(ctx, p+"k", "a", 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, p+"k", "b", 2, 0); err != nil {
		t.Fatal(err)
	}
	wantStale(t, f.Set(ctx, p+"k", "c", 1, 0), p+"k", 1, 2)
	wantValue(t, f, p+"k", "b", 2)
}

// Bad tokens and ttls are refused before anything reaches the server; a
// key that is not a guarded value is an error, never a refusal, and is left
// as it was.
func TestRedisBadArguments(t *testing.T) {
	ctx := testCtx(t)
	c, p := newRedis(t)
	f := fence.NewRedis(c)
	k := p + "k"
	wantArg(t, f.Set(ctx, k, "v", 0, 0), "token", uint64(0))
	wantArg(t, f.Set(ctx, k, "v", 1, -time.Second), "ttl", -time.Second)
	if n, err := c.Exists(ctx, k).Result(); err != nil || n != 0 {
		t.Fatalf("the key exists (%d, %v) after refused arguments", n, err)
	}

	for _, bad := range []string{"abc", "007", "-1", "1e3", ""} {
		if err := c.HSet(ctx, k, "value", "v", "token", bad).Err(); err != nil {
			t.Fatal(err)
		}
		err := f.Set(ctx, k, "w", 5, 0)
		if err == nil || errors.Is(err, fence.ErrStaleToken) {
			t.Errorf("stored token %q: Set returned %v, want an error", bad, err)
		}
		if v, _ := c.HGet(ctx, k, "value").Result(); v != "v" {
			t.Errorf("stored token %q: the value became %q", bad, v)
		}
		if _, _, err := f.Get(ctx, k); err == nil {
			t.Errorf("stored token %q: Get returned no error", bad)
		}
	}
	if err := c.Set(ctx, p+"s", "plain", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, p+"s", "w", 5, 0); err == nil || errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("a string key: Set returned %v, want an error", err)
	}
	if v, _ := c.Get(ctx, p+"s").Result(); v != "plain" {
		t.Errorf("a string key became %q", v)
	}
}

// Holder A's lease on a Redis lock runs out while it is paused, B takes
// the lock with a higher token and writes; A's late write is refused.
func TestRedisLateHolderRefused(t *testing.T) {
	ctx := testCtx(t)
	c, p := newRedis(t)
	f := fence.NewRedis(c)
	url := testsrv.Get(t, testsrv.Redis).URL + "?prefix=" + p
	a, b := openClient(t, url), openClient(t, url)
	la, err := a.Lock(ctx, "phone:1", dlock.WithTTL(100*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	<-la.Done() // A is paused past its lease
	lb, err := b.Lock(ctx, "phone:1")
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release(ctx)
	if lb.Token() <= la.Token() {
		t.Fatalf("B's token %d is not above A's %d", lb.Token(), la.Token())
	}
	k := p + "order:phone:1"
	if err := f.Set(ctx, k, "paid by B", lb.Token(), 0); err != nil {
		t.Fatal(err)
	}
	wantStale(t, f.Set(ctx, k, "paid by A", la.Token(), 0), k, la.Token(), lb.Token())
	wantValue(t, f, k, "paid by B", lb.Token())
}
