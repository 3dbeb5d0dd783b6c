package quorum

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// fenceSuffix turns a lock key into its fence key. The unit separator keeps
// it apart from keys people choose.
const fenceSuffix = "\x1fquorum-fence"

// Fencing tokens.
//
// Every node counts acquisitions per key, but not in step: a node that
// granted the lock to the loser of a split vote has counted one more than
// the others, so the largest token of one majority can be below the largest
// of the previous holder's majority. The drivertest suite sees that within a
// fraction of a second of contention.
//
// So the holder takes its token in a second round, on a fence key that only
// holders of the lock acquire: after winning the majority it acquires the
// fence key on every node at once, and the token is the largest fence token.
// Only one client at a time holds the lock, so the fence counters of all
// nodes that are up advance together, and the largest of them grows from
// one holder to the next. A node that was down lags behind, which does not
// hurt the largest. What does hurt: the node with the largest counter being
// unreachable after others lagged, or losing its counter in a restart
// without persistence. The token is therefore monotonic while every node is
// up and keeps its data, and is never a safe fencing token.
//
// The fence hold has half the lock's lease and is renewed and released with
// the lock (in the same round trips), so it is gone before a lock that was
// not renewed expires and the next holder comes for the fence. A release
// reaches the nodes in parallel, so the next holder can win the lock on
// some nodes while the previous holder's fence release is still on its way
// to another: the next holder clears that stale fence (holding the lock, it
// knows the fence is stale) and takes its own.

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
	slots := d.registerAll(f, opAcquire)
	// Decided once a majority granted the fence; the others get as long
	// again (at least fenceGrace), stalled ones too, so that the largest
	// counter of the nodes that are up is counted. A hung node costs that
	// grace.
	granted := func(yesN, _, _ int) bool { return yesN >= d.quorum }
	answers := d.fanout(ctx, fenceGrace, true, granted, func(ctx context.Context, i int) answer {
		sl := slots[i]
		if sl == nil {
			return answer{vote: failed, err: errBusy}
		}
		defer sl.end()
		if err := sl.wait(ctx); err != nil {
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
		case a.vote == failed && !errors.Is(a.err, errBusy):
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
