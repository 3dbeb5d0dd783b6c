package redisdlock_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// TestLongestLease takes, refreshes, lists and releases holds with the
// longest lease package dlock allows (DefaultMaxTTL, 7 days), in every mode
// and hold kind, on a standalone server and a Cluster: PX and PEXPIRE
// arguments and the scripts' arithmetic on milliseconds must carry it.
func TestLongestLease(t *testing.T) {
	const ttl = dlock.DefaultMaxTTL
	type variant struct {
		params []string
		hold   driver.Mode
		limit  int
	}
	variants := []variant{
		{[]string{"mode", "script"}, driver.Exclusive, 0},
		{[]string{"mode", "script"}, driver.Shared, 0},
		{[]string{"mode", "script"}, driver.Semaphore, math.MaxInt32},
		{[]string{"mode", "tx"}, driver.Exclusive, 0},
		{[]string{"mode", "legacy"}, driver.Exclusive, 0},
		{[]string{"mode", "legacy", "legacy_unit", "s"}, driver.Exclusive, 0},
	}
	for _, name := range modeServers {
		for _, v := range variants {
			t.Run(fmt.Sprintf("%s/%v/%s", name, v.params, v.hold), func(t *testing.T) {
				srv := testsrv.Get(t, name)
				d := openURL(t, withParams(srv.URL, append(v.params, "prefix", testPrefix(t))...))
				defer d.Close()
				if max := d.Capabilities().MaxTTL; max != 0 && max < ttl {
					t.Fatalf("MaxTTL = %v; want at least %v", max, ttl)
				}
				if v.hold == driver.Semaphore && d.Capabilities().MaxLimit != math.MaxInt32 {
					t.Errorf("MaxLimit = %d; want math.MaxInt32", d.Capabilities().MaxLimit)
				}
				ctx := testCtx(t)
				reqs := make([]driver.Request, 2)
				for i := range reqs {
					reqs[i] = request("k", ttl)
					reqs[i].Mode, reqs[i].Limit = v.hold, v.limit
				}
				n := 1
				if v.hold != driver.Exclusive {
					n = 2 // two holders: the general form
				}
				for _, req := range reqs[:n] {
					res := mustAcquire(t, d, req, true)
					if res.TTL != 0 && res.TTL != ttl {
						t.Errorf("Acquire granted %v; want %v", res.TTL, ttl)
					}
				}
				if v.hold == driver.Exclusive {
					mustAcquire(t, d, reqs[1], false)
				}
				if err := d.Refresh(ctx, reqs[0]); err != nil {
					t.Fatalf("Refresh = %v", err)
				}
				hs, err := d.List(ctx, "")
				if err != nil || len(hs) != n {
					t.Fatalf("List = %+v, %v; want %d holders", hs, err, n)
				}
				for _, h := range hs {
					if h.TTL < ttl-time.Minute || h.TTL > ttl+time.Second || h.Limit != v.limit {
						t.Errorf("holder %+v; want a lease of about %v and limit %d", h, ttl, v.limit)
					}
				}
				for _, req := range reqs[:n] {
					if err := d.Release(ctx, req); err != nil {
						t.Fatalf("Release = %v", err)
					}
				}
				if c, err := d.Count(ctx, ""); err != nil || c != 0 {
					t.Errorf("Count after release = %d, %v; want 0", c, err)
				}
			})
		}
	}
	// Through the portable API: dlock accepts the lease (MaxTTL) and the
	// limit (MaxLimit) the driver declares.
	srv := testsrv.Get(t, testsrv.Redis)
	c, err := dlock.New(openURL(t, withParams(srv.URL, "prefix", testPrefix(t))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	l, err := c.TryLock(ctx, "sem", dlock.WithTTL(ttl), dlock.WithLimit(math.MaxInt32))
	if err != nil {
		t.Fatalf("TryLock of a semaphore of MaxInt32 permits for %v: %v", ttl, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
