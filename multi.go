package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"

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
	// started holds the acquisitions of the keys that observers saw start
	// (with an atomic attempt): taking the keys one by one goes on with them.
	started := make([]*acquisition, len(sorted))
	if ma, ok := c.drv.(driver.MultiAcquirer); ok && len(sorted) > 1 {
		locks, acqs, err := c.acquireAtOnce(ctx, ma, sorted, wait, opts)
		if err != nil {
			return nil, err
		}
		if locks != nil {
			return newMultiLock(locks), nil
		}
		copy(started, acqs)
	}
	locks := make([]*Lock, 0, len(sorted))
	for i, k := range sorted {
		l, err := c.acquire(ctx, k, wait, opts, started[i])
		if err != nil {
			// Nothing partial stays behind: give back what was taken.
			releaseAll(ctx, locks)
			err = fmt.Errorf("dlock: acquiring %d keys: %w", len(sorted), bare(err))
			return nil, failedAll(c, started[i+1:], err)
		}
		locks = append(locks, l)
	}
	return newMultiLock(locks), nil
}

// acquireAtOnce makes one atomic attempt to take every key through ma, and
// returns the locks if it took them all. When it returns neither locks nor
// an error, the caller takes the keys one by one: a key that ctx holds
// already (re-entry), another goroutine of this Client in a key's gate, a
// set of keys the driver cannot take at once, or a key held by someone else
// (or a store that failed) while the caller is willing to wait. Observers
// see the acquisition of every key start once the attempt is made: started
// returns those acquisitions, whose outcomes the caller then reports.
func (c *Client) acquireAtOnce(ctx context.Context, ma driver.MultiAcquirer, keys []string, wait bool, opts []LockOption) (_ []*Lock, started []*acquisition, _ error) {
	if !c.enter() {
		return nil, nil, fmt.Errorf("dlock: acquiring keys %q at once: %w: %w", keys, ErrNotAcquired, ErrClosed)
	}
	defer c.ops.done()
	at := c.newAttempts(ctx, len(keys), wait)
	defer at.finish()
	at.ma, at.keys = ma, keys
	at.send = func(ctx context.Context) (driver.MultiResult, error) { return ma.AcquireAll(ctx, at.reqs) }
	for i, k := range keys {
		req, cfg, held, err := c.prepare(ctx, k, opts)
		if err != nil || held != nil {
			return nil, nil, nil // the one-by-one path re-enters or reports it
		}
		at.reqs[i], at.cfgs[i] = req, cfg
	}
	for i, k := range keys {
		var ok bool
		if at.passes[i], ok = c.gates.enter(ctx, k, false); !ok {
			return nil, nil, nil
		}
	}
	acqs := make([]*acquisition, len(keys))
	for i, req := range at.reqs {
		a := c.starting(ctx, req.Key, req.Mode, req.Limit)
		acqs[i] = &a
		at.cfgs[i].id = acqs[i].id
	}
	locks, err := at.run()
	for i, l := range locks {
		acqs[i].acquired(c, l)
	}
	if err != nil {
		releaseAll(ctx, locks)
		return nil, nil, failedAll(c, acqs[len(locks):], err)
	}
	return locks, acqs, nil
}

// failedAll reports that the acquisitions acqs failed, and returns err.
func failedAll(c *Client, acqs []*acquisition, err error) error {
	for _, a := range acqs {
		a.failed(c, err)
	}
	return err
}

// releaseAll gives back the locks taken for an acquisition that failed,
// in the reverse order, even if ctx has ended.
func releaseAll(ctx context.Context, locks []*Lock) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	for _, l := range slices.Backward(locks) {
		l.Release(rctx)
	}
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
		lctx := l.Context()
		context.AfterFunc(lctx, func() { m.cancel(context.Cause(lctx)) })
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
