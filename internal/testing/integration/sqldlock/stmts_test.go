package sqldlock_test

import (
	"testing"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// TestForceReleaseCounts checks that ForceRelease counts the live holds of
// both tables (an Exclusive hold, readers), not queue entries or expired
// holds, and leaves no row of the key.
func TestForceReleaseCounts(t *testing.T) {
	forEach(t, func(t *testing.T, s store) {
		d, ctx := s.open(t), tctx(t)
		for i, mode := range []driver.Mode{driver.Shared, driver.Shared, driver.Exclusive} {
			r := req("shared", time.Minute)
			r.Mode, r.Queue = mode, true
			if res, err := d.Acquire(ctx, r); err != nil || res.Acquired != (i < 2) {
				t.Fatalf("Acquire %d (%s) = %+v, %v", i, mode, res, err)
			}
		}
		mustAcquire(t, d, req("excl", time.Minute))
		for key, want := range map[string]int{"shared": 2, "excl": 1} {
			if n, err := d.ForceRelease(ctx, key); err != nil || n != want {
				t.Errorf("ForceRelease(%q) = %d, %v; want %d", key, n, err, want)
			}
			mustBeEmpty(t, d, key)
		}
	})
}
