package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// each key. The keys are taken one by one in one canonical order (sorted), so
// that LockAll calls whose keys overlap cannot deadlock each other; if any
// acquisition fails, the locks already taken are released before LockAll
// returns, and the error is the failed acquisition's. Options apply to every
// lock. An empty list, an invalid key or a key given twice is an *ArgError,
// reported before anything is acquired.
func (c *Client) LockAll(ctx context.Context, keys []string, opts ...LockOption) (*MultiLock, error) {
	return c.acquireAll(ctx, keys, true, opts)
}

// TryLockAll is LockAll without waiting: if any key is held it releases what
// it took and returns an error wrapping ErrNotAcquired.
func (c *Client) TryLockAll(ctx context.Context, keys []string, opts ...LockOption) (*MultiLock, error) {
	return c.acquireAll(ctx, keys, false, opts)
}

func (c *Client) acquireAll(ctx context.Context, keys []string, wait bool, opts []LockOption) (*MultiLock, error) {
	if err := c.check(ctx); err != nil {
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
	m := &MultiLock{}
	for _, k := range sorted {
		l, err := c.acquire(ctx, k, wait, opts)
		if err != nil {
			// Nothing partial stays behind: give back what was taken,
			// even if ctx has ended.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			for _, held := range slices.Backward(m.locks) {
				held.Release(rctx)
			}
			cancel()
			return nil, fmt.Errorf("dlock: acquiring %d keys, stopped at %q: %w", len(sorted), k, err)
		}
		m.locks = append(m.locks, l)
	}
	base := context.Background()
	for _, l := range m.locks {
		base = withHeld(base, l)
	}
	m.ctx, m.cancel = context.WithCancelCause(base)
	for _, l := range m.locks {
		context.AfterFunc(l.ctx, func() { m.cancel(context.Cause(l.ctx)) })
	}
	return m, nil
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
