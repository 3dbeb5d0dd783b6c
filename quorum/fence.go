package quorum

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/inflight"
)

// fenceSuffix turns a lock key into its fence key. The unit separator keeps
// it apart from keys people choose.
const fenceSuffix = "\x1fquorum-fence"

// Fencing tokens (see the package documentation).
//
// Over nodes that are TokenRaisers, the token comes from the lock round and
// settleToken makes enough nodes count up to it. Over other nodes the
// holder takes its token in a second round, on a fence key that only
// holders of the lock acquire: after winning the majority it acquires the
// fence key on every node at once, and the token is the largest fence
// token. Only one client at a time holds the lock, so the fence counters of
// all nodes that are up advance together, and the largest of them grows
// from one holder to the next. A node that was down lags behind, which does
// not hurt the largest. What does hurt: the node with the largest counter
// being unreachable after others lagged, or losing its counter in a restart
// without persistence. The fence token is therefore monotonic while every
// node is up and keeps its data, and is never a safe fencing token.
//
// The fence hold has half the lock's lease and is renewed and released with
// the lock (in the same round trips), so it is gone before a lock that was
// not renewed expires and the next holder comes for the fence. A release
// reaches the nodes in parallel, so the next holder can win the lock on
// some nodes while the previous holder's fence release is still on its way
// to another: the next holder clears that stale fence (holding the lock, it
// knows the fence is stale) and takes its own.

// TokenRaiser is implemented by nodes whose lock tokens for a key come from
// a counter of that key which only grows (redisdlock's fencing counter).
// RaiseToken makes the counter of key at least token, and leaves a larger
// one alone, so that the node's next grant of key has a larger token. It
// must not change anything else: not the lock, nor its holders.
//
// When every node is a TokenRaiser, Acquire takes the fencing token from
// its one round of lock requests, raising the counters of the nodes that
// lag behind (see Fencing tokens in the package documentation); otherwise
// it takes the token in a second round, on a fence key.
type TokenRaiser interface {
	RaiseToken(ctx context.Context, key string, token uint64) error
}

// raisers reports whether every node is a TokenRaiser.
func raisers(nodes []driver.Driver) bool {
	for _, n := range nodes {
		if _, ok := n.(TokenRaiser); !ok {
			return false
		}
	}
	return true
}

// tokenQuorum returns the number of nodes whose counters must have reached
// a holder's token before Acquire hands it out: N - majority + 1, the
// fewest nodes that every majority includes one of.
func (d *Driver) tokenQuorum() int { return len(d.nodes) - d.quorum + 1 }

// settleToken makes sure that at least tokenQuorum nodes count up to
// token, the largest lock token of the nodes that granted req (answers):
// those that granted it with that token do, and the others that granted
// it are raised to it (TokenRaiser) while req holds them. Every later
// holder's majority then includes a node whose next grant counts past
// token. With the counters in step (the usual case) it sends nothing.
// It returns an error when too few nodes could be raised: the token could
// then be smaller than a later holder's, and the caller releases.
func (d *Driver) settleToken(ctx context.Context, req driver.Request, answers []answer, token uint64) error {
	at := 0
	var behind []int
	for i, a := range answers {
		switch {
		case a.vote != yes:
		case a.res.Token >= token:
			at++
		default:
			behind = append(behind, i)
		}
	}
	if len(behind) == 0 {
		if at < d.tokenQuorum() {
			return fmt.Errorf("the fencing token %d is counted by %d nodes, %d needed", token, at, d.tokenQuorum())
		}
		return nil
	}
	// Raise every node that lags, not just enough of them, so that the
	// counters are in step again for the next holder.
	timeout := nodeTimeout(req.TTL)
	var errs []error
	for i, err := range d.each(ctx, behind, func(ctx context.Context, i int) error {
		return timed1(ctx, timeout, func(ctx context.Context) error {
			return d.nodes[i].(TokenRaiser).RaiseToken(ctx, req.Key, token)
		})
	}) {
		if !slices.Contains(behind, i) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.name(i), err))
			continue
		}
		at++
	}
	if at < d.tokenQuorum() {
		return fmt.Errorf("the fencing token %d reached %d nodes, %d needed: %w", token, at, d.tokenQuorum(), errors.Join(errs...))
	}
	if len(errs) > 0 {
		d.log.Warn("quorum: a node's fencing counter could not be raised; the others count far enough", "key", req.Key, "err", errors.Join(errs...))
	}
	return nil
}

