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

// acquire is the one acquisition behind Lock, TryLock, Do and LockAll. If
// observers saw it start already (a, when not nil), it reports its outcome,
// whatever it is, and does not report a second start.
func (c *Client) acquire(ctx context.Context, key string, wait bool, opts []LockOption, a *acquisition) (*Lock, error) {
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
		started := c.starting(ctx, key, req.Mode, req.Limit)
		a = &started
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
	return c.request(driver.Request{Key: key, Owner: newOwner(), Mode: mode, Limit: limit, Info: info}, cfg), cfg, nil, nil
}

// acquireLoop makes the attempts of one acquisition (see attempts). Waiters
// of this Client for the same key queue in its gate first, so that one
// remote wait per key and process serves them all.
func (c *Client) acquireLoop(parent context.Context, req driver.Request, cfg lockConfig, wait bool) (*Lock, error) {
	at := c.newAttempts(parent, 1, wait)
	defer at.finish()
	at.reqs[0], at.cfgs[0] = req, cfg
	if wait || req.Mode == driver.Exclusive { // readers and permits that do not wait ask the store at once
		var ok bool
		switch at.passes[0], ok = c.gates.enter(at.ctx, req.Key, wait); {
		case !ok && wait:
			return nil, at.ended(nil)
		case !ok:
			return nil, fmt.Errorf("dlock: %w: %q is held (by another goroutine of this client)", ErrNotAcquired, req.Key)
		}
	}
	locks, err := at.run()
	if err != nil {
		return nil, err
	}
	return locks[0], nil
}

// lease returns the holder's lease, the one the store granted req less the
// lock delay's pad (see Client.pad), and the time until which the hold is
// valid, for a request sent at sent.
func lease(req driver.Request, res driver.Result, sent time.Time, pad time.Duration) (time.Duration, time.Time) {
	ttl := req.TTL
	if res.TTL > 0 && res.TTL < ttl {
		ttl = res.TTL
	}
	ttl -= pad
	return ttl, sent.Add(ttl - DriftMargin(ttl))
}

// pad returns what a lock delay adds to the lease dlock asks the store for:
// the delay, and one unit of a coarse lease clock (TTLResolution), which
// the store may cut from a lease; nothing on a driver that keeps the delay
// itself (Capabilities.SessionLockDelay).
func (c *Client) pad(delay time.Duration) time.Duration {
	if delay == 0 || c.caps.SessionLockDelay {
		return 0
	}
	return delay + c.caps.TTLResolution
}

// request returns req with the lease and the lock delay of cfg: a TTL padded
// with the delay (see pad), or the delay in Request.LockDelay for a driver
// that keeps it itself.
func (c *Client) request(req driver.Request, cfg lockConfig) driver.Request {
	req.TTL = cfg.ttl + c.pad(cfg.delay)
	if c.caps.SessionLockDelay {
		req.LockDelay = cfg.delay
	}
	return req
}

// cleanup releases whatever req's owner may hold after an unknown outcome or
// an abandoned wait. The release runs on a context of its own, bounded by
// cleanupTimeout, and the caller waits for it, unless ctx (the caller's
// wait, usually done already) has ended and cleanupGrace passes first: the
// release then finishes in the background, and Close waits for it. It never
// runs while an Acquire for the owner is in flight.
func (c *Client) cleanup(ctx context.Context, req driver.Request) {
	rctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	cl := start(c, rctx, cancel, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, c.drv.Release(ctx, req)
	})
	report := func(_ struct{}, err error) {
		if err != nil && !errors.Is(err, driver.ErrNotOwner) {
			c.cfg.logger.Warn("dlock: cleanup release failed; the lease will expire", "key", req.Key, "err", err)
		}
	}
	if _, err, ok := cl.Wait(ctx, cleanupGrace); ok {
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

// sleepWoken waits for d, a notification on sub (if any) or the end of
// ctx, and reports whether a notification ended it.
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
	mu   sync.Mutex
	m    map[string]*gate
	free sync.Pool // of gates that no goroutine is in or waits for
}

type gate struct {
	ch   chan struct{} // capacity 1: full while some goroutine is inside
	refs int
}

func (g *gates) put(key string, gt *gate) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gt.refs--; gt.refs == 0 {
		delete(g.m, key)
		g.free.Put(gt)
	}
}

// enter returns the caller's pass once it is alone inside the key's gate.
// If the gate is taken it waits, if wait is set, until it is free or ctx
// ends; it returns false if the caller is not let in.
func (g *gates) enter(ctx context.Context, key string, wait bool) (pass, bool) {
	g.mu.Lock()
	gt := g.m[key]
	if gt == nil {
		if gt, _ = g.free.Get().(*gate); gt == nil {
			gt = &gate{ch: make(chan struct{}, 1)}
		}
		g.m[key] = gt
	}
	gt.refs++
	g.mu.Unlock()
	select {
	case gt.ch <- struct{}{}:
		return pass{g, key, gt}, true
	default:
	}
	if wait {
		select {
		case gt.ch <- struct{}{}:
			return pass{g, key, gt}, true
		case <-ctx.Done():
		}
	}
	g.put(key, gt)
	return pass{}, false
}

// pass is a goroutine's place inside a key's gate; the zero pass is none.
type pass struct {
	g   *gates
	key string
	gt  *gate
}

// leave leaves the gate, once: leaving again does nothing.
func (p *pass) leave() {
	if p.gt != nil {
		<-p.gt.ch
		p.g.put(p.key, p.gt)
		p.gt = nil
	}
}
