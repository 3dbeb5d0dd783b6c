package quorum

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/inflight"
)

// vote is one node's answer to a request.
type vote uint8

const (
	// failed: the node returned an error, or had not answered when the
	// outcome was decided; the outcome on it is unknown.
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

// Time limits of the calls on one node.
//
// Redlock bounds each node's answer by a timeout that is small relative to
// the lease, so that a node that is down or hung costs little. Here a round
// does not wait for such a node at all once the others have decided the
// outcome (see fanout); the timeout bounds the calls that run on in the
// background (and so Close, which waits for them), and the rounds in which
// the hung nodes are the ones that must decide (a hung majority).
const (
	minNodeTimeout = 100 * time.Millisecond
	maxNodeTimeout = time.Second
)

// nodeTimeout returns the time limit of one call on one node for a lease of
// ttl: a tenth of the lease, at least minNodeTimeout (a loaded machine
// answers late), at most maxNodeTimeout and never more than the lease (a
// grant that comes later is worth nothing).
func nodeTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl/10, minNodeTimeout), maxNodeTimeout, max(ttl, time.Millisecond))
}

// releaseGrace is the least time Release gives the nodes still answering
// once a majority released the hold, so that every node that is up is rid
// of it when Release returns (see fanout).
const releaseGrace = 50 * time.Millisecond

// timed calls fn with ctx bounded by timeout.
func timed[T any](ctx context.Context, timeout time.Duration, fn func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return fn(ctx)
}

// errNoAnswer is wrapped by the answer of a node that had not answered
// when its round returned; its call finishes in the background.
var errNoAnswer = errors.New("no answer when the outcome was decided")

// fanout calls call(ctx, i) for every node i at once, each on a goroutine
// that Close waits for, and returns the answers, indexed like d.nodes. The
// calls must bound themselves (each node call runs under a node timeout, see
// nodeTimeout), so that every goroutine ends.
//
// fanout returns as soon as decided reports that the outcome is decided
// whatever the nodes still to answer say (see acquired and renewed).
// With grace > 0 it then waits for the remaining nodes for as long again as
// the decision took, at least grace and at most until they answer (their
// calls are bounded), unless every one of them is stalled (its latest call
// ran out of time, or it let a grace pass without answering, see note) and
// waitStalled is false. With grace = 0 it returns at once. It also returns
// when ctx ends. The nodes that have not answered then count as failed
// (with an error wrapping errNoAnswer, or ctx's error), and their calls run
// to their end in the background: a node that is down or hung costs a
// round nothing once the others have decided, and a hung driver that does
// not return when cancelled (go-redis watches deadlines, not cancellation)
// holds up nobody.
//
// Whatever such a call leaves on its node is cleaned up by the calls that
// come after it: a release of a request on a node waits for an acquisition
// of the same request on that node still in flight (see acquireOn and
// releaseOn), so that it cannot overtake it.
func (d *Driver) fanout(ctx context.Context, grace time.Duration, waitStalled bool, decided func(yesN, noN, pending int) bool, call func(ctx context.Context, i int) answer) []answer {
	start := time.Now()
	type reply struct {
		i int
		a answer
	}
	replies := make(chan reply, len(d.nodes)) // the calls never block
	for i := range d.nodes {
		d.pool.Go(func() {
			a := call(ctx, i)
			d.note(ctx, i, a.err)
			replies <- reply{i, a}
		})
	}
	answers := make([]answer, len(d.nodes))
	answered := make([]bool, len(d.nodes))
	pending, yesN, noN := len(d.nodes), 0, 0
	var graceC <-chan time.Time
	for pending > 0 {
		select {
		case r := <-replies:
			answers[r.i], answered[r.i] = r.a, true
			pending--
			switch r.a.vote {
			case yes:
				yesN++
			case no:
				noN++
			}
			if graceC != nil || pending == 0 || !decided(yesN, noN, pending) {
				continue
			}
			if grace <= 0 || !waitStalled && d.allStalled(answered) {
				return giveUp(answers, answered, errNoAnswer)
			}
			defer d.markStalled(answered)
			t := time.NewTimer(max(time.Since(start), grace))
			defer t.Stop()
			graceC = t.C
		case <-graceC:
			return giveUp(answers, answered, errNoAnswer)
		case <-ctx.Done():
			return giveUp(answers, answered, context.Cause(ctx))
		}
	}
	return answers
}

