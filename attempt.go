package dlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// attempts is one acquisition, of one key or of several keys at once, as
// the steps every lock goes through (see run): an attempt that returns an
// outcome, the policy that decides what follows, the pause before the next
// attempt, and one clean-up that the caller defers (finish).
type attempts struct {
	c         *Client
	parent    context.Context         // the caller's
	ctx       context.Context         // parent, bound to Close (see newAttempts)
	cancel    context.CancelCauseFunc // ends ctx, if bound
	reqs      []driver.Request
	cfgs      []lockConfig
	ma        driver.MultiAcquirer // takes several keys at once
	keys      []string             // taken at once, if several
	wait      bool
	passes    []pass    // into the keys' gates of this Client (none: the zero pass)
	locks     []*Lock   // handed out, for the first requests
	sent      time.Time // when the latest attempt was sent
	dirty     bool      // the store may keep something of the owners
	reached   bool      // the store has answered an attempt
	requeued  bool      // queued again as a new owner, not answered since
	failure   error     // the store's failure of the latest attempt, while no later one was answered
	sub       driver.Subscription
	subscribe bool // subscribe to releases at the next pause for one
	woken     bool // the latest pause ended with a notification
	handed    bool // the store handed the key over with that notification (see granted)
	bo        backoff
	// send makes one attempt on the store (acquireOne, or AcquireAll).
	send func(context.Context) (driver.MultiResult, error)
	one  struct { // backs the slices of an attempt at one key
		req    [1]driver.Request
		cfg    [1]lockConfig
		pass   [1]pass
		result [1]driver.Result
		lock   [1]*Lock
	}
}

// verdict is what the policy makes of an attempt's outcome.
type verdict int

const (
	hold  verdict = iota // the attempt took every key: hand out the locks
	stop                 // give up, or fail, with the policy's error
	again                // attempt again at once
	retry                // attempt again after the backoff
	await                // wait for a release, then attempt again
)

// newAttempts starts the attempts for n keys, whose requests and
// configurations the caller then fills in (reqs, cfgs). A wait, or an
// attempt at several keys, is bound to Close too; Close waits for a single
// attempt at one key.
func (c *Client) newAttempts(parent context.Context, n int, wait bool) *attempts {
	at := &attempts{c: c, parent: parent, ctx: parent, wait: wait, subscribe: wait && c.notifier != nil}
	at.reqs, at.cfgs, at.passes, at.locks, at.send = at.one.req[:], at.one.cfg[:], at.one.pass[:], at.one.lock[:0], at.acquireOne
	if n > 1 {
		at.reqs, at.cfgs, at.passes, at.locks = make([]driver.Request, n), make([]lockConfig, n), make([]pass, n), make([]*Lock, 0, n)
	}
	if wait || n > 1 {
		at.ctx, at.cancel = c.bind(parent)
	}
	return at
}

// run makes attempts until the policy holds the keys or stops, and returns
// the locks (see hold). Several keys are taken at once in one attempt only:
// when the policy would go on, the caller takes them one by one.
func (at *attempts) run() ([]*Lock, error) {
	at.bo = backoff{min: at.cfgs[0].minBackoff, max: at.cfgs[0].maxBackoff}
	for {
		o, err := at.attempt()
		if at.ma != nil && errors.Is(err, driver.ErrUnsupported) {
			at.dirty = false // refused before it touched the store
			return nil, nil
		}
		switch v, err := at.decide(o, err); {
		case v == hold:
			return at.hold(o)
		case v == stop:
			return nil, err
		case at.ma != nil:
			return nil, nil
		case v != again && at.pause(v, o.RetryAfter) != nil:
			return nil, at.ended(nil)
		}
	}
}

