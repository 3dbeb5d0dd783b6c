package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlockhq/dlock/driver"
)

type lockState int

const (
	held lockState = iota
	released
	lost
	closed
)

// Lock is a held lock: a lease on a key with an owner and a fencing token.
// It renews itself in the background (unless WithoutRenewal was given) until
// Release is called or the lock is lost. Its methods are safe for concurrent
// use.
type Lock struct {
	c          *Client
	req        driver.Request
	token      uint64
	ttl        time.Duration
	acquiredAt time.Time
	ctx        context.Context
	cancel     context.CancelCauseFunc
	leave      func() // leaves the Client's gate for the key

	// Renewal runs on a timer, not a goroutine of its own: an idle lock
	// costs no goroutine. renewTimer is nil without renewal.
	renewTimer  *time.Timer
	renewCancel context.CancelFunc // cancels an in-flight renewal
	renewCtx    context.Context
	renewing    sync.WaitGroup // counts in-flight renewals

	mu           sync.Mutex
	depth        int // re-entries not yet released
	renewStopped bool
	state        lockState
	cause        error // why the lock ended; nil while held
	validUntil   time.Time
	expiry       *time.Timer
}

// newLock makes the handle of an acquired lock. Its context carries the lock
// on top of the locks that acq, the acquisition's context, carries.
func newLock(c *Client, acq context.Context, req driver.Request, token uint64, ttl time.Duration, renew bool, sent, validUntil time.Time, leave func()) *Lock {
	l := &Lock{c: c, req: req, token: token, ttl: ttl, acquiredAt: sent, validUntil: validUntil, leave: leave}
	l.ctx, l.cancel = context.WithCancelCause(carry(acq, context.Background(), l))
	l.mu.Lock()
	l.expiry = time.AfterFunc(time.Until(validUntil), l.checkExpiry)
	l.mu.Unlock()
	if renew {
		l.renewCtx, l.renewCancel = context.WithCancel(context.Background())
	}
	if !c.track(l) {
		l.expiry.Stop()
		l.cancel(ErrClosed)
		if renew {
			l.renewCancel()
		}
		return nil
	}
	if renew {
		l.mu.Lock()
		if !l.renewStopped { // Close may have ended the lock already
			l.renewTimer = time.AfterFunc(l.ttl/3, l.renewTick)
		}
		l.mu.Unlock()
	}
	return l
}

// Key returns the lock's key.
func (l *Lock) Key() string { return l.req.Key }

// Token returns the fencing token: a number that is greater than the token of
// every earlier holder of the same key. Pass it to the resource the lock
// protects and have the resource reject writes with a token lower than the
// highest it has seen.
func (l *Lock) Token() uint64 { return l.token }

// Mode returns the lock's mode: driver.Exclusive for a mutex or the write
// side of a read-write lock, driver.Shared for a read lock (including a
// downgraded write lock), driver.Semaphore for a permit.
func (l *Lock) Mode() Mode {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.req.Mode
}

// Limit returns the number of permits of a semaphore lock, and zero for the
// other modes.
func (l *Lock) Limit() int { return l.req.Limit }

// request returns the request that names this hold in driver calls.
func (l *Lock) request() driver.Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.req
}

// Downgrade turns a write lock (a Lock without Shared, on a backend with
// read-write locks) into a read lock in one atomic step: the lock stays held
// throughout, with the same token, lease and renewal, and waiting readers may
// then join. It returns an error wrapping ErrModeMismatch if the lock is not
// exclusive (a read lock or a semaphore permit), ErrUnsupported if the
// backend has no read-write locks, and the lock's end (ErrLost, ErrNotHeld)
// if it is no longer held. It acts on the hold, which all re-entrant
// acquisitions of the lock share.
func (l *Lock) Downgrade(ctx context.Context) error {
	if ctx == nil {
		return argError("ctx", nil, "must not be nil")
	}
	if !l.c.caps.Modes.Has(driver.Shared) {
		return fmt.Errorf("dlock: downgrade %q: %w", l.req.Key, ErrUnsupported)
	}
	if err := l.ended(); err != nil {
		return err
	}
	req := l.request()
	if req.Mode != driver.Exclusive {
		return fmt.Errorf("dlock: downgrade %q: %w: it is a %s lock", req.Key, ErrModeMismatch, req.Mode)
	}
	req.Mode, req.Queue = driver.Shared, false
	res, err := l.c.drv.Acquire(ctx, req)
	switch {
	case err == nil && res.Acquired && res.Token == l.token:
		l.mu.Lock()
		l.req.Mode = driver.Shared
		l.mu.Unlock()
		// Readers of this Client may now join, as they may join any
		// read lock: only exclusive holds keep the Client's gate.
		l.leave()
		return nil
	case err == nil:
		// Whatever the store made of the request is not this lock's hold:
		// clear it, and the handle is lost.
		l.c.cleanup(req)
		l.end(lost, fmt.Errorf("%w: %q: the store no longer has this owner's write lock to downgrade", ErrLost, req.Key))
		return l.ended()
	case errors.Is(err, driver.ErrNotHeld):
		l.end(lost, fmt.Errorf("%w: %q: %w", ErrLost, req.Key, err))
		return l.ended()
	}
	return fmt.Errorf("dlock: downgrade %q: %w", req.Key, err)
}

