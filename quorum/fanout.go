package quorum

import (
	"context"
	"errors"
	"fmt"
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
// its answer in. When ctx ends, every call still running is cancelled.
//
// fanout returns as soon as it has cancelled the calls still running: a
// driver may run on after its context is cancelled until its own network
// timeout ends (go-redis watches deadlines, not cancellation), and waiting
// for it would hold every call of the quorum up for as long as one node
// hangs. Those calls count as failed, with an error wrapping the context's
// error, and finish in the background. A node that grants an Acquire after
// it was given up keeps that hold until its lease ends, as a node whose
// Release is cut short does: a minority, which a majority never counts.
func (d *Driver) fanout(ctx context.Context, g grace, call func(ctx context.Context, n driver.Driver) answer) []answer {
	start := time.Now()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type reply struct {
		i int
		a answer
	}
	replies := make(chan reply, len(d.nodes)) // the abandoned calls never block
	for i, n := range d.nodes {
		go func() { replies <- reply{i, call(cctx, n)} }()
	}
	answers := make([]answer, len(d.nodes))
	answered := make([]bool, len(d.nodes))
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
			answers[r.i], answered[r.i] = r.a, true
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
			cancel()
			return giveUp(answers, answered, cctx)
		case <-ctx.Done():
			return giveUp(answers, answered, ctx)
		}
	}
	return answers
}

// errNoAnswer is wrapped by the answer of a node whose call fanout or each
// stopped waiting for.
var errNoAnswer = errors.New("no answer before the call was given up")

// giveUp fills in the answers of the nodes that have not answered as
// failed, with an error wrapping ctx's.
func giveUp(answers []answer, answered []bool, ctx context.Context) []answer {
	for i := range answers {
		if !answered[i] {
			answers[i] = answer{vote: failed, err: noAnswer(ctx)}
		}
	}
	return answers
}

func noAnswer(ctx context.Context) error {
	return fmt.Errorf("%w: %w", errNoAnswer, context.Cause(ctx))
}

// cleanupMin is the least time a clean-up round (see each) gets.
const cleanupMin = 50 * time.Millisecond

// each calls call on the nodes selected by pick, all at once, and returns
// their errors, indexed like d.nodes (nil for nodes not picked). It is for
// clean-up rounds after a request that began at start: they get twice as
// long as the request took so far, at least cleanupMin, before their calls
// are cancelled, so that a node that is down cannot hold them up for long.
// As fanout does, each does not wait for calls that run on after they were
// cancelled: they fail with an error wrapping errNoAnswer.
func (d *Driver) each(ctx context.Context, start time.Time, pick func(i int) bool, call func(ctx context.Context, n driver.Driver) error) []error {
	ctx, cancel := context.WithTimeout(ctx, max(2*time.Since(start), cleanupMin))
	defer cancel()
	type reply struct {
		i   int
		err error
	}
	replies := make(chan reply, len(d.nodes))
	errs := make([]error, len(d.nodes))
	pending := make(map[int]bool)
	for i, n := range d.nodes {
		if pick(i) {
			pending[i] = true
			go func() { replies <- reply{i, call(ctx, n)} }()
		}
	}
	for len(pending) > 0 {
		select {
		case r := <-replies:
			errs[r.i] = r.err
			delete(pending, r.i)
		case <-ctx.Done():
			for i := range pending {
				errs[i] = noAnswer(ctx)
			}
			return errs
		}
	}
	return errs
}