// note records whether node i is stalled: whether its latest call, made
// on ctx, with error err, ran out of its node timeout (a node that is hung,
// or too slow to matter); a node that does not answer within a round's
// grace is marked stalled too (see markStalled). An answer, an error from
// the node included, clears it; a call that was not made, or ended with
// ctx, says nothing.
func (d *Driver) note(ctx context.Context, i int, err error) {
	switch {
	case err == nil:
		d.stalled[i].Store(false)
	case errors.Is(err, inflight.ErrBusy), errors.Is(err, errNotAsked), ctx.Err() != nil:
	case errors.Is(err, context.DeadlineExceeded):
		d.stalled[i].Store(true)
	default:
		d.stalled[i].Store(false)
	}
}

// markStalled marks the nodes that have not answered, after a grace, as
// stalled (see note): a later round does not wait for them until they
// answer.
func (d *Driver) markStalled(answered []bool) {
	for i, ok := range answered {
		if !ok {
			d.stalled[i].Store(true)
		}
	}
}

// allStalled reports whether every node that has not answered is stalled
// (see note).
func (d *Driver) allStalled(answered []bool) bool {
	for i, ok := range answered {
		if !ok && !d.stalled[i].Load() {
			return false
		}
	}
	return true
}

// acquired reports whether the outcome of an acquisition is decided, with
// yesN grants and noN refusals so far and pending nodes still to answer: a
// majority granted it (acquired), or it can no longer get a majority and
// either a majority has answered (not acquired) or a majority can no longer
// answer (an error).
func (d *Driver) acquired(yesN, noN, pending int) bool {
	return yesN >= d.quorum ||
		yesN+pending < d.quorum && (yesN+noN >= d.quorum || yesN+noN+pending < d.quorum)
}

// renewed reports whether the outcome of a refresh or release is decided: a
// majority did it, or so many nodes do not hold the lock that no majority
// can, or neither can happen any more (an error).
func (d *Driver) renewed(yesN, noN, pending int) bool {
	most := len(d.nodes) - d.quorum // the most refusals a held lock can get
	return yesN >= d.quorum || noN > most || yesN+pending < d.quorum && noN+pending <= most
}

// giveUp fills in the answers of the nodes that have not answered as
// failed, with an error wrapping cause.
func giveUp(answers []answer, answered []bool, cause error) []answer {
	for i := range answers {
		if !answered[i] {
			answers[i] = answer{vote: failed, err: fmt.Errorf("%w", cause)}
		}
	}
	return answers
}

