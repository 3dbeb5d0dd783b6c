package quorum

import (
	"context"
	"sync"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// vote is one node's answer to a request.
type vote uint8

const (
	// failed: the node returned an error; the outcome on it is unknown.
	failed vote = iota
	// yes: the node granted the hold (Acquire) or did what was asked
	// (Refresh, Release).
	yes
	// no: the node refused: the key is held by another owner (Acquire), or
	// this owner does not hold it (Refresh, Release).
	no
)

type answer struct {
	vote vote
	res  driver.Result // Acquire only
	err  error
}

func count(answers []answer) (yesN, noN, failedN int) {
	for _, a := range answers {
		switch a.vote {
		case yes:
			yesN++
		case no:
			noN++
		default:
			failedN++
		}
	}
	return
}

// grace bounds how long fanout waits for stragglers once the outcome is
// settled: as long again as the decision took, at least min and at most max
// (no upper bound if max is zero).
type grace struct{ min, max time.Duration }

// Graces: acquisitions and refreshes must not eat into the lease; a release
// waits longer, since a node whose release is cut short keeps the lock
// until its lease ends.
func graceFor(ttl time.Duration) grace { return grace{min: 5 * time.Millisecond, max: ttl / 10} }

var releaseGrace = grace{min: 50 * time.Millisecond}

// fanout calls call on every node at once and returns the answers, indexed
// like d.nodes. All calls run concurrently, so the total latency is that of
// the slowest node needed, not the sum.
//
// fanout does not wait long for nodes that cannot change the outcome: once
// a majority said yes, or a majority can no longer be reached, the remaining
// nodes get a grace period (see grace) and then their calls are cancelled. A
// node that is down or hung thus costs little and cannot eat up a lock's
// validity, while a node that is merely slower than the others still gets
// its answer in. fanout always waits until every call has returned (drivers
// return promptly once cancelled), so no call outlives it.
func (d *Driver) fanout(ctx context.Context, g grace, call func(ctx context.Context, n driver.Driver) answer) []answer {
	start := time.Now()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type reply struct {
		i int
		a answer
	}
	replies := make(chan reply, len(d.nodes))
	for i, n := range d.nodes {
		go func() { replies <- reply{i, call(cctx, n)} }()
	}
	answers := make([]answer, len(d.nodes))
	pending, yesN := len(d.nodes), 0
	var timer *time.Timer
	var timerC <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for pending > 0 {
		select {
		case r := <-replies:
			answers[r.i] = r.a
			pending--
			if r.a.vote == yes {
				yesN++
			}
			if timer == nil && pending > 0 && (yesN >= d.quorum || yesN+pending < d.quorum) {
				wait := max(time.Since(start), g.min)
				if g.max > 0 {
					wait = min(wait, g.max)
				}
				timer = time.NewTimer(wait)
				timerC = timer.C
			}
		case <-timerC:
			timerC = nil
			cancel() // the stragglers return promptly (driver contract)
		}
	}
	return answers
}

// cleanupMin is the least time a clean-up round (see each) gets.
const cleanupMin = 50 * time.Millisecond

// each calls call on the nodes selected by pick, all at once, and returns
// their errors, indexed like d.nodes (nil for nodes not picked). It is for
// clean-up rounds after a request that began at start: they get twice as
// long as the request took so far, at least cleanupMin, before their calls
// are cancelled, so that a node that is down cannot hold them up for long.
func (d *Driver) each(ctx context.Context, start time.Time, pick func(i int) bool, call func(ctx context.Context, n driver.Driver) error) []error {
	ctx, cancel := context.WithTimeout(ctx, max(2*time.Since(start), cleanupMin))
	defer cancel()
	errs := make([]error, len(d.nodes))
	var wg sync.WaitGroup
	for i, n := range d.nodes {
		if pick(i) {
			wg.Go(func() { errs[i] = call(ctx, n) })
		}
	}
	wg.Wait()
	return errs
}
