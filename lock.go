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
	detached // by Detach: the hold lives on without this handle
)

// Lock is a held lock: a lease on a key with an owner and a fencing token.
// It renews itself in the background (unless WithoutRenewal was given) until
// Release or Detach is called or the lock is lost. Its methods are safe for concurrent
// use.
type Lock struct {
	c          *Client
	req        driver.Request
	token      uint64
	ttl        time.Duration // the holder's lease, without delay
	delay      time.Duration // the lock delay (WithLockDelay): req.TTL includes its pad
	acquiredAt time.Time
	root       heldRoot // ctx's parent, which carries the lock
	ctx        context.Context
	cancel     context.CancelCauseFunc
	gate       pass // in the Client's gate for the key, until the hold ends
	events     lockEvents

	// Renewal runs on a timer, not a goroutine of its own: an idle lock
	// costs no goroutine. renewTimer is nil without renewal.
	renewTimer  *time.Timer
	renewCancel context.CancelFunc // cancels the latest renewal
	renewing    sync.WaitGroup     // counts in-flight renewals

	// calls keeps the rule of the driver contract that no request for the
	// owner starts while an Acquire for it runs: refreshes share it, a
	// Downgrade (an Acquire) takes it alone until its request completes.
	calls sync.RWMutex

	mu           sync.Mutex
	ending       bool          // Release, ReleaseAfter or Close began ending the hold
	endDone      bool          // and has finished
	endWait      chan struct{} // made for the first caller that waits for that; closed once endDone
	downgrading  bool          // a Downgrade abandoned by its caller is still on the wire
	depth        int           // re-entries not yet released
	renewStopped bool
	state        lockState
	cause        error // why the lock ended; nil while held
	renewErr     error // the failure of the latest refresh, if it failed
	validUntil   time.Time
	expiry       *time.Timer
	maxHold      time.Duration // WithMaxHold; zero without
	holdTimer    *time.Timer   // ends the lock at its max hold; nil without
}

// newLock makes the handle of an acquired lock. Its context, made when first
// asked for, carries the lock on top of the locks that acq, the
// acquisition's context, carries.
func newLock(c *Client, acq context.Context, req driver.Request, token uint64, ttl time.Duration, cfg lockConfig, sent, validUntil time.Time, gate pass) *Lock {
	l := &Lock{c: c, req: req, token: token, ttl: ttl, delay: cfg.delay, acquiredAt: sent, validUntil: validUntil, gate: gate}
	l.events = lockEvents{id: cfg.id, ctx: acq, mode: req.Mode, limit: req.Limit}
	if l.events.id == 0 {
		l.events.id = nextAcquisitionID()
	}
	l.root.chain = heldChain{lock: l, parent: heldBy(acq)}
	l.mu.Lock()
	l.expiry = time.AfterFunc(time.Until(validUntil), l.checkExpiry)
	l.mu.Unlock()
	if cfg.maxHold != nil {
		l.maxHold = *cfg.maxHold
	}
	if !c.track(l) {
		l.expiry.Stop()
		return nil
	}
	// Once tracked, unless Close has ended the lock already: at a max
	// hold that passed already, the lock ends at once.
	l.mu.Lock()
	if l.maxHold > 0 && l.state == held {
		l.holdTimer = time.AfterFunc(time.Until(sent.Add(l.maxHold)), l.maxHoldReached)
	}
	if cfg.renew && !l.renewStopped {
		// A third of the lease, or of the validity left if that is shorter
		// (a hold the store handed over with a short lease of its own).
		l.renewTimer = time.AfterFunc(min(l.ttl, time.Until(validUntil))/3, l.renewTick)
	}
	l.mu.Unlock()
	return l
}

// Key returns the lock's key.
func (l *Lock) Key() string { return l.req.Key }

// String describes the lock by its key, mode and fencing token; never by
// its owner token or HoldID, which are secrets.
func (l *Lock) String() string {
	return fmt.Sprintf("dlock.Lock{key=%q mode=%s token=%d}", l.req.Key, l.Mode(), l.token)
}

