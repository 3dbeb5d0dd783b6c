package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memdlock"
)

// TestUncontendedAllocs counts the allocations of an uncontended Lock and
// Release on the in-process store (three of them the store's own), with
// Lock and with TryLock, so that the acquisition path does not grow them
// again unnoticed.
func TestUncontendedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates, and drops what sync.Pool keeps")
	}
	c, err := dlock.New(memdlock.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	ttl := dlock.WithTTL(30 * time.Second)
	for _, tc := range []struct {
		name string
		max  float64
		pair func() error
	}{
		{"Lock", 19, func() error {
			l, err := c.Lock(ctx, "allocs", ttl)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
		{"TryLock", 17, func() error {
			l, err := c.TryLock(ctx, "allocs", ttl)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
	} {
		var failed error
		n := testing.AllocsPerRun(100, func() {
			if err := tc.pair(); err != nil {
				failed = err
			}
		})
		if failed != nil {
			t.Fatalf("%s: %v", tc.name, failed)
		}
		t.Logf("%s and Release: %v allocations", tc.name, n)
		if n > tc.max {
			t.Errorf("%s and Release allocate %v times, more than %v", tc.name, n, tc.max)
		}
	}
}
