package fill_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/fill"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/dlocktest/bounds"
)

// TestHostileInput: each of the cache's functions panics and calls
// runtime.Goexit in turn (Load on its first call, before the lock, and on
// its second, under it), nil arguments are given, and the lock's TTL gets
// 0, -1, math.MaxInt64, the store's maximum and one more. Every error is
// typed, nothing is left held, and a refused argument is refused before
// Load is called.
func TestHostileInput(t *testing.T) {
	dlocktest.EachStore(t, bounds.Stores, func(t *testing.T, url string) {
		ctx := dlocktest.Ctx(t)
		c, admin := dlocktest.Open(t, url), dlocktest.Open(t, url)
		n := 0
		key := func() string { n++; return fmt.Sprintf("entry%d", n) }

		// cache returns a Cache that misses and whose step fn fails by
		// calling fail (at Load's call-th call).
		cache := func(step string, call int, fail func()) (fill.Cache[int], *int) {
			loads := 0
			return fill.Cache[int]{
				Load: func(context.Context) (int, bool, error) {
					if loads++; step == "Load" && loads == call {
						fail()
					}
					return 0, false, nil
				},
				Compute: func(context.Context) (int, error) {
					if step == "Compute" {
						fail()
					}
					return 1, nil
				},
				Store: func(context.Context, int) error {
					if step == "Store" {
						fail()
					}
					return nil
				},
			}, &loads
		}
		for _, goexit := range []bool{false, true} {
			fail := func() { panic("boom") }
			if goexit {
				fail = runtime.Goexit
			}
			for _, s := range []struct {
				step string
				call int
			}{{"Load", 1}, {"Load", 2}, {"Compute", 0}, {"Store", 0}} {
				k := key()
				cc, _ := cache(s.step, s.call, fail)
				bounds.Panics(t, goexit, func() { fill.Once(ctx, c, k, cc) })
				bounds.NothingHeld(t, admin, k)
			}
		}

		cc, loads := cache("", 0, nil)
		_, err := fill.Once(bounds.NilContext, c, key(), cc)
		bounds.WantArg(t, err, "ctx")
		_, err = fill.Once(ctx, nil, key(), cc)
		bounds.WantArg(t, err, "client")
		if *loads != 0 {
			t.Errorf("Load was called %d times with a nil argument; want none", *loads)
		}

		caps := c.Capabilities()
		for _, d := range bounds.Durations(caps.MaxTTL) {
			k := key()
			cc, _ := cache("", 0, nil)
			v, err := fill.Once(ctx, c, k, cc, dlock.WithTTL(d))
			bounds.WantTyped(t, err)
			switch {
			case d == caps.MaxTTL && (err != nil || v != 1):
				t.Errorf("WithTTL(%v): Once = %d, %v; want 1", d, v, err)
			case d != caps.MaxTTL:
				bounds.WantArg(t, err, "ttl")
			}
			bounds.NothingHeld(t, admin, k)
		}
	})
}