// GoString is String, so that %#v does not show the owner token either.
func (l *Lock) GoString() string { return l.String() }

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
	if err := l.c.check(ctx); err != nil {
		return err
	}
	l.calls.Lock()
	res, inflight, err := do(l.c, ctx, func(ctx context.Context) (driver.Result, error) { return l.c.drv.Acquire(ctx, req) })
	if inflight == nil {
		l.calls.Unlock()
	} else {
		// Whether the store made the lock a read lock is unknown: the
		// handle can no longer promise exclusion. Clear the hold once the
		// request has landed.
		l.mu.Lock()
		l.downgrading = true
		l.mu.Unlock()
		inflight.after(l.c, func(driver.Result, error) {
			l.calls.Unlock()
			l.c.cleanup(context.Background(), req)
		})
		l.end(lost, fmt.Errorf("dlock: %w%s: the downgrade was abandoned on the wire, so the lock's mode is unknown: %w", ErrLost, keyedAfter(req.Key, err), err))
		return fmt.Errorf("dlock: downgrade%s: %w", keyed(req.Key, err), err)
	}
	switch {
	case err == nil && res.Acquired && res.Token == l.token:
		l.mu.Lock()
		l.req.Mode = driver.Shared
		gate := l.gate
		l.gate = pass{}
		l.mu.Unlock()
		// Readers of this Client may now join, as they may join any
		// read lock: only exclusive holds keep the Client's gate.
		gate.leave()
		return nil
	case err == nil:
		// Whatever the store made of the request is not this lock's hold:
		// clear it, and the handle is lost.
		l.c.cleanup(ctx, req)
		l.end(lost, fmt.Errorf("dlock: %w: %q: the store no longer has this owner's write lock to downgrade", ErrLost, req.Key))
		return l.ended()
	case errors.Is(err, driver.ErrNotOwner):
		l.end(lost, fmt.Errorf("dlock: %w%s: %w", ErrLost, keyedAfter(req.Key, err), err))
		return l.ended()
	}
	return fmt.Errorf("dlock: downgrade%s: %w", keyed(req.Key, err), l.c.marked(err))
}

// OwnerID returns the public identifier of this lock's owner, as Client.List
// shows it.
func (l *Lock) OwnerID() string { return OwnerID(l.req.Owner) }

// TTL returns the lease the store granted.
func (l *Lock) TTL() time.Duration { return l.ttl }

// Context returns a context that is cancelled when the lock is released,
// lost or its Client closed. Once the lock has ended, Context().Err() is
// context.Canceled, whatever the reason; context.Cause(l.Context()), which
// Cause returns too, tells the reason: an error wrapping ErrNotHeld after
// Release, ErrLost after a loss (and ErrMaxHold too when the lock reached
// its WithMaxHold bound), ErrClosed after Close.
//
// The context also carries the lock: Lock, TryLock or Do on the same Client
// and key with a context derived from it re-enters this lock (see Lock).
func (l *Lock) Context() context.Context {
	// Made when first asked for (most locks never are), under mu;
	// cancel is nil once called.
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		if l.ctx, l.cancel = context.WithCancelCause(&l.root); l.cause != nil {
			l.cancel(l.cause)
			l.cancel = nil
		}
	}
	return l.ctx
}

// Done is shorthand for Context().Done().
func (l *Lock) Done() <-chan struct{} { return l.Context().Done() }

// Cause returns nil while the lock is held, and then the reason it ended:
// the same error as context.Cause(l.Context()). The lock's context's own Err
// is only context.Canceled; Cause tells why (see Context).
func (l *Lock) Cause() error {
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
// Client was closed. Any other error is a failure of the store: the lock is
// kept until its validity ends. The error wraps ErrPermanent when the
// failure is permanent (the store now refuses the credentials, say): the
// lock is kept all the same, since the store keeps the hold until its
// lease ends, and automatic renewal goes on trying until then. If the
// validity runs out first, the lock is lost with a cause that names the
// last renewal's failure.
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
	if l.isEnding() {
		return fmt.Errorf("dlock: %w: %q is being released", ErrNotHeld, l.req.Key)
	}
	sent := time.Now()
	req := l.request()
	l.calls.RLock()
	_, _, err := do(l.c, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, l.c.drv.Refresh(ctx, req) })
	l.calls.RUnlock()
	switch {
	case err == nil:
		l.mu.Lock()
		l.renewErr = nil
		if v := sent.Add(l.ttl - DriftMargin(l.ttl)); l.state == held && v.After(l.validUntil) {
			l.validUntil = v
			l.expiry.Reset(time.Until(v))
		}
		renewed := l.state == held
		l.mu.Unlock()
		if renewed {
			e := l.event(EventRenewed, nil)
			e.Held = time.Since(l.acquiredAt)
			l.c.observe(e)
		}
		return l.ended()
	case errors.Is(err, driver.ErrNotOwner):
		if l.isEnding() {
			// A Release overtook this refresh: no loss.
			return fmt.Errorf("dlock: %w: %q is being released", ErrNotHeld, l.req.Key)
		}
		l.end(lost, fmt.Errorf("dlock: %w%s: the store no longer has this owner's lease: %w", ErrLost, keyedAfter(l.req.Key, err), err))
		return l.ended()
	default:
		if err := l.ended(); err != nil {
			return err
		}
		// A permanent failure (the store now refuses the credentials,
		// say) does not end the lock: the store keeps the hold until
		// its lease ends, and renewal goes on trying until then, in
		// case the deployment is repaired meanwhile. It is marked, so
		// that the caller and observers can tell.
		err = l.c.marked(err)
		l.mu.Lock()
		l.renewErr = err
		l.mu.Unlock()
		e := l.event(EventRenewFailed, err)
		e.Held = time.Since(l.acquiredAt)
		l.c.observe(e)
		return fmt.Errorf("dlock: refresh%s: %w", keyed(l.req.Key, err), err)
	}
}

