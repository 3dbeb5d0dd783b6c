package dlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// acquire is the one acquisition loop behind Lock, TryLock and Do.
func (c *Client) acquire(ctx context.Context, key string, wait bool, opts []LockOption) (*Lock, error) {
	return c.acquireAs(ctx, key, wait, opts, nil)
}

// acquireAs is acquire for an acquisition that observers may have seen
// start already (a, when not nil): it then reports its outcome, whatever
// it is, and does not report a second start.
func (c *Client) acquireAs(ctx context.Context, key string, wait bool, opts []LockOption, a *acquisition) (*Lock, error) {
	if err := c.check(ctx); err != nil {
		if errors.Is(err, ErrClosed) {
			err = notAcquired(key, err)
		}
		return nil, a.failed(c, err)
	}
	req, cfg, l, err := c.prepare(ctx, key, opts)
	if err != nil {
		return nil, a.failed(c, err)
	}
	if l != nil {
		// (An acquisition whose start was reported never re-enters:
		// LockAll reports starts only when ctx carries none of its keys.)
		if err := l.reenter(); err != nil {
			return nil, a.failed(c, fmt.Errorf("dlock: %w%s: re-entering a lock that has ended: %w", ErrNotAcquired, keyedAfter(key, err), bare(err)))
		}
		return l, nil
	}
	// A FIFO store keeps a waiter's place in the queue between attempts; a
	// store with read-write locks holds new readers back while a writer
	// waits.
	req.Queue = wait && (c.caps.FIFO || c.caps.Modes.Has(driver.Shared))
	if !c.enter() {
		return nil, a.failed(c, notAcquired(key, ErrClosed))
	}
	defer c.ops.done()
	if a == nil {
		a = c.starting(ctx, key, req.Mode, req.Limit)
	}
	cfg.id = a.id
	l, err = c.acquireLoop(ctx, req, cfg, wait)
	if err != nil {
		return nil, a.failed(c, err)
	}
	a.acquired(c, l)
	return l, nil
}

// prepare validates a request for key. If ctx carries a lock on key that
// the request may re-enter, it returns that lock (without entering it);
// otherwise the driver request for a new acquisition, without Queue.
func (c *Client) prepare(ctx context.Context, key string, opts []LockOption) (driver.Request, lockConfig, *Lock, error) {
	if err := c.checkKey(key); err != nil {
		return driver.Request{}, lockConfig{}, nil, err
	}
	cfg, err := c.lockConfig(opts)
	if err != nil {
		return driver.Request{}, lockConfig{}, nil, err
	}
	mode, limit := cfg.mode()
	if l := c.heldIn(ctx, key); l != nil {
		// The holder asks again: the same mode re-enters, a read inside a
		// write lock re-enters the write lock, and the rest is refused at
		// once (it would wait for itself).
		switch {
		case mode == driver.Exclusive && l.Mode() == driver.Shared:
			return driver.Request{}, cfg, nil, fmt.Errorf("dlock: %w: %q", ErrUpgrade, key)
		case (mode == driver.Semaphore) != (l.Mode() == driver.Semaphore) || limit != l.Limit():
			return driver.Request{}, cfg, nil, fmt.Errorf("dlock: %w: %q is held as %s", ErrModeMismatch, key, l.Mode())
		}
		return driver.Request{}, cfg, l, nil
	}
	if cfg.fair && !c.caps.FIFO {
		return driver.Request{}, cfg, nil, fmt.Errorf("dlock: fair lock %q: %w: this backend does not queue waiters in order", key, ErrUnsupported)
	}
	info := c.cfg.info
	if cfg.info != nil {
		info = *cfg.info
	}
	return driver.Request{Key: key, Owner: newOwner(), TTL: cfg.ttl, Mode: mode, Limit: limit, Info: info}, cfg, nil, nil
}