// OwnerID returns the public identifier of this lock's owner, as Client.List
// shows it.
func (l *Lock) OwnerID() string { return OwnerID(l.req.Owner) }

// TTL returns the lease the store granted.
func (l *Lock) TTL() time.Duration { return l.ttl }

// Context returns a context that is cancelled when the lock is released,
// lost or its Client closed. context.Cause tells which: ErrNotHeld after
// Release, an error wrapping ErrLost after a loss, ErrClosed after Close.
//
// The context also carries the lock: Lock, TryLock or Do on the same Client
// and key with a context derived from it re-enters this lock (see Lock).
func (l *Lock) Context() context.Context { return l.ctx }

// Done is shorthand for Context().Done().
func (l *Lock) Done() <-chan struct{} { return l.ctx.Done() }

// Err returns nil while the lock is held, and then the reason it ended (see
// Context).
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// ValidUntil returns the time until which this process can trust that it
// holds the lock, absent a renewal: the time the last successful acquire or
// refresh request was sent, plus the lease, minus a drift margin. It carries a
// monotonic clock reading; compare it with time.Now, not with other hosts'
// clocks.
func (l *Lock) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// Refresh renews the lease now, to the lock's TTL from now. Automatic renewal
// makes calling it unnecessary unless WithoutRenewal was given. It returns an
// error wrapping ErrLost if the lock was lost (and marks it lost if the store
// reports another owner), ErrNotHeld if it was released, ErrClosed if the
// Client was closed. Any other error is a failure to reach the store: the
// lock is kept until its validity ends.
func (l *Lock) Refresh(ctx context.Context) error {
	if ctx == nil {
		return argError("ctx", nil, "must not be nil")
	}
	return l.refresh(ctx)
}

func (l *Lock) refresh(ctx context.Context) error {
	if err := l.ended(); err != nil {
		return err
	}
	sent := time.Now()
	err := l.c.drv.Refresh(ctx, l.request())
	switch {
	case err == nil:
		l.mu.Lock()
		if v := sent.Add(l.ttl - DriftMargin(l.ttl)); l.state == held && v.After(l.validUntil) {
			l.validUntil = v
			l.expiry.Reset(time.Until(v))
		}
		l.mu.Unlock()
		return l.ended()
	case errors.Is(err, driver.ErrNotHeld):
		l.end(lost, fmt.Errorf("%w: %q: the store no longer has this owner's lease: %w", ErrLost, l.req.Key, err))
		return l.ended()
	default:
		l.c.observe(Event{Kind: EventRenewFailed, Key: l.req.Key, Token: l.token, Err: err})
		if err := l.ended(); err != nil {
			return err
		}
		return fmt.Errorf("dlock: refresh %q: %w", l.req.Key, err)
	}
}

// Release releases the lock. A re-entered lock (see Client.Lock) counts its
// acquisitions: each Release but the last only takes one back and returns
// nil, and the last one releases the lock. It returns nil if the lock was
// still held, an
// error wrapping ErrLost if it had been lost (the protected work may have
// overlapped another holder's), ErrNotHeld if it was already released, and
// ErrClosed after the Client was closed. On any other error (the store could
// not be reached) the lock's context is cancelled all the same and the store
// frees the lock when its lease ends.
func (l *Lock) Release(ctx context.Context) error {
	if ctx == nil {
		return argError("ctx", nil, "must not be nil")
	}
	if l.leaveNested() {
		return nil
	}
	l.stopRenewal()
	l.mu.Lock()
	state, cause := l.state, l.cause
	l.mu.Unlock()
	switch state {
	case released, closed:
		return cause
	case lost:
		// Clear whatever may remain of the lease; the loss stands.
		l.c.cleanup(l.request())
		return cause
	}
	err := l.c.drv.Release(ctx, l.request())
	switch {
	case err == nil:
		l.end(released, fmt.Errorf("%w: %q was released", ErrNotHeld, l.req.Key))
		return nil
	case errors.Is(err, driver.ErrNotHeld):
		l.end(lost, fmt.Errorf("%w: %q: the lease had ended before release: %w", ErrLost, l.req.Key, err))
		return l.ended()
	default:
		l.end(released, fmt.Errorf("%w: %q was released locally; the store frees it when its lease ends", ErrNotHeld, l.req.Key))
		return fmt.Errorf("dlock: release %q: %w", l.req.Key, err)
	}
}