// attempt makes one attempt, an Acquire or an AcquireAll, unless the wait
// has ended, and returns its outcome. One still on the wire when the wait
// ends runs on, and whatever it makes of the store is cleared once it lands.
func (at *attempts) attempt() (driver.MultiResult, error) {
	if err := at.ctx.Err(); err != nil {
		return driver.MultiResult{}, err
	}
	if r, ok := at.granted(); ok {
		at.one.result[0], at.handed = r, true
		return driver.MultiResult{Acquired: true, Results: at.one.result[:]}, nil
	}
	at.dirty, at.sent, at.handed = true, time.Now(), false
	res, inflight, err := do(at.c, at.ctx, at.send)
	if inflight != nil {
		at.dirty = false
		inflight.after(at.c, func(driver.MultiResult, error) { at.cleanup(context.Background()) })
	}
	if err == nil && res.Acquired && (len(res.Results) != len(at.reqs) || slices.ContainsFunc(res.Results, func(r driver.Result) bool { return !r.Acquired })) {
		err = errors.New("the driver reported success without a hold for every key")
	}
	res.Blocked = max(0, min(res.Blocked, len(at.reqs)-1))
	return res, err
}

// granted returns the hold that the store handed to the waiter with the
// notification that woke it (driver.Granter), if the latest attempt was
// answered: the hold's lease then counts from no earlier than at.sent. If
// less than half of that lease is left by this reckoning (the latest
// attempt was long ago), or the lock will not be renewed (the handed lease
// is shorter than the one asked for), the next attempt confirms the hold
// instead, and extends it.
func (at *attempts) granted() (driver.Result, bool) {
	g, ok := at.sub.(driver.Granter)
	if !ok || !at.woken || at.failure != nil || len(at.reqs) > 1 || !at.cfgs[0].renew {
		return driver.Result{}, false
	}
	r, ok := g.Granted()
	if _, until := lease(at.reqs[0], r, at.sent, at.c.pad(at.cfgs[0].delay)); !ok || time.Until(until) < r.TTL/2 {
		return driver.Result{}, false
	}
	return r, true
}

// acquireOne is the attempt at one key on the store.
func (at *attempts) acquireOne(ctx context.Context) (driver.MultiResult, error) {
	res, err := at.c.drv.Acquire(ctx, at.reqs[0])
	at.one.result[0] = res
	return driver.MultiResult{Acquired: res.Acquired, Results: at.one.result[:], RetryAfter: res.RetryAfter}, err
}

// decide is the policy: what follows an attempt's outcome.
func (at *attempts) decide(o driver.MultiResult, err error) (verdict, error) {
	if err != nil {
		return at.failed(err)
	}
	at.reached, at.failure, at.requeued = true, nil, false
	if !o.Acquired {
		at.dirty = at.reqs[0].Queue // a refusal changes nothing but a queue entry
		if !at.wait {
			return stop, fmt.Errorf("dlock: %s%w: %q is held", at.many(), ErrNotAcquired, at.reqs[o.Blocked].Key)
		}
		return await, nil
	}
	if err := at.late(o); err != nil {
		// Never hand out a lock that has already ended.
		at.cleanup(at.ctx)
		at.dirty = false
		if !at.wait {
			return stop, err
		}
		at.c.cfg.logger.Warn("dlock: acquired lock had no validity left; retrying", "key", at.reqs[0].Key, "err", err)
		return retry, nil
	}
	return hold, nil
}

