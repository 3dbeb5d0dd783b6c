package job_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/dlocktest/bounds"
	"github.com/dlockhq/dlock/job"
)

// TestHostileInput: the job panics and calls runtime.Goexit, and AtLeast,
// AtMost and the lock's TTL get 0, -1, math.MaxInt64, the store's maximum
// and one more. Every error is typed; a refused option is refused before
// the job runs, and nothing is left held but a hold AtLeast asked for.
func TestHostileInput(t *testing.T) {
	dlocktest.EachStore(t, bounds.Stores, func(t *testing.T, url string) {
		ctx := dlocktest.Ctx(t)
		c, admin := open(t, url), open(t, url)
		caps := c.Capabilities()
		n := 0
		key := func() string { n++; return fmt.Sprintf("job%d", n) }

		for _, goexit := range []bool{false, true} {
			k := key()
			bounds.Panics(t, goexit, func() {
				job.Run(ctx, c, k, func(context.Context) error {
					if goexit {
						runtime.Goexit()
					}
					panic("boom")
				})
			})
			bounds.NothingHeld(t, admin, k)
		}
		bounds.WantArg(t, job.Run(bounds.NilContext, c, key(), func(context.Context) error { return nil }), "ctx")
		bounds.WantArg(t, job.Run(ctx, nil, key(), func(context.Context) error { return nil }), "client")
		bounds.WantArg(t, job.Run(ctx, c, key(), nil), "fn")

		// run runs a job with opt; arg names the option in the *ArgError
		// expected unless ok. held: the key stays held after the job
		// (AtLeast).
		run := func(what string, ok, held bool, arg string, opt job.Option) {
			t.Helper()
			k, ran := key(), false
			err := job.Run(ctx, c, k, func(context.Context) error { ran = true; return nil }, opt)
			bounds.WantTyped(t, err, job.ErrSkipped)
			switch {
			case ok && (err != nil || !ran):
				t.Errorf("%s: Run = %v, ran %v; want the job run", what, err, ran)
			case !ok:
				bounds.WantArg(t, err, arg)
				if ran {
					t.Errorf("%s: the job ran; want the option refused first", what)
				}
			}
			if held {
				if _, err := admin.ForceRelease(ctx, k); err != nil {
					t.Error(err)
				}
			}
			bounds.NothingHeld(t, admin, k)
		}
		most := c.MaxReleaseAfter()
		for _, d := range bounds.Durations(most) {
			run(fmt.Sprintf("AtLeast(%v)", d), d == 0 || d == most, d == most, "at least", job.AtLeast(d))
		}
		for _, d := range bounds.Durations(caps.MaxTTL) {
			run(fmt.Sprintf("AtMost(%v)", d), d > 0, false, "at most", job.AtMost(d))
			run(fmt.Sprintf("WithTTL(%v)", d), d == caps.MaxTTL, false, "ttl", job.WithLockOptions(dlock.WithTTL(d)))
		}
	})
}