// closeLock releases the lock on Client.Close.
func (l *Lock) closeLock() error {
	l.stopRenewal()
	l.mu.Lock()
	state := l.state
	l.mu.Unlock()
	if state != held {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	err := l.c.drv.Release(ctx, l.request())
	l.end(closed, ErrClosed)
	if err != nil && !errors.Is(err, driver.ErrNotHeld) {
		return fmt.Errorf("dlock: release %q on close: %w", l.req.Key, err)
	}
	return nil
}

// ended returns nil while the lock is held, else the reason it ended.
func (l *Lock) ended() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// end moves a held lock to state s with the given cause: it cancels the
// lock's context, stops its timers and lets the next local waiter in.
func (l *Lock) end(s lockState, cause error) {
	l.mu.Lock()
	if l.state != held {
		l.mu.Unlock()
		return
	}
	l.state, l.cause = s, cause
	l.expiry.Stop()
	l.mu.Unlock()

	l.cancel(cause)
	l.haltRenewal()
	l.leave()
	l.c.forget(l)
	held := time.Since(l.acquiredAt)
	switch s {
	case lost:
		l.c.cfg.logger.Warn("dlock: lock lost", "key", l.req.Key, "token", l.token, "err", cause)
		l.c.observe(Event{Kind: EventLost, Key: l.req.Key, Token: l.token, Held: held, Err: cause})
	default:
		l.c.observe(Event{Kind: EventReleased, Key: l.req.Key, Token: l.token, Held: held})
	}
}

// checkExpiry runs when the validity deadline may have passed.
func (l *Lock) checkExpiry() {
	l.mu.Lock()
	if l.state != held {
		l.mu.Unlock()
		return
	}
	if left := time.Until(l.validUntil); left > 0 {
		l.expiry.Reset(left) // a refresh moved the deadline meanwhile
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.end(lost, fmt.Errorf("%w: %q: its validity ran out before the lease could be renewed", ErrLost, l.req.Key))
}

// renewTick refreshes the lease; it runs on the renewal timer every third
// of the TTL, and sooner after a failed attempt, until the lock ends.
func (l *Lock) renewTick() {
	l.mu.Lock()
	if l.renewStopped || l.state != held {
		l.mu.Unlock()
		return
	}
	l.renewing.Add(1)
	validUntil := l.validUntil
	l.mu.Unlock()
	defer l.renewing.Done()

	ctx, cancel := context.WithDeadline(l.renewCtx, validUntil)
	err := l.refresh(ctx)
	cancel()
	next := l.ttl / 3
	switch {
	case err == nil:
	case l.ended() != nil:
		return
	default:
		l.c.cfg.logger.Warn("dlock: renewal failed; retrying", "key", l.req.Key, "err", err)
		next = max(next/4, time.Millisecond)
	}
	l.mu.Lock()
	if !l.renewStopped {
		l.renewTimer.Reset(next)
	}
	l.mu.Unlock()
}

// haltRenewal stops future renewals and cancels one in flight, without
// waiting for it (it may be the caller).
func (l *Lock) haltRenewal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.renewStopped {
		return
	}
	l.renewStopped = true
	if l.renewTimer != nil {
		l.renewTimer.Stop()
	}
	if l.renewCancel != nil {
		l.renewCancel()
	}
}

// stopRenewal stops renewal and waits until no renewal is in flight.
func (l *Lock) stopRenewal() {
	l.haltRenewal()
	l.renewing.Wait()
}

// ReleaseAfter hands the lock over to its lease: it stops renewal and sets the
// lease to end d from now, so the store keeps the lock for d more and then
// frees it, even if this process exits. The handle is done at once (its
// context ends with ErrNotHeld as the cause). Use it to hold a lock for a
// minimum time after the work finished, so that a scheduled job that ran
// quickly is not run again by a host whose clock is slightly behind. If d is
// not positive, it releases at once; a d below the backend's minimum TTL is
// raised to it, and on a store with a coarse lease clock
// (Capabilities.TTLResolution) two units are added, so the hold lasts at
// least d either way; a d above the maximum is an *ArgError. On a
// re-entered lock, every call but the last only takes one acquisition back,
// as Release does.
func (l *Lock) ReleaseAfter(ctx context.Context, d time.Duration) error {
	if ctx == nil {
		return argError("ctx", nil, "must not be nil")
	}
	if l.leaveNested() {
		return nil // an inner acquisition of a re-entered lock
	}
	if d <= 0 {
		return l.Release(ctx)
	}
	// A coarse store may end a lease up to one unit early: ask for two
	// more so that the hold lasts at least d.
	d = max(d+2*l.c.caps.TTLResolution, l.c.caps.MinTTL)
	if err := l.c.checkTTL(d); err != nil {
		return err
	}
	l.stopRenewal()
	if err := l.ended(); err != nil {
		return err
	}
	req := l.request()
	req.TTL = d
	err := l.c.drv.Refresh(ctx, req)
	switch {
	case err == nil:
		l.end(released, fmt.Errorf("%w: %q is held by its lease for %v more", ErrNotHeld, l.req.Key, d))
		return nil
	case errors.Is(err, driver.ErrNotHeld):
		l.end(lost, fmt.Errorf("%w: %q: the lease had ended: %w", ErrLost, l.req.Key, err))
		return l.ended()
	default:
		l.end(released, fmt.Errorf("%w: %q was released locally; the store frees it when its lease ends", ErrNotHeld, l.req.Key))
		return fmt.Errorf("dlock: release %q after %v: %w", l.req.Key, d, err)
	}
}
