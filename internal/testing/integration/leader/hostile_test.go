package leader_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/dlocktest/bounds"
	"github.com/dlockhq/dlock/leader"
)

// TestHostileInput: nil arguments, and the TTL of Campaign and the poll
// interval of Observe at 0, -1, math.MaxInt64, the store's maximum and one
// more. Every error is typed (dlock.ErrUnsupported on memcached, which
// cannot list holders), and nothing is left held.
func TestHostileInput(t *testing.T) {
	dlocktest.EachStore(t, bounds.Stores, func(t *testing.T, url string) {
		ctx := dlocktest.Ctx(t)
		c, admin := dlocktest.Open(t, url), dlocktest.Open(t, url)
		caps := c.Capabilities()
		n := 0
		key := func() string { n++; return fmt.Sprintf("lead%d", n) }

		_, err := leader.Campaign(bounds.NilContext, c, key(), "v")
		bounds.WantArg(t, err, "ctx")
		_, err = leader.Campaign(ctx, nil, key(), "v")
		bounds.WantArg(t, err, "client")
		_, err = leader.Observe(ctx, nil, key())
		bounds.WantArg(t, err, "client")

		for _, d := range bounds.Durations(caps.MaxTTL) {
			k := key()
			term, err := leader.Campaign(ctx, c, k, "v", leader.WithTTL(d))
			bounds.WantTyped(t, err)
			switch {
			case errors.Is(err, dlock.ErrUnsupported):
			case d == 0 || d == caps.MaxTTL:
				if err != nil {
					t.Errorf("Campaign with WithTTL(%v) = %v", d, err)
				} else if err := term.Resign(ctx); err != nil {
					t.Errorf("Resign: %v", err)
				}
			default:
				bounds.WantArg(t, err, "ttl")
			}
			bounds.NothingHeld(t, admin, k)

			octx, cancel := context.WithCancel(ctx)
			ch, err := leader.Observe(octx, c, k, leader.WithPollInterval(d))
			bounds.WantTyped(t, err)
			switch {
			case errors.Is(err, dlock.ErrUnsupported):
			case d > 0:
				if err != nil {
					t.Errorf("Observe with WithPollInterval(%v) = %v", d, err)
					break
				}
				if l := <-ch; l.Elected() {
					t.Errorf("Observe delivered %+v; want nobody leading", l)
				}
				cancel()
				for range ch { // closed once octx has ended
				}
			default:
				bounds.WantArg(t, err, "poll interval")
			}
			cancel()
		}
	})
}