// all calls call(i) for every node at once, on workers that Close waits
// for, and returns once every call has returned, or with ctx's error once
// ctx has ended (the calls then finish in the background, bounded by the
// nodes' own timeouts, and their results are not read).
func (d *Driver) all(ctx context.Context, call func(i int)) error {
	done := make(chan struct{}, len(d.nodes)) // the calls never block
	for i := range d.nodes {
		d.pool.Go(func() {
			call(i)
			done <- struct{}{}
		})
	}
	for range d.nodes {
		select {
		case <-done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// each calls call(ctx, i) for the nodes i in picked, all at once, and
// returns their errors, indexed like d.nodes (nil for the others), once
// every one has answered or ctx has ended (the others fail with ctx's
// error and finish in the background). It is for the clean-up rounds whose
// calls are bounded by node timeouts.
func (d *Driver) each(ctx context.Context, picked []int, call func(ctx context.Context, i int) error) []error {
	type reply struct {
		i   int
		err error
	}
	replies := make(chan reply, len(picked))
	for _, i := range picked {
		d.pool.Go(func() { replies <- reply{i, call(ctx, i)} })
	}
	errs := make([]error, len(d.nodes))
	done := make([]bool, len(d.nodes))
	for range picked {
		select {
		case r := <-replies:
			errs[r.i], done[r.i] = r.err, true
		case <-ctx.Done():
			for _, i := range picked {
				if !done[i] {
					errs[i] = fmt.Errorf("%w: %w", errNoAnswer, context.Cause(ctx))
				}
			}
			return errs
		}
	}
	return errs
}

// Ordering on one node.
//
// A call that a round stopped waiting for may still reach its node after
// the calls of a later round: a release could overtake the acquisition it
// should undo (the late grant would then stay until its lease ends), and a
// clean-up release left by a failed attempt could remove the hold that a
// later attempt of the same owner has just been granted there. So the
// Driver orders the calls of one request (one key and owner) on one node in
// an inflight.Order: each waits until the calls before it there have
// returned (or given up at their node timeout); an acquisition behind two
// calls is not made (the node counts as failed for it: it is slow or hung),
// nor is a clean-up right behind another. A call that gave up may still sit
// in a hung node's socket; the release, sent after it, reaches the node
// after it.

// opKey names the calls of one request on one node.
type opKey struct {
	key, owner string
	node       int
}

// register enters a call of req on node i in the order of the request's
// calls there (see Ordering on one node), or returns nil if the call must
// not be made. Register before the call is handed to another goroutine, so
// that the order of registration is the order in which the calls were
// issued.
func (d *Driver) register(req driver.Request, i int, kind inflight.Kind) *inflight.Turn {
	return d.turns.Enter(opKey{req.Key, req.Owner, i}, kind)
}

// registerAll registers a call of req of kind on every node.
func (d *Driver) registerAll(req driver.Request, kind inflight.Kind) []*inflight.Turn {
	turns := make([]*inflight.Turn, len(d.nodes))
	for i := range d.nodes {
		turns[i] = d.register(req, i, kind)
	}
	return turns
}

// acquireOn acquires req on node i within timeout, in its turn (once the
// calls registered before it have ended, waited for at most timeout too); a
// nil turn fails with inflight.ErrBusy.
func (d *Driver) acquireOn(ctx context.Context, t *inflight.Turn, i int, req driver.Request, timeout time.Duration) (driver.Result, error) {
	defer t.End()
	// The turn may come only after a clean-up that retries on a node that
	// is down (see cleanupOn): the node then counts as not answering.
	turn, cancel := context.WithTimeout(ctx, timeout)
	err := t.Wait(turn)
	cancel()
	if err != nil {
		return driver.Result{}, err
	}
	return timed(ctx, timeout, func(ctx context.Context) (driver.Result, error) { return d.nodes[i].Acquire(ctx, req) })
}

// releaseOn releases req on node i within timeout, in its turn (once the
// calls registered before it have ended). If ctx ends first, or the node
// does not answer, the release is left to a clean-up in the background (see
// cleanupOn).
func (d *Driver) releaseOn(ctx context.Context, t *inflight.Turn, i int, req driver.Request, timeout time.Duration) error {
	err := t.Wait(ctx)
	if err == nil {
		_, err = timed(ctx, timeout, func(ctx context.Context) (struct{}, error) { return struct{}{}, d.nodes[i].Release(ctx, req) })
	}
	t.End()
	if err != nil && !errors.Is(err, driver.ErrNotOwner) {
		d.cleanupOn(i, req)
	}
	return err
}

// cleanupOn releases req on node i in the background, after the calls
// registered before it there, unless the latest call registered there is a
// clean-up already.
//
// A call that gave up on a hung node may still be waiting in its socket,
// and run when the node resumes; a release sent while the node is hung
// may never leave the client (a new connection's handshake hangs too). So
// the clean-up tries again, with growing pauses, until the node answers,
// until a lease of req.TTL has passed (what a node that stayed hung as long
// does with the request when it resumes is left to the lease), or until
// Close. Failures are logged only: what stays expires with its lease.
func (d *Driver) cleanupOn(i int, req driver.Request) {
	t := d.register(req, i, inflight.Cleanup)
	if t == nil {
		return
	}
	d.pool.Go(func() {
		defer t.End()
		_ = t.Wait(context.Background()) // the calls before it are bounded
		timeout := nodeTimeout(req.TTL)
		giveUp := time.Now().Add(req.TTL)
		pause := timeout
		for failures := 0; ; failures++ {
			_, err := timed(context.Background(), timeout, func(ctx context.Context) (struct{}, error) {
				return struct{}{}, d.nodes[i].Release(ctx, req)
			})
			if err == nil || errors.Is(err, driver.ErrNotOwner) {
				if failures == 0 {
					return
				}
				// The node answers again after it did not: a call
				// that waited in its socket may run after this
				// release (a resumed server does not serve its
				// connections in the order they were sent on).
				// Release once more, a node timeout later.
				failures, pause = -1, timeout
			} else if time.Now().Add(pause).After(giveUp) {
				d.log.Warn("quorum: cannot release a hold left on a node; its lease will expire",
					"key", req.Key, "node", d.name(i), "err", err)
				return
			}
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-d.closing:
				t.Stop()
				return
			}
			pause = min(2*pause, maxCleanupPause)
		}
	})
}

// maxCleanupPause is the longest pause between the attempts of a clean-up.
const maxCleanupPause = 5 * time.Second
