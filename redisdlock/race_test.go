package redisdlock_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// TestRacingReleases checks, in every mode on a standalone server and a
// Cluster, that a Release of an owner that was just released fails with
// driver.ErrNotOwner and nothing else, and that of two concurrent Releases
// of one hold exactly one succeeds and the other fails with ErrNotOwner
// only (in Transaction and Legacy modes the loser's EXEC finds the watched
// key changed: that too means the hold is gone).
func TestRacingReleases(t *testing.T) {
	type variant struct {
		mode  string
		hold  driver.Mode
		limit int
	}
	variants := []variant{
		{"script", driver.Exclusive, 0},
		{"script", driver.Shared, 0},
		{"script", driver.Semaphore, 3},
		{"tx", driver.Exclusive, 0},
		{"legacy", driver.Exclusive, 0},
	}
	for _, name := range modeServers {
		for _, v := range variants {
			t.Run(fmt.Sprintf("%s/%s/%s", name, v.mode, v.hold), func(t *testing.T) {
				srv := testsrv.Get(t, name)
				prefix := testPrefix(t)
				a := openURL(t, withParams(srv.URL, "prefix", prefix, "mode", v.mode))
				defer a.Close()
				b := openURL(t, withParams(srv.URL, "prefix", prefix, "mode", v.mode))
				defer b.Close()
				ctx := testCtx(t)
				newReq := func() driver.Request {
					r := request("k", time.Minute)
					r.Mode, r.Limit = v.hold, v.limit
					return r
				}
				// Another holder keeps a lock of the general form alive
				// (shared and semaphore), so that releases change it
				// rather than delete it.
				if v.hold != driver.Exclusive {
					mustAcquire(t, a, newReq(), true)
				}
				req := newReq()
				mustAcquire(t, a, req, true)
				if err := a.Release(ctx, req); err != nil {
					t.Fatalf("Release = %v", err)
				}
				if err := a.Release(ctx, req); !errors.Is(err, driver.ErrNotOwner) {
					t.Fatalf("second Release = %v; want an error wrapping ErrNotOwner", err)
				}
				for round := range 40 {
					req := newReq()
					mustAcquire(t, a, req, true)
					start := make(chan struct{})
					errs := make([]error, 2)
					var wg sync.WaitGroup
					for i, d := range []driver.Driver{a, b} {
						wg.Go(func() {
							<-start
							errs[i] = d.Release(ctx, req)
						})
					}
					close(start)
					wg.Wait()
					ok := 0
					for _, err := range errs {
						switch {
						case err == nil:
							ok++
						case !errors.Is(err, driver.ErrNotOwner):
							t.Fatalf("round %d: racing Release = %v; want nil or ErrNotOwner", round, err)
						}
					}
					if ok != 1 {
						t.Fatalf("round %d: racing Releases = %v; want exactly one success", round, errs)
					}
				}
			})
		}
	}
}