// Release releases the lock. A re-entered lock (see Client.Lock) counts its
// acquisitions: each Release but the last only takes one back and returns
// nil, and the last one releases the lock.
//
// The release reaches the store even if ctx has already ended (a request
// whose deadline passed while it held the lock, as with
// `defer lock.Release(ctx)`): it then runs on a context of its own, bounded
// by ReleaseTimeout, and Release waits for it. If ctx ends while the store
// has not answered (a hung server), Release returns at once with ctx's error
// and the request goes on in the background, bounded by ReleaseTimeout;
// Client.Close waits for it.
//
// It returns nil if the lock was still held, an error wrapping ErrLost if it
// had been lost (the protected work may have overlapped another holder's),
// ErrNotHeld if it was already released, and ErrClosed after the Client was
// closed. There is one release per lock: calls that race the first (another
// Release, ReleaseAfter, Client.Close) wait for it and then return ErrNotHeld
// (or the reason the lock ended). On any other error (the store could not be
// reached) the lock's context is cancelled all the same and the store frees
// the lock when its lease ends. A nil ctx is an *ArgError, and the lock is
// released all the same, on a context of its own.
func (l *Lock) Release(ctx context.Context) error {
	if ctx == nil {
		return l.releaseRefused(ctx, argError("ctx", nil, "must not be nil"))
	}
	if l.leaveNested() {
		return nil
	}
	return l.finish(ctx, "release", 0)
}

// releaseRefused releases l when a call that ends its hold (Release,
// ReleaseAfter) was given a bad argument err, so that no renewing lock is
// left behind, and returns err, with the release's own error if it failed.
func (l *Lock) releaseRefused(ctx context.Context, err error) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if rerr := l.Release(ctx); rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// ReleaseTimeout bounds the request that releases a lock (Lock.Release,
// Lock.ReleaseAfter, Client.Close) when the caller's context has ended or
// has no deadline of its own: the store is asked to free the lock even when
// the caller has stopped waiting.
const ReleaseTimeout = 5 * time.Second

// finish ends the hold with one store request: a Release, or for d > 0 a
// Refresh to a lease of d (ReleaseAfter). Only the first caller of finish (or
// closeLock) sends it; the others wait for it.
func (l *Lock) finish(ctx context.Context, what string, d time.Duration) error {
	first, ending := l.claimEnd()
	if !first {
		select {
		case <-ending:
		case <-ctx.Done():
			return fmt.Errorf("dlock: %s %q: waiting for a concurrent release: %w", what, l.req.Key, ctx.Err())
		}
		if err := l.ended(); err != nil {
			return err
		}
		return &releasedError{l.req.Key}
	}
	defer l.endClaim()
	l.stopRenewal()
	l.mu.Lock()
	state, cause, downgrading := l.state, l.cause, l.downgrading
	l.mu.Unlock()
	switch state {
	case released, closed, detached:
		return cause
	case lost:
		// Clear whatever may remain of the lease; the loss stands. An
		// abandoned Downgrade clears it itself once it has landed.
		if !downgrading {
			l.c.cleanup(ctx, l.request())
		}
		return cause
	}
	req := l.request()
	err, abandoned := l.storeCall(ctx, req, d)
	switch {
	case err == nil && d > 0:
		l.end(released, fmt.Errorf("dlock: %w: %q is held by its lease for %v more", ErrNotHeld, req.Key, d))
		return nil
	case err == nil:
		l.end(released, &releasedError{req.Key})
		return nil
	case abandoned:
		l.end(released, fmt.Errorf("dlock: %w: %q was released locally; the request is still on its way, and the store frees the lock when it lands or the lease ends", ErrNotHeld, req.Key))
		return fmt.Errorf("dlock: %s%s: %w", what, keyed(req.Key, err), err)
	case errors.Is(err, driver.ErrNotOwner):
		l.end(lost, fmt.Errorf("dlock: %w%s: the lease had ended before %s: %w", ErrLost, keyedAfter(req.Key, err), what, err))
		return l.ended()
	default:
		l.end(released, fmt.Errorf("dlock: %w: %q was released locally; the store frees it when its lease ends", ErrNotHeld, req.Key))
		return fmt.Errorf("dlock: %s%s: %w", what, keyed(req.Key, err), l.c.marked(err))
	}
}

