package redisdlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// TestSilentConnectionReplaced stalls the server (CLIENT PAUSE) so that the
// pub/sub connection neither fails nor answers its ping: the driver must
// replace it, signal the waiter, and deliver later releases as before.
func TestSilentConnectionReplaced(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	saved := healthInterval
	healthInterval = 200 * time.Millisecond
	defer func() { healthInterval = saved }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	name := "silent-test-" + time.Now().Format("150405.000000")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true, ClientName: name})
	defer c.Close()
	d, err := New(c, WithPrefix("silent"+time.Now().Format("150405.000000")+":"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	sub, err := d.Subscribe(ctx, driver.Request{Key: "k", Owner: "waiter", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// An idle, healthy connection is pinged and kept: no signal.
	select {
	case <-sub.C():
		t.Fatal("signal on a healthy idle connection")
	case <-time.After(5 * healthInterval):
	}

	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	pubsubID := func() string {
		t.Helper()
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " name="+name+" ") && strings.Contains(line, " sub=1 ") {
				id, _, _ := strings.Cut(line, " ")
				return id
			}
		}
		t.Fatalf("no pub/sub connection named %s subscribed to one channel:\n%s", name, list)
		return ""
	}
	before := pubsubID()
	if err := admin.Do(ctx, "CLIENT", "PAUSE", 1500, "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	select {
	case <-sub.C():
	case <-time.After(15 * time.Second):
		t.Fatal("no signal after the pub/sub connection went silent")
	}
	if after := pubsubID(); after == before {
		t.Errorf("pub/sub connection %s kept; want a new one", after)
	}

	req := driver.Request{Key: "k", Owner: "holder", TTL: time.Minute}
	if res, err := d.Acquire(ctx, req); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	// The waiter finds the lock held, which asks its release to publish.
	if res, err := d.Acquire(ctx, driver.Request{Key: "k", Owner: "waiter", TTL: time.Minute}); err != nil || res.Acquired {
		t.Fatalf("the waiter's Acquire = %+v, %v; want not acquired", res, err)
	}
	select {
	case <-sub.C(): // a stray signal is allowed; drain it
	default:
	}
	if err := d.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.C():
	case <-time.After(10 * time.Second):
		t.Fatal("release after the replacement not signalled")
	}
}
