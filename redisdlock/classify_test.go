package redisdlock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/redisdlock"
)

// redisErr is an error as the server sends it.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

func TestPermanentClassifies(t *testing.T) {
	client := newClient(testsrv.Get(t, testsrv.Redis).Addr)
	d, err := redisdlock.New(client)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	defer d.Close()
	wrap := func(err error) error { return fmt.Errorf("redisdlock: acquire %q: %w", "k", err) }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{redisErr("WRONGPASS invalid username-password pair or user is disabled."), true},
		{redisErr("NOAUTH Authentication required."), true},
		{redisErr("NOPERM User u has no permissions to run the 'evalsha' command"), true},
		{redisErr("WRONGTYPE Operation against a key holding the wrong kind of value"), true},
		{redisErr("ERR unknown command 'EVALSHA', with args beginning with: "), true},
		{redisErr("ERR DB index is out of range"), true},
		{redisErr("LOADING Redis is loading the dataset in memory"), false},
		{redisErr("READONLY You can't write against a read only replica."), false},
		{redisErr("MASTERDOWN Link with MASTER is down"), false},
		{redisErr("OOM command not allowed when used memory > 'maxmemory'."), false},
		{redisErr("TRYAGAIN Multiple keys request during rehashing of slot"), false},
		{redisErr("CLUSTERDOWN The cluster is down"), false},
		{redisErr("BUSY Redis is busy running a script."), false},
		// The text alone, not from the server, is not the server's answer.
		{errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{io.EOF, false},
	} {
		if got := d.Permanent(wrap(tc.err)); got != tc.want {
			t.Errorf("Permanent(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}

// waitingOn waits until a waiter listens for releases of keys whose
// channels match pattern: it has found the lock held.
func waitingOn(t *testing.T, admin *redis.Client, pattern string) {
	t.Helper()
	for range 1000 {
		chs, err := admin.PubSubChannels(context.Background(), pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(chs) > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no waiter subscribed to %s", pattern)
}

// lockAsync starts c.Lock(ctx, key) and returns its outcome's channel.
func lockAsync(c *dlock.Client, ctx context.Context, key string) <-chan error {
	done := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, key, dlock.WithBackoff(time.Millisecond, 50*time.Millisecond))
		if err == nil {
			l.Release(context.Background())
		}
		done <- err
	}()
	return done
}

// TestWaitEndsOnWrongPassword checks that a Lock that waits for a held
// key ends at once when the server's password is changed under it: the
// server refuses the old one when the client reconnects.
func TestWaitEndsOnWrongPassword(t *testing.T) {
	ctx := context.Background()
	srv, err := testsrv.StartRedis(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	admin := newClient(srv.Addr)
	defer admin.Close()
	if err := admin.ConfigSet(ctx, "requirepass", "old").Err(); err != nil {
		t.Fatal(err)
	}
	open := func() *dlock.Client {
		rc := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "old", MaxRetries: -1, ContextTimeoutEnabled: true})
		d, err := redisdlock.New(rc)
		if err != nil {
			t.Fatal(err)
		}
		c, err := dlock.New(ownedDriver{d, rc})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	holder, waiter := open(), open()
	defer holder.Close()
	defer waiter.Close()
	if _, err := holder.Lock(ctx, "k", dlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	done := lockAsync(waiter, wctx, "k")
	waitingOn(t, admin, "*k*")

	// The password changes, and the clients' connections are cut: they
	// reconnect with the old one.
	if err := admin.ConfigSet(ctx, "requirepass", "new").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if wctx.Err() != nil {
		t.Fatalf("the wait ran until its context ended: %v", err)
	}
	if !errors.Is(err, dlock.ErrPermanent) || !redis.IsAuthError(err) {
		t.Fatalf("Lock = %v; want ErrPermanent wrapping the server's refusal of the password", err)
	}
	// The holder's store refuses it too: put the password back so that
	// it can release.
	if err := admin.ConfigSet(ctx, "requirepass", "old").Err(); err != nil {
		t.Fatal(err)
	}
}

// TestWaitEndsOnWrongType checks that a Lock that waits for a held key
// ends at once when a foreign client puts a value of another type at the
// lock's key.
func TestWaitEndsOnWrongType(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.Get(t, testsrv.Redis)
	admin := newClient(srv.Addr)
	defer admin.Close()
	prefix := "classify-wrongtype:"
	open := func() *dlock.Client {
		c, err := dlock.New(openURL(t, withParams(srv.URL, "prefix", prefix)))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	holder, waiter := open(), open()
	defer holder.Close()
	defer waiter.Close()
	l, err := holder.Lock(ctx, "k", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	done := lockAsync(waiter, wctx, "k")
	waitingOn(t, admin, "{"+prefix+"k}*")

	// A foreign client takes the lock's name for a list, in one step: a
	// waiter could take the key between a DEL and an RPUSH.
	lockKey := "{" + prefix + "k}"
	if _, err := admin.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, lockKey)
		p.RPush(ctx, lockKey, "foreign")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	defer admin.Del(ctx, lockKey)
	if err := admin.Publish(ctx, lockKey+":released", "").Err(); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if wctx.Err() != nil {
		t.Fatalf("the wait ran until its context ended: %v", err)
	}
	if !errors.Is(err, dlock.ErrPermanent) {
		t.Fatalf("Lock = %v; want ErrPermanent", err)
	}
	// The holder's refresh meets the list too: a permanent failure that
	// does not end the lock before its validity.
	if err := l.Refresh(ctx); !errors.Is(err, dlock.ErrPermanent) || l.Cause() != nil {
		t.Errorf("Refresh = %v (lock ended: %v); want ErrPermanent, the lock kept", err, l.Cause())
	}
}