// storeCall sends the request that ends the hold req: a Release, or for
// d > 0 a Refresh to a lease of d. It runs on a context of its
// own, detached from ctx's cancellation (not its values) and bounded by
// ReleaseTimeout, so that it reaches the store even when ctx has ended. The
// caller waits until it completes, or until ctx ends if ctx was live: then
// the request is abandoned to finish in the background.
func (l *Lock) storeCall(ctx context.Context, req driver.Request, d time.Duration) (err error, abandoned bool) {
	if l.c.caps.CancelsPromptly {
		// The driver abandons a request when its ctx ends: the caller's
		// ctx bounds the request while it is live, a context of its own
		// once it has ended.
		if ctx.Err() != nil {
			ctx = context.WithoutCancel(ctx)
		}
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, ReleaseTimeout)
			defer cancel()
		}
		return l.c.endHold(ctx, req, d), false
	}
	// The request's own context bounds the caller's wait too. Whether
	// the caller's ctx ends the wait is decided before the request
	// starts: one that ends once it is on its way does.
	rctx := ctx
	if ctx.Done() != nil {
		rctx = context.WithoutCancel(ctx)
	}
	rctx, cancel := context.WithTimeout(rctx, ReleaseTimeout)
	wctx := ctx
	if ctx.Err() != nil {
		wctx = rctx
	}
	cl := start(l.c, rctx, cancel, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, l.c.endHold(ctx, req, d)
	})
	_, err, ok := cl.wait(wctx)
	return err, !ok
}

// endHold asks the store to end the hold req: a Release, or for d > 0 a
// Refresh to a lease of d, without lock delay.
func (c *Client) endHold(ctx context.Context, req driver.Request, d time.Duration) error {
	if d > 0 {
		req.TTL, req.LockDelay = d, 0
		return c.drv.Refresh(ctx, req)
	}
	return c.drv.Release(ctx, req)
}

// releasedError is the cause of a released lock, formatted only when read.
type releasedError struct{ key string }

func (e *releasedError) Error() string {
	return fmt.Sprintf("dlock: %v: %q was released", ErrNotHeld, e.key)
}
func (e *releasedError) Unwrap() error { return ErrNotHeld }

// claimEnd makes the caller the one that ends the hold and reports true, or
// returns false and a channel closed when the caller that did has finished.
func (l *Lock) claimEnd() (bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !l.ending:
		l.ending = true
		return true, nil
	case l.endWait == nil:
		l.endWait = make(chan struct{})
		if l.endDone {
			close(l.endWait)
		}
	}
	return false, l.endWait
}

// endClaim lets the callers that wait in claimEnd go.
func (l *Lock) endClaim() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.endDone = true; l.endWait != nil {
		close(l.endWait)
	}
}

// isEnding reports whether a release of the hold has begun.
func (l *Lock) isEnding() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ending
}