// failed is the policy for an attempt whose outcome is unknown (err). A
// store that fails the first attempt is down or misconfigured, and one that
// fails for good (ErrPermanent) will not mend: say so at once. Once it has
// answered, a failure while waiting is a blip to ride out; a queued waiter
// keeps its place, which the next attempt finds again.
func (at *attempts) failed(err error) (verdict, error) {
	if at.ctx.Err() != nil {
		return stop, at.ended(err)
	}
	if at.requeue(err) {
		return again, nil
	}
	answered := at.reached || errors.Is(err, driver.ErrBusy) // ErrBusy: the store changed nothing
	switch {
	case errors.Is(err, driver.ErrBusy) && !at.wait:
		return stop, fmt.Errorf("dlock: %w%s: %w", ErrNotAcquired, at.keyed(":", err), err)
	case errors.Is(err, driver.ErrUnsupported) || errors.Is(err, driver.ErrModeMismatch) && !(at.wait && answered):
		return stop, fmt.Errorf("dlock: acquire%s: %w", at.keyed("", err), err) // it answered: not unavailable
	case !at.wait || !answered || at.c.permanent(err):
		return stop, fmt.Errorf("dlock: acquire%s: %w", at.keyed("", err), at.c.storeFailure(err))
	}
	at.reached, at.failure = true, err
	if !at.reqs[0].Queue {
		at.cleanup(at.ctx)
	}
	at.c.cfg.logger.Warn("dlock: acquire attempt failed while waiting; retrying", "key", at.reqs[0].Key, "err", err)
	return retry, nil
}

// requeue queues a waiter whose place in the queue ended (err wraps
// ErrNotOwner: a failover, a reset) again, at the back, as a new owner with
// a subscription of its own. It reports whether to attempt again at once:
// not if the new place too ended unanswered.
func (at *attempts) requeue(err error) bool {
	if !at.reqs[0].Queue || !at.reached || !errors.Is(err, driver.ErrNotOwner) {
		return false
	}
	at.cleanup(at.ctx)
	at.reqs[0].Owner = newOwner()
	if at.sub != nil {
		at.sub.Close()
		at.sub, at.subscribe = nil, true
	}
	first := !at.requeued
	at.requeued = true
	return first
}

// late returns an error if the reply that granted the holds came after the
// lease of one of them, or its max hold (which counts from the same
// instant), had run out.
func (at *attempts) late(o driver.MultiResult) error {
	for i, req := range at.reqs {
		ttl, until := lease(req, o.Results[i], at.sent, at.c.pad(at.cfgs[i].delay))
		bound, d := "lease", ttl
		if mh := at.cfgs[i].maxHold; mh != nil && at.sent.Add(*mh).Before(until) {
			bound, d, until = "max hold", *mh, at.sent.Add(*mh)
		}
		if !time.Now().Before(until) {
			return fmt.Errorf("dlock: %s%w: %q: the store answered after the %s of %v had run out", at.many(), ErrNotAcquired, req.Key, bound, d)
		}
	}
	return nil
}

// hold hands out the locks the attempt took. If the Client was closed
// meanwhile, it returns the locks made before with the error, for the
// caller to report and release; finish clears the rest.
func (at *attempts) hold(o driver.MultiResult) ([]*Lock, error) {
	for i, req := range at.reqs {
		pad := at.c.pad(at.cfgs[i].delay)
		ttl, validUntil := lease(req, o.Results[i], at.sent, pad)
		if at.handed {
			ttl = req.TTL - pad // the first renewal, soon, asks for it (see newLock)
		}
		if req.Mode != driver.Exclusive {
			// Readers and permits of one Client hold at once: the gate
			// serialises only their waits.
			at.passes[i].leave()
		}
		l := newLock(at.c, at.parent, req, o.Results[i].Token, ttl, at.cfgs[i], at.sent, validUntil, at.passes[i])
		if l == nil {
			return at.locks, at.ended(nil)
		}
		at.locks = append(at.locks, l)
	}
	return at.locks, nil
}

