package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// MultiLock is a set of locks acquired together, all or none, by
// Client.LockAll or Client.TryLockAll. Its methods are safe for concurrent
// use.
type MultiLock struct {
	locks  []*Lock
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// LockAll acquires the locks named keys, all or none, waiting until it holds
// every one of them or ctx ends: ctx bounds the whole wait, not the wait for
// each key. On a backend that can take several keys in one atomic step
// (driver.MultiAcquirer: Redis in script mode, when the keys share a Cluster
// slot or the server is not a cluster) it first tries that; otherwise, or if
// some key is held, it takes the keys one by one in one canonical order
// (sorted), so that LockAll calls whose keys overlap cannot deadlock each
// other. If any acquisition fails, the locks already taken are released
// before LockAll returns, and the error is the failed acquisition's. Options
// apply to every lock. An empty list, an invalid key or a key given twice is
// an *ArgError, reported before anything is acquired.
func (c *Client) LockAll(ctx context.Context, keys []string, opts ...LockOption) (*MultiLock, error) {
	return c.acquireAll(ctx, keys, true, opts)
}

// TryLockAll is LockAll without waiting: if any key is held it releases what
// it took and returns an error wrapping ErrNotAcquired. On a backend that
// can take several keys in one atomic step it makes exactly one such step,
// so that it takes nothing at all when it fails.
func (c *Client) TryLockAll(ctx context.Context, keys []string, opts ...LockOption) (*MultiLock, error) {
	return c.acquireAll(ctx, keys, false, opts)
}

func (c *Client) acquireAll(ctx context.Context, keys []string, wait bool, opts []LockOption) (*MultiLock, error) {
	if err := c.check(ctx); err != nil {
		if errors.Is(err, ErrClosed) {
			err = fmt.Errorf("dlock: acquiring keys %q: %w: %w", keys, ErrNotAcquired, err)
		}
		return nil, err
	}
	if len(keys) == 0 {
		return nil, argError("keys", keys, "must not be empty")
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for i, k := range sorted {
		if err := c.checkKey(k); err != nil {
			return nil, err
		}
		if i > 0 && k == sorted[i-1] {
			return nil, argError("keys", k, "is given twice")
		}
	}
	// started holds the acquisitions of the keys, in order, once
	// observers saw them start (with an atomic attempt): taking the keys
	// one by one then goes on with them.
	var started []*acquisition
	if ma, ok := c.drv.(driver.MultiAcquirer); ok && len(sorted) > 1 {
		locks, acqs, done, err := c.acquireAtOnce(ctx, ma, sorted, wait, opts)
		if err != nil {
			return nil, err
		}
		if done {
			return newMultiLock(locks), nil
		}
		started = acqs
	}
	var locks []*Lock
	for i, k := range sorted {
		var a *acquisition
		if started != nil {
			a = started[i]
		}
		l, err := c.acquireAs(ctx, k, wait, opts, a)
		if err != nil {
			// Nothing partial stays behind: give back what was taken,
			// even if ctx has ended.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			for _, held := range slices.Backward(locks) {
				held.Release(rctx)
			}
			cancel()
			err = fmt.Errorf("dlock: acquiring %d keys: %w", len(sorted), bare(err))
			if started != nil {
				for _, a := range started[i+1:] {
					a.failed(c, err)
				}
			}
			return nil, err
		}
		locks = append(locks, l)
	}
	return newMultiLock(locks), nil
}

// acquireAtOnce makes one atomic attempt to take every key through ma. It
// reports done when it acquired them all; when it returns neither locks nor
// an error, the caller takes the keys one by one: a key that ctx holds
// already (re-entry), another goroutine of this Client in a key's gate, a
// set of keys the driver cannot take at once, or a key held by someone else
// while the caller is willing to wait. Observers see the acquisition of
// every key start once the attempt is made; if the caller is to go on one
// by one, started returns those acquisitions, whose outcomes the caller
// then reports.
func (c *Client) acquireAtOnce(ctx context.Context, ma driver.MultiAcquirer, keys []string, wait bool, opts []LockOption) (_ []*Lock, started []*acquisition, done bool, _ error) {
	reqs := make([]driver.Request, len(keys))
	cfgs := make([]lockConfig, len(keys))
	for i, k := range keys {
		req, cfg, held, err := c.prepare(ctx, k, opts)
		if err != nil || held != nil {
			return nil, nil, false, nil // the one-by-one path re-enters or reports it
		}
		reqs[i], cfgs[i] = req, cfg
	}
	var leaves []func()
	leave := func(from int) {
		for _, lv := range slices.Backward(leaves[from:]) {
			lv()
		}
	}
	for _, k := range keys {
		lv := c.gates.tryEnter(k)
		if lv == nil {
			leave(0)
			return nil, nil, false, nil
		}
		leaves = append(leaves, lv)
	}
	cleanup := func(from int) {
		for _, req := range reqs[from:] {
			c.cleanup(ctx, req)
		}
		leave(from)
	}

	if !c.enter() {
		leave(0)
		return nil, nil, false, fmt.Errorf("dlock: acquiring keys %q at once: %w: %w", keys, ErrNotAcquired, ErrClosed)
	}
	defer c.ops.done()
	acqs := make([]*acquisition, len(keys))
	for i, req := range reqs {
		acqs[i] = c.starting(ctx, req.Key, req.Mode, req.Limit)
		cfgs[i].id = acqs[i].id
	}
	// failed reports that the acquisitions from index from on failed.
	failed := func(from int, err error) error {
		for _, a := range acqs[from:] {
			a.failed(c, err)
		}
		return err
	}
	bctx, unbind := c.bind(ctx)
	defer unbind()
	begin := time.Now()
	res, inflight, err := do(c, bctx, func(ctx context.Context) (driver.MultiResult, error) { return ma.AcquireAll(ctx, reqs) })
	if inflight != nil {
		// Still on the wire: clear what it takes once it lands.
		inflight.after(c, func(driver.MultiResult, error) {
			for _, req := range reqs {
				c.cleanup(context.Background(), req)
			}
		})
		leave(0)
		err = fmt.Errorf("dlock: acquiring keys %q at once: %w: %w", keys, ErrNotAcquired, why(ctx))
		return nil, nil, false, failed(0, err)
	}
	switch {
	case errors.Is(err, driver.ErrUnsupported):
		leave(0)
		return nil, acqs, false, nil
	case err != nil:
		cleanup(0)
		if bctx.Err() != nil {
			err = fmt.Errorf("dlock: acquiring keys %q at once: %w: %w", keys, ErrNotAcquired, why(ctx))
		} else {
			err = fmt.Errorf("dlock: acquiring keys %q at once: %w", keys, c.storeFailure(err))
		}
		return nil, nil, false, failed(0, err)
	case !res.Acquired:
		leave(0)
		if wait {
			return nil, acqs, false, nil
		}
		k := keys[0]
		if res.Blocked >= 0 && res.Blocked < len(keys) {
			k = keys[res.Blocked]
		}
		err := fmt.Errorf("dlock: acquiring %d keys at once: %w: %q is held", len(keys), ErrNotAcquired, k)
		return nil, nil, false, failed(0, err)
	case len(res.Results) != len(reqs) || slices.ContainsFunc(res.Results, func(r driver.Result) bool { return !r.Acquired }):
		cleanup(0)
		return nil, nil, false, failed(0, fmt.Errorf("dlock: acquiring keys %q at once: the driver reported success without a hold for every key", keys))
	}
	for i, r := range res.Results {
		if _, validUntil := lease(reqs[i], r, begin); !time.Now().Before(validUntil) {
			// The reply came too late to leave any validity: never hand
			// those locks out.
			cleanup(0)
			if wait {
				return nil, acqs, false, nil
			}
			return nil, nil, false, failed(0, fmt.Errorf("dlock: acquiring %d keys at once: %w: %q: the store answered after the lease of %v had run out", len(keys), ErrNotAcquired, keys[i], reqs[i].TTL))
		}
	}
	locks := make([]*Lock, 0, len(reqs))
	for i, req := range reqs {
		ttl, validUntil := lease(req, res.Results[i], begin)
		lv := leaves[i]
		if req.Mode != driver.Exclusive {
			lv() // as in acquireLoop: only exclusive holds keep the gate
			lv = func() {}
		}
		l := newLock(c, ctx, req, res.Results[i].Token, ttl, cfgs[i], begin, validUntil, lv)
		if l == nil {
			cleanup(i)
			// The locks made already were held: they are reported
			// acquired, then released.
			for j, held := range locks {
				acqs[j].acquired(c, held)
			}
			failed(i, notAcquired(req.Key, ErrClosed))
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			for _, held := range locks {
				held.Release(rctx)
			}
			cancel()
			return nil, nil, false, fmt.Errorf("dlock: acquiring keys %q at once: %w: %w", keys, ErrNotAcquired, ErrClosed)
		}
		locks = append(locks, l)
	}
	for i, l := range locks {
		acqs[i].acquired(c, l)
	}
	return locks, nil, true, nil
}

// newMultiLock joins held locks into a MultiLock.
func newMultiLock(locks []*Lock) *MultiLock {
	m := &MultiLock{locks: locks}
	base := context.Background()
	for _, l := range m.locks {
		base = withHeld(base, l)
	}
	m.ctx, m.cancel = context.WithCancelCause(base)
	for _, l := range m.locks {
		context.AfterFunc(l.ctx, func() { m.cancel(context.Cause(l.ctx)) })
	}
	return m
}

// Locks returns the locks, in the order they were acquired (sorted by key).
func (m *MultiLock) Locks() []*Lock { return slices.Clone(m.locks) }

// Context returns a context that ends as soon as any of the locks ends
// (released, lost, or its Client closed); context.Cause tells why. It
// carries every lock, so that a Lock call with a context derived from it
// re-enters any of them.
func (m *MultiLock) Context() context.Context { return m.ctx }

// Done is Context().Done().
func (m *MultiLock) Done() <-chan struct{} { return m.ctx.Done() }

// Release releases every lock, in the reverse order of acquisition, and
// returns the errors of those that failed (see Lock.Release), joined. Every
// lock is released whatever the others report.
func (m *MultiLock) Release(ctx context.Context) error {
	if ctx == nil {
		return argError("ctx", nil, "must not be nil")
	}
	var errs []error
	for _, l := range slices.Backward(m.locks) {
		if err := l.Release(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