// closeLock releases the lock on Client.Close.
func (l *Lock) closeLock() error {
	first, ending := l.claimEnd()
	if !first {
		<-ending // a Release in progress; it is bounded by ReleaseTimeout
		return nil
	}
	defer l.endClaim()
	l.stopRenewal()
	l.mu.Lock()
	state := l.state
	l.mu.Unlock()
	if state != held {
		return nil
	}
	err, _ := l.storeCall(context.Background(), l.request(), 0)
	l.end(closed, fmt.Errorf("dlock: %q: %w", l.req.Key, ErrClosed))
	if err != nil && !errors.Is(err, driver.ErrNotOwner) {
		return fmt.Errorf("dlock: release%s on close: %w", keyed(l.req.Key, err), err)
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
	gate, cancel := l.gate, l.cancel
	l.gate, l.cancel = pass{}, nil
	l.expiry.Stop()
	if l.holdTimer != nil {
		l.holdTimer.Stop()
	}
	l.mu.Unlock()

	if cancel != nil {
		cancel(cause)
	}
	l.haltRenewal()
	gate.leave()
	l.c.forget(l)
	e := l.event(EventReleased, nil)
	e.Held = time.Since(l.acquiredAt)
	if s == lost {
		l.c.cfg.logger.Warn("dlock: lock lost", "key", l.req.Key, "token", l.token, "err", cause)
		e.Kind, e.Err = EventLost, cause
	}
	l.c.observe(e)
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
	renewErr := l.renewErr
	l.mu.Unlock()
	if renewErr != nil {
		l.end(lost, fmt.Errorf("dlock: %w%s: its validity ran out before the lease could be renewed; the last renewal failed: %w", ErrLost, keyedAfter(l.req.Key, renewErr), renewErr))
		return
	}
	l.end(lost, fmt.Errorf("dlock: %w: %q: its validity ran out before the lease could be renewed", ErrLost, l.req.Key))
}

// maxHoldReached runs when the lock has been held for its max hold: it ends
// the lock, so that its context is cancelled first, and releases it on the
// store. It claims the end of the hold as Release does, so that a Release or
// Close that comes meanwhile waits for the store's answer; and it counts as an
// operation in progress, so that Close waits for it before closing the
// backend.
func (l *Lock) maxHoldReached() {
	if l.ended() != nil || !l.c.enter() {
		return // ended already, or Close releases it
	}
	defer l.c.ops.done()
	first, _ := l.claimEnd()
	if !first {
		return // a release is under way
	}
	defer l.endClaim()
	l.mu.Lock()
	state, downgrading := l.state, l.downgrading
	l.mu.Unlock()
	if state != held {
		return
	}
	l.end(lost, fmt.Errorf("dlock: %w: %q was held for its max hold of %v (%w)", ErrLost, l.req.Key, l.maxHold, ErrMaxHold))
	l.stopRenewal()
	if downgrading {
		return // the abandoned Downgrade clears the hold once it lands
	}
	l.calls.Lock() // no Release while a Downgrade's Acquire runs
	defer l.calls.Unlock()
	l.c.cleanup(context.Background(), l.request())
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
	ctx, cancel := context.WithDeadline(context.Background(), l.validUntil)
	l.renewCancel = cancel
	l.mu.Unlock()
	defer l.renewing.Done()

	err := l.refresh(ctx)
	cancel()
	next := l.ttl / 3
	switch {
	case err == nil:
	case l.ended() != nil:
		return
	default:
		if errors.Is(err, ErrPermanent) {
			l.c.cfg.logger.Error("dlock: renewal failed, and the store's error is permanent; retrying until the lock's validity ends", "key", l.req.Key, "err", err)
		} else {
			l.c.cfg.logger.Warn("dlock: renewal failed; retrying", "key", l.req.Key, "err", err)
		}
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
// least d either way. A d above Client.MaxReleaseAfter and a nil ctx are an
// *ArgError, and the lock is released at once all the same, rather than left
// renewing. A lock taken WithMaxHold is not held past its max hold: d is
// shortened to the time left until then (and the lock released at once if
// none is left). On a re-entered lock, every call but the last only takes
// one acquisition back, as Release does.
func (l *Lock) ReleaseAfter(ctx context.Context, d time.Duration) error {
	switch most := l.c.MaxReleaseAfter(); {
	case ctx == nil:
		return l.releaseRefused(ctx, argError("ctx", nil, "must not be nil"))
	case d > most:
		return l.releaseRefused(ctx, argError("d", d, "is above this backend's longest hold of %v", most))
	}
	if l.leaveNested() {
		return nil // an inner acquisition of a re-entered lock
	}
	if d <= 0 {
		return l.Release(ctx)
	}
	if l.maxHold > 0 {
		// Not past the max hold.
		if d = min(d, time.Until(l.acquiredAt.Add(l.maxHold))); d <= 0 {
			return l.Release(ctx)
		}
	}
	// A coarse store may end a lease up to one unit early: ask for two
	// more so that the hold lasts at least d.
	d = max(d+2*l.c.caps.TTLResolution, l.c.caps.MinTTL)
	return l.finish(ctx, "release after "+d.String(), d)
}