// acquireLoop makes the attempts of one acquisition. It waits on a context
// bound to the caller's (parent) and to the Client's Close, and returns
// promptly when either ends; an attempt still on the wire then is cleaned up
// once it completes.
func (c *Client) acquireLoop(parent context.Context, req driver.Request, cfg lockConfig, wait bool) (_ *Lock, err error) {
	ctx := parent
	if wait {
		// Close ends waits at once. A single attempt needs no binding:
		// Close waits for it.
		var unbind context.CancelFunc
		ctx, unbind = c.bind(parent)
		defer unbind()
	}
	// failure is the store's error of the latest attempt, while no later
	// attempt has been answered: the reason a wait that ends now did not
	// get the lock.
	var failure error
	stopped := func() error { return waitEnded(req.Key, why(parent), failure) }

	// Waiters of this Client for the same key queue here first, so that one
	// remote wait per key and process serves them all.
	var leave func()
	if wait {
		if leave, err = c.gates.enter(ctx, req.Key); err != nil {
			return nil, stopped()
		}
	} else if req.Mode != driver.Exclusive {
		// Readers and permits of one Client may hold at once: an
		// attempt that does not wait asks the store even while another
		// goroutine of this Client acquires the key.
		leave = func() {}
	} else if leave = c.gates.tryEnter(req.Key); leave == nil {
		return nil, fmt.Errorf("dlock: %w: %q is held (by another goroutine of this client)", ErrNotAcquired, req.Key)
	}
	defer func() {
		if err != nil {
			leave()
		}
	}()

	var sub driver.Subscription
	defer func() {
		if sub != nil {
			sub.Close()
		}
	}()
	subscribe := wait && c.notifier != nil
	woken := false // the latest sleep ended with a notification
	bo := backoff{min: cfg.minBackoff, max: cfg.maxBackoff}
	reached := false   // the store has answered an attempt
	attempted := false // an attempt was made: a queue entry may exist
	requeued := false  // queued again as a new owner, not answered since
	for {
		if ctx.Err() != nil {
			if attempted {
				c.cleanup(ctx, req)
			}
			return nil, stopped()
		}
		attempted = true
		sent := time.Now()
		res, inflight, err := do(c, ctx, func(ctx context.Context) (driver.Result, error) { return c.drv.Acquire(ctx, req) })
		if inflight != nil {
			// The attempt is still on the wire: whatever it makes of
			// the store is cleared once it completes.
			inflight.after(c, func(driver.Result, error) { c.cleanup(context.Background(), req) })
			return nil, stopped()
		}
		if err != nil {
			// The outcome is unknown. Whoever stops here makes sure that
			// nothing stays behind; a queued waiter that rides out a blip
			// keeps its place, which the next attempt finds again.
			if ctx.Err() != nil {
				if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
					// The store failed this attempt before the wait
					// ended: say so, as a failure seen earlier would.
					failure = err
				}
				c.cleanup(ctx, req)
				return nil, stopped()
			}
			if req.Queue && reached && errors.Is(err, driver.ErrNotOwner) {
				// The waiter's place in the queue ended with its session
				// or lease (a failover, a connection reset): it queues
				// again, at the back, as a new owner with a subscription
				// of its own, rather than carry on as if it had waited;
				// at once, unless the new place too ended unanswered.
				c.cleanup(ctx, req)
				req.Owner = newOwner()
				if sub != nil {
					sub.Close()
					sub, subscribe = nil, true
				}
				if !requeued {
					requeued = true
					continue
				}
			}
			if errors.Is(err, driver.ErrBusy) {
				// The store answered, and changed nothing: the key
				// is as good as held.
				if !wait {
					c.cleanup(ctx, req)
					return nil, fmt.Errorf("dlock: %w%s: %w", ErrNotAcquired, keyedAfter(req.Key, err), err)
				}
				reached = true
			}
			// A store that fails the first attempt is misconfigured or
			// down, and one that fails for good (a permanent error:
			// refused credentials, a missing table) will not mend: say
			// so at once. Once it has answered, another failure while
			// waiting is taken as a blip and ridden out.
			if errors.Is(err, driver.ErrUnsupported) || errors.Is(err, driver.ErrModeMismatch) && (!wait || !reached) {
				// The store answered: it is not unavailable.
				c.cleanup(ctx, req)
				return nil, fmt.Errorf("dlock: acquire%s: %w", keyed(req.Key, err), err)
			}
			if !wait || !reached || c.permanent(err) {
				c.cleanup(ctx, req)
				return nil, fmt.Errorf("dlock: acquire%s: %w", keyed(req.Key, err), c.storeFailure(err))
			}
			failure = err
			if !req.Queue {
				c.cleanup(ctx, req)
			}
			c.cfg.logger.Warn("dlock: acquire attempt failed while waiting; retrying", "key", req.Key, "err", err)
			if err := sleep(ctx, bo.next(), nil); err != nil {
				c.cleanup(ctx, req)
				return nil, stopped()
			}
			continue
		}
		reached, failure, requeued = true, nil, false
		if res.Acquired {
			ttl, validUntil := lease(req, res, sent)
			usableUntil := validUntil
			if cfg.maxHold != nil {
				// A max hold counts from the same instant: a reply
				// that comes after it would hand out a lock that has
				// already ended.
				usableUntil = minTime(usableUntil, sent.Add(*cfg.maxHold))
			}
			if time.Now().Before(usableUntil) {
				if req.Mode != driver.Exclusive {
					// Readers and permits of one Client hold at
					// the same time: the gate serialises only
					// their waits.
					leave()
					leave = func() {}
				}
				l := newLock(c, parent, req, res.Token, ttl, cfg, sent, validUntil, leave)
				if l == nil {
					c.cleanup(ctx, req)
					return nil, notAcquired(req.Key, ErrClosed)
				}
				return l, nil
			}
			// The reply came too late to leave any validity (or any of
			// the max hold): never hand that lock out.
			c.cleanup(ctx, req)
			if !wait {
				if usableUntil.Before(validUntil) {
					return nil, fmt.Errorf("dlock: %w: %q: the store answered after the max hold of %v had run out", ErrNotAcquired, req.Key, *cfg.maxHold)
				}
				return nil, fmt.Errorf("dlock: %w: %q: the store answered after the lease of %v had run out", ErrNotAcquired, req.Key, ttl)
			}
			c.cfg.logger.Warn("dlock: acquired lock had no validity left; retrying", "key", req.Key, "ttl", ttl)
			if err := sleep(ctx, bo.next(), nil); err != nil {
				return nil, stopped()
			}
			continue
		}
		if !wait {
			return nil, fmt.Errorf("dlock: %w: %q is held", ErrNotAcquired, req.Key)
		}
		if subscribe {
			subscribe = false
			s, inflight, err := do(c, ctx, func(ctx context.Context) (driver.Subscription, error) { return c.notifier.Subscribe(ctx, req) })
			if inflight != nil {
				inflight.after(c, func(s driver.Subscription, err error) {
					if err == nil {
						s.Close()
					}
				})
			}
			if err == nil {
				// Try again at once: a release between the attempt and
				// the subscription would otherwise go unnoticed.
				sub = s
				continue
			}
			if ctx.Err() != nil {
				c.cleanup(ctx, req)
				return nil, stopped()
			}
			if !errors.Is(err, driver.ErrUnsupported) {
				c.cfg.logger.Warn("dlock: cannot subscribe to releases; polling instead", "key", req.Key, "err", err)
			}
		}
		delay := bo.next()
		if sub != nil {
			// Notifications do the work; poll only to cover a lost
			// message.
			delay = cfg.maxBackoff
		}
		if res.RetryAfter > 0 && res.RetryAfter < delay {
			delay = res.RetryAfter
		}
		if req.Queue && delay > req.TTL/3 {
			delay = req.TTL / 3 // keep the queue entry alive
		}
		if woken && !req.Queue {
			// A release woke this waiter and another one got the
			// lock, or split the vote with it (a quorum store): wait
			// a random while, up to twice what the attempt took,
			// before the next release may wake it, so that waiters
			// do not retry in step.
			pause := min(rand.N(2*time.Since(sent)+1), delay)
			if err := sleep(ctx, pause, nil); err != nil {
				c.cleanup(ctx, req)
				return nil, stopped()
			}
			delay -= pause
		}
		if woken, err = sleepWoken(ctx, delay, sub); err != nil {
			c.cleanup(ctx, req)
			return nil, stopped()
		}
	}
}

