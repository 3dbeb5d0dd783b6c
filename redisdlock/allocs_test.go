//go:build !race

package redisdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/redisdlock"
)

// TestUncontendedAllocs counts the allocations of an uncontended Lock and
// Release through dlock on a Redis server in Script mode, go-redis's
// included, so that they do not grow again unnoticed. (The race detector
// allocates: the test builds without it.)
func TestUncontendedAllocs(t *testing.T) {
	const max = 40
	srv := testsrv.Get(t, testsrv.Redis)
	rc := newClient(srv.Addr)
	defer rc.Close()
	d, err := redisdlock.New(rc, redisdlock.WithPrefix(testPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	ttl := dlock.WithTTL(30 * time.Second)
	var failed error
	n := testing.AllocsPerRun(200, func() {
		l, err := c.Lock(ctx, "allocs", ttl)
		if err == nil {
			err = l.Release(ctx)
		}
		if err != nil {
			failed = err
		}
	})
	if failed != nil {
		t.Fatal(failed)
	}
	t.Logf("Lock and Release: %v allocations", n)
	if n > max {
		t.Errorf("Lock and Release allocate %v times, more than %v", n, max)
	}
}