// pause waits before the next attempt, and returns an error if the wait
// ends first: for the backoff after a failure or a reply that came too
// late; after a refusal, for a release notification (polling only to cover
// a lost message), the backoff or the store's estimate (retryAfter),
// whichever comes first.
func (at *attempts) pause(v verdict, retryAfter time.Duration) (err error) {
	if v == retry {
		_, err = sleepWoken(at.ctx, at.bo.next(), nil)
		return err
	}
	if at.subscribe {
		// Once subscribed, attempt again at once: a release between the
		// attempt and the subscription would otherwise go unnoticed.
		if err := at.subscribeNow(); at.sub != nil || err != nil {
			return err
		}
	}
	delay := at.bo.next()
	if at.sub != nil {
		delay = at.bo.max
	}
	if retryAfter > 0 && retryAfter < delay {
		delay = retryAfter
	}
	if req := at.reqs[0]; req.Queue && delay > req.TTL/3 {
		delay = req.TTL / 3 // keep the queue entry alive
	}
	if at.woken && !at.reqs[0].Queue {
		// A release woke this waiter and another got the lock, or split
		// the vote (a quorum store): wait a random while, up to twice what
		// the attempt took, so that waiters do not retry in step.
		pause := min(rand.N(2*time.Since(at.sent)+1), delay)
		if _, err := sleepWoken(at.ctx, pause, nil); err != nil {
			return err
		}
		delay -= pause
	}
	at.woken, err = sleepWoken(at.ctx, delay, at.sub)
	return err
}

// subscribeNow asks the store to notify the waiter of the key's releases.
// It returns an error only if the wait ended.
func (at *attempts) subscribeNow() error {
	at.subscribe = false
	req := at.reqs[0]
	s, inflight, err := do(at.c, at.ctx, func(ctx context.Context) (driver.Subscription, error) { return at.c.notifier.Subscribe(ctx, req) })
	if inflight != nil {
		inflight.after(at.c, func(s driver.Subscription, err error) {
			if err == nil {
				s.Close()
			}
		})
	}
	switch {
	case err == nil:
		at.sub = s
	case at.ctx.Err() != nil:
		return err
	case !errors.Is(err, driver.ErrUnsupported):
		at.c.cfg.logger.Warn("dlock: cannot subscribe to releases; polling instead", "key", req.Key, "err", err)
	}
	return nil
}

// finish is the one clean-up, which the caller defers: it clears what the
// store may keep of the requests whose locks were not handed out, and ends
// the subscription, their gates and the binding.
func (at *attempts) finish() {
	if at.dirty {
		at.cleanup(at.ctx)
	}
	if at.sub != nil {
		at.sub.Close()
	}
	for i := len(at.passes) - 1; i >= len(at.locks); i-- {
		at.passes[i].leave()
	}
	if at.cancel != nil {
		at.c.unbind(at.ctx, at.cancel)
	}
}

// cleanup releases what the requests whose locks were not handed out may
// hold (see Client.cleanup).
func (at *attempts) cleanup(ctx context.Context) {
	for _, req := range at.reqs[len(at.locks):] {
		at.c.cleanup(ctx, req)
	}
}

// ended is the error of a wait that ended (its context, or Close) after an
// attempt that failed with err (or nil). If the store failed the latest
// attempt that completed, it names that failure and wraps ErrUnavailable.
func (at *attempts) ended(err error) error {
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		at.failure = err
	}
	reason := why(at.parent)
	if at.failure == nil {
		return fmt.Errorf("dlock: %w%s: %w", ErrNotAcquired, at.keyed(":", nil), reason)
	}
	return fmt.Errorf("dlock: %w%s: %w; the last attempt failed: %w", ErrNotAcquired, at.keyed(":", at.failure), reason, &unavailableError{at.failure})
}

// keyed names the key, or the keys taken at once, after sep for a message
// that wraps err, or returns "" if err names the key (see errtext.Keyed).
func (at *attempts) keyed(sep string, err error) string {
	if at.keys != nil {
		return fmt.Sprintf("%s keys %q at once", sep, at.keys)
	}
	if k := keyed(at.reqs[0].Key, err); k != "" {
		return sep + k
	}
	return ""
}

// many says, in an error that names one of several keys taken at once,
// that there are more.
func (at *attempts) many() string {
	if at.keys == nil {
		return ""
	}
	return fmt.Sprintf("acquiring %d keys at once: ", len(at.keys))
}