// timed1 is timed for a call without a result.
func timed1(ctx context.Context, timeout time.Duration, fn func(context.Context) error) error {
	_, err := timed(ctx, timeout, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}

// fenceReq returns the request for req's fence key.
func (d *Driver) fenceReq(req driver.Request) driver.Request {
	f := req
	f.Key = req.Key + fenceSuffix
	f.TTL = min(req.TTL, max(req.TTL/2, d.nodeMinTTL))
	f.Queue = false
	return f
}

// fenceGrace is the least time the fence round waits for the nodes still
// answering once a majority granted the fence.
const fenceGrace = 5 * time.Millisecond

// takeToken acquires req's fence key on every node and returns the largest
// fence token of the nodes that granted it by the time a majority did. A
// node that refuses holds the fence of an earlier holder whose release is
// still under way: takeToken clears it there (if the node is a
// driver.ForceReleaser) and takes it. If no node granted the fence but some
// refused it, ok is false and the caller falls back to the lock tokens. If
// every node failed, it returns their errors.
//
// The round has time limits of its own (node timeouts for the fence's
// lease), not what is left of the lock round's: a node that is hung cost
// the lock round nothing, and costs this one nothing either.
func (d *Driver) takeToken(ctx context.Context, req driver.Request) (token uint64, ok bool, err error) {
	f := d.fenceReq(req)
	timeout := nodeTimeout(f.TTL)
	turns := d.registerAll(f, inflight.Acquire)
	// Decided once a majority granted the fence; the others get as long
	// again (at least fenceGrace), stalled ones too, so that the largest
	// counter of the nodes that are up is counted. A hung node costs that
	// grace.
	granted := func(yesN, _, _ int) bool { return yesN >= d.quorum }
	answers := d.fanout(ctx, fenceGrace, true, granted, func(ctx context.Context, i int) answer {
		defer turns[i].End()
		if err := turns[i].Wait(ctx); err != nil {
			return answer{vote: failed, err: err}
		}
		n := d.nodes[i]
		res, err := timed(ctx, timeout, func(ctx context.Context) (driver.Result, error) { return n.Acquire(ctx, f) })
		if fr, ok := n.(driver.ForceReleaser); ok && err == nil && !res.Acquired {
			// Only holders of the lock take its fence, and we hold the
			// lock: the fence belongs to an earlier holder whose release
			// has not reached this node yet. Clear it, or this node's
			// counter would fall behind.
			if _, err = timed(ctx, timeout, func(ctx context.Context) (int, error) { return fr.ForceRelease(ctx, f.Key) }); err == nil {
				res, err = timed(ctx, timeout, func(ctx context.Context) (driver.Result, error) { return n.Acquire(ctx, f) })
			}
		}
		switch {
		case err != nil:
			return answer{vote: failed, err: err}
		case res.Acquired:
			return answer{vote: yes, res: res}
		default:
			return answer{vote: no}
		}
	})
	got, refused, _ := count(answers)
	for i, a := range answers {
		switch {
		case a.vote == yes:
			token = max(token, a.res.Token)
		case a.vote == failed && !errors.Is(a.err, inflight.ErrBusy):
			// The node may grant the fence yet (a call that waited
			// in a hung node's socket) or have granted it with the
			// answer lost: release it there once its call returned,
			// as the lock round does with its own holds.
			d.cleanupOn(i, f)
		}
	}
	switch {
	case got > 0:
		return token, true, nil
	case refused > 0:
		return 0, false, nil
	default:
		return 0, false, d.errs(answers)
	}
}

// withFence calls op for req and, unless fencing is off, for req's fence key
// at the same time, and returns the result for req. The fence's result does
// not matter: it may have expired or never been taken.
func (d *Driver) withFence(ctx context.Context, req driver.Request, op func(context.Context, driver.Request) error) error {
	if !d.fence {
		return op(ctx, req)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = op(ctx, d.fenceReq(req)) })
	err := op(ctx, req)
	wg.Wait()
	return err
}

// isFence reports whether key is a fence key.
func isFence(key string) bool {
	return len(key) > len(fenceSuffix) && key[len(key)-len(fenceSuffix):] == fenceSuffix
}
