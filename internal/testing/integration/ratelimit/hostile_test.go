package ratelimit_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/dlocktest/bounds"
	"github.com/dlockhq/dlock/ratelimit"
)

// TestHostileInput: the window and n get 0, -1, math.MaxInt64, the store's
// maximum and one more. A value New accepts admits a call; one it refuses
// is an *ArgError (or, for n above 1 without semaphores,
// dlock.ErrUnsupported) and leaves nothing held. On memcached, whose lease
// clock counts whole seconds, a window near math.MaxInt64 must not wrap
// around when the two seconds are added.
func TestHostileInput(t *testing.T) {
	dlocktest.EachStore(t, bounds.Stores, func(t *testing.T, url string) {
		ctx := dlocktest.Ctx(t)
		c, admin := open(t, url), open(t, url)
		caps := c.Capabilities()
		n := 0
		key := func() string { n++; return fmt.Sprintf("rate%d", n) }

		// try makes a Limiter and, if New accepts it, lets one call in
		// and frees its slot. arg names the value in the *ArgError
		// expected unless ok.
		try := func(what string, ok bool, arg string, n int, window time.Duration) {
			t.Helper()
			k := key()
			l, err := ratelimit.New(c, k, n, window)
			bounds.WantTyped(t, err)
			switch {
			case ok && err != nil:
				t.Errorf("%s: New = %v", what, err)
			case ok:
				if allowed, err := l.Allow(ctx); !allowed || err != nil {
					t.Errorf("%s: Allow = %v, %v; want the call admitted", what, allowed, err)
				}
				if _, err := admin.ForceRelease(ctx, k); err != nil {
					t.Error(err)
				}
			case n > 1 && !caps.Modes.Has(driver.Semaphore) && arg == "n" && n <= caps.MaxLimit:
				if !errors.Is(err, dlock.ErrUnsupported) {
					t.Errorf("%s: New = %v; want ErrUnsupported", what, err)
				}
			default:
				bounds.WantArg(t, err, arg)
			}
			bounds.NothingHeld(t, admin, k)
		}
		most := c.MaxReleaseAfter()
		for _, w := range bounds.Durations(most) {
			try(fmt.Sprintf("window %v", w), w == most, "window", 1, w)
		}
		for _, n := range bounds.Counts(caps.MaxLimit) {
			try(fmt.Sprintf("n %d", n), n == caps.MaxLimit && caps.Modes.Has(driver.Semaphore), "n", n, time.Minute)
		}
		l, err := ratelimit.New(c, key(), 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.Allow(bounds.NilContext)
		bounds.WantArg(t, err, "ctx")
		bounds.WantArg(t, l.Wait(bounds.NilContext), "ctx")
		_, err = ratelimit.New(nil, key(), 1, time.Minute)
		bounds.WantArg(t, err, "client")
	})
}
