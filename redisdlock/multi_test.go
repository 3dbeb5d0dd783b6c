package redisdlock_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// TestLockAllCluster checks multi-locks on Redis Cluster: keys with one hash
// tag are taken in one script, all or none, and keys on different slots are
// taken one by one.
func TestLockAllCluster(t *testing.T) {
	srv := testsrv.Get(t, testsrv.RedisCluster)
	prefix := testPrefix(t)
	raw := withParams(srv.URL, "prefix", prefix)
	d := openURL(t, raw)
	c, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other, err := dlock.New(openURL(t, raw))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := t.Context()

	tagged := []string{"order:{42}:items", "order:{42}:payment", "order:{42}:shipping"}
	reqs := make([]driver.Request, len(tagged))
	for i, k := range tagged {
		reqs[i] = driver.Request{Key: k, Owner: "owner-" + k, TTL: 30e9}
	}
	res, err := d.AcquireAll(ctx, reqs)
	if err != nil || !res.Acquired {
		t.Fatalf("AcquireAll of keys with one hash tag = %+v, %v; want acquired in one script", res, err)
	}
	hs, err := d.List(ctx, "order:{42}")
	if err != nil || len(hs) != 3 {
		t.Errorf("List(order:{42}) = %+v, %v; want the 3 holders", hs, err)
	}
	for _, req := range reqs {
		if err := d.Release(ctx, req); err != nil {
			t.Errorf("Release(%s): %v", req.Key, err)
		}
	}

	// Keys on different slots: the driver declines, dlock goes key by key.
	spread := []driver.Request{{Key: "a", Owner: "o1", TTL: 30e9}, {Key: "b", Owner: "o2", TTL: 30e9}}
	if _, err := d.AcquireAll(ctx, spread); !errors.Is(err, driver.ErrUnsupported) {
		t.Errorf("AcquireAll of keys on different slots = %v; want ErrUnsupported", err)
	}
	m, err := c.TryLockAll(ctx, []string{"a", "b"})
	if err != nil {
		t.Fatalf("TryLockAll of keys on different slots: %v", err)
	}
	if err := m.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// One held key refuses the whole tagged set, leaving the rest free.
	held, err := other.Lock(ctx, tagged[1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLockAll(ctx, tagged); !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), "at once") {
		t.Errorf("TryLockAll with %s held = %v; want ErrNotAcquired from the one-step attempt", tagged[1], err)
	}
	if n, err := d.Count(ctx, ""); err != nil || n != 1 {
		t.Errorf("Count after a refused TryLockAll = %d, %v; want 1 (the held key)", n, err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	m, err = c.LockAll(ctx, tagged, dlock.WithLimit(2))
	if err != nil {
		t.Fatalf("LockAll of semaphores with one hash tag: %v", err)
	}
	if err := m.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := d.Count(ctx, ""); err != nil || n != 0 {
		t.Errorf("Count at the end = %d, %v; want 0", n, err)
	}
}