// lease returns the lease the store granted req and the time until which
// the hold is valid, for a request sent at sent.
func lease(req driver.Request, res driver.Result, sent time.Time) (time.Duration, time.Time) {
	ttl := req.TTL
	if res.TTL > 0 && res.TTL < ttl {
		ttl = res.TTL
	}
	return ttl, sent.Add(ttl - DriftMargin(ttl))
}

// cleanup releases whatever req's owner may hold after an unknown outcome or
// an abandoned wait. The release runs on a context of its own, bounded by
// cleanupTimeout, and the caller waits for it, unless ctx (the caller's
// wait, usually done already) has ended and cleanupGrace passes first: the
// release then finishes in the background, and Close waits for it. It never
// runs while an Acquire for the owner is in flight.
func (c *Client) cleanup(ctx context.Context, req driver.Request) {
	rctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	cl := start(c, rctx, func(ctx context.Context) (struct{}, error) {
		defer cancel()
		return struct{}{}, c.drv.Release(ctx, req)
	})
	report := func(_ struct{}, err error) {
		if err != nil && !errors.Is(err, driver.ErrNotOwner) {
			c.cfg.logger.Warn("dlock: cleanup release failed; the lease will expire", "key", req.Key, "err", err)
		}
	}
	if _, err, ok := cl.waitFor(ctx, cleanupGrace); ok {
		report(struct{}{}, err)
	} else {
		cl.after(c, report)
	}
}

