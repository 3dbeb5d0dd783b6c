package redisdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/redis/go-redis/v9"
)

// TestClusterMasterFailover kills the master that owns a lock's slot in a
// Redis Cluster whose masters have replicas, and checks that a client
// opened from a URL acquires the lock again once the replica is promoted:
// it must find the new master by reloading its slot map, long before the
// map would age out (a minute in go-redis) and without a MOVED reply
// (nothing answers for the slot until then).
func TestClusterMasterFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := testsrv.StartRedisCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	const prefix, key = "fo:", "failover"
	c, err := dlock.Open(ctx, srv.URL+"?prefix="+prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryLock(ctx, key, dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("TryLock before the fault: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: srv.Addrs})
	defer cc.Close()
	owner, err := cc.MasterForKey(ctx, "{"+prefix+key+"}")
	if err != nil {
		t.Fatal(err)
	}
	var master *testsrv.Server
	for _, m := range srv.Members() {
		if m.Addr == owner.Options().Addr {
			master = m
		}
	}
	if master == nil {
		t.Fatalf("no member listens on %s, the master of the key's slot", owner.Options().Addr)
	}
	if err := master.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// The replica is promoted within seconds; the client must follow well
	// within the minute after which go-redis would reload the map anyway.
	// Until then attempts fail (a Lock whose first attempt fails returns
	// at once): try again, as a worker loop does.
	deadline := killed.Add(30 * time.Second)
	for {
		l, err = c.TryLock(ctx, key, dlock.WithTTL(2*time.Second))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TryLock 30s after the master of the key's slot died: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // polling: nothing signals the promotion
	}
	t.Logf("acquired %v after the master was killed", time.Since(killed).Round(time.Millisecond))
	if err := l.Release(ctx); err != nil {
		t.Error(err)
	}
}