// cleanupGrace is how long a caller that has stopped waiting still waits for
// its clean-up: long enough for a store that answers, so that the caller
// returns with nothing left behind, and short enough to return promptly
// from a store that hangs.
const cleanupGrace = 250 * time.Millisecond

// notAcquired is the error of an acquisition of key that ended for cause,
// an error that does not name the key (a context's error, ErrClosed).
func notAcquired(key string, cause error) error {
	return fmt.Errorf("dlock: %w: %q: %w", ErrNotAcquired, key, cause)
}

// waitEnded is the error of a wait for key that ended for reason (the
// context's error, or ErrClosed). If the store failed the last attempt
// that completed, the error names that failure too and wraps
// ErrUnavailable: the lock was not found held, the store could not be used.
func waitEnded(key string, reason, failure error) error {
	if failure == nil {
		return notAcquired(key, reason)
	}
	return fmt.Errorf("dlock: %w%s: %w; the last attempt failed: %w", ErrNotAcquired, keyedAfter(key, failure), reason, &unavailableError{failure})
}

// sleep waits for d, a notification on sub (if any) or the end of ctx.
func sleep(ctx context.Context, d time.Duration, sub driver.Subscription) error {
	_, err := sleepWoken(ctx, d, sub)
	return err
}

// sleepWoken is sleep, and reports whether a notification ended it.
func sleepWoken(ctx context.Context, d time.Duration, sub driver.Subscription) (bool, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	var notify <-chan struct{}
	if sub != nil {
		notify = sub.C()
	}
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-t.C:
		return false, nil
	case <-notify:
		return true, nil
	}
}

// backoff yields jittered, exponentially growing delays between min and max
// ("equal jitter": each delay is uniform in [d/2, d]).
type backoff struct {
	min, max, cur time.Duration
}

func (b *backoff) next() time.Duration {
	switch {
	case b.cur == 0:
		b.cur = b.min
	case b.cur > b.max/2: // doubled, it would pass max (or wrap around)
		b.cur = b.max
	default:
		b.cur *= 2
	}
	half := b.cur / 2
	return half + rand.N(b.cur-half+1)
}

// gates queues the goroutines of one Client that want the same key, so that at
// most one of them acquires or holds it at a time.
type gates struct {
	mu sync.Mutex
	m  map[string]*gate
}

type gate struct {
	ch   chan struct{} // capacity 1: full while some goroutine is inside
	refs int
}

func (g *gates) get(key string) *gate {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]*gate{}
	}
	gt := g.m[key]
	if gt == nil {
		gt = &gate{ch: make(chan struct{}, 1)}
		g.m[key] = gt
	}
	gt.refs++
	return gt
}

func (g *gates) put(key string, gt *gate) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gt.refs--; gt.refs == 0 {
		delete(g.m, key)
	}
}

// enter waits until the caller is alone inside the key's gate and returns the
// function that leaves it.
func (g *gates) enter(ctx context.Context, key string) (func(), error) {
	gt := g.get(key)
	select {
	case gt.ch <- struct{}{}:
		return g.leaver(key, gt), nil
	case <-ctx.Done():
		g.put(key, gt)
		return nil, ctx.Err()
	}
}

// tryEnter is enter without waiting; it returns nil if the gate is taken.
func (g *gates) tryEnter(key string) func() {
	gt := g.get(key)
	select {
	case gt.ch <- struct{}{}:
		return g.leaver(key, gt)
	default:
		g.put(key, gt)
		return nil
	}
}

func (g *gates) leaver(key string, gt *gate) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			<-gt.ch
			g.put(key, gt)
		})
	}
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
