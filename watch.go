package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// Watch watches key for releases, until ctx ends or the Client is closed,
// and returns a channel that tells of them: after every release of key made
// after Watch returns, by any client of the store, the channel receives a
// value sent after that release, so that a look at the key (Holders,
// TryLock) made once the value is received sees the release or what came
// after it. Values coalesce: one waiting to be received stands for every
// release since it was sent.
//
// Releases are notified where the backend notifies waiters (Redis pub/sub,
// PostgreSQL LISTEN/NOTIFY, etcd and ZooKeeper watches, the in-process
// store). Elsewhere (MySQL/MariaDB, SQLite, memcached), and while the store
// refuses a subscription, the channel receives a value every poll instead:
// look again then. A value may come without a release, as it does where
// the store signals a change that may free the key (a holder's arrival on
// ZooKeeper, a key nobody holds on etcd). A store that keeps signalling is
// asked less and less often, down to once a second (or once per poll, if
// that is shorter), and releases in quick succession are then told of
// together. The end of a lease that nobody renews is not notified: a
// caller that knows when a lease ends (Holder.TTL) looks then.
//
// Watch subscribes before it returns, so a look made after it cannot miss a
// release. It returns an *ArgError for a bad key or a poll that is not
// positive, and ErrClosed once the Client is closed. The channel is closed
// when ctx ends or the Client is closed, once the watch has left nothing on
// the store.
func (c *Client) Watch(ctx context.Context, key string, poll time.Duration) (<-chan struct{}, error) {
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	if err := c.checkKey(key); err != nil {
		return nil, err
	}
	if poll <= 0 {
		return nil, argError("poll", poll, "must be positive")
	}
	if !c.enter() {
		return nil, ErrClosed
	}
	defer c.ops.done()
	// The owner, which holds nothing, is one nobody else uses.
	w := &watch{c: c, notifier: c.notifier, poll: poll, ch: make(chan struct{}, 1),
		req: driver.Request{Key: key, Owner: newOwner(), TTL: c.cfg.defaultTTL, Mode: driver.Exclusive}}
	wctx, cancel := c.bind(ctx)
	w.subscribe(wctx)
	c.bg.add()
	go func() {
		defer c.bg.done()
		defer c.unbind(wctx, cancel)
		w.run(wctx)
	}()
	return w.ch, nil
}

// A signal that comes sooner than maxWatchGap (or the poll interval, if
// shorter) after a watch subscribed makes it pause before it subscribes
// again: minWatchGap the first time, twice as long each time in a row, up
// to that limit.
const (
	minWatchGap = 2 * time.Millisecond
	maxWatchGap = time.Second
)

type watch struct {
	c        *Client
	notifier driver.Notifier // nil once the store cannot notify
	req      driver.Request
	poll     time.Duration
	ch       chan struct{}
	sub      driver.Subscription // nil while not subscribed
}

// run passes the store's signals (or a tick every poll, without a
// subscription) on to w.ch until ctx ends. After each one it subscribes
// again (a subscription may end with its signal, as etcd's do) and only
// then sends, so that a release between the two is seen by the caller's
// next look.
func (w *watch) run(ctx context.Context) {
	defer close(w.ch)
	defer w.unsubscribe()
	var gap time.Duration
	for {
		began := time.Now()
		signalled, ok := w.wait(ctx, w.poll)
		if !ok {
			return
		}
		w.unsubscribe()
		if limit := min(w.poll, maxWatchGap); signalled && time.Since(began) < limit {
			// Signals in quick succession: pause, longer each time,
			// so that a store that keeps signalling is not asked
			// over and over.
			gap = min(max(2*gap, minWatchGap), limit)
			if _, ok := w.wait(ctx, gap); !ok {
				return
			}
		} else {
			gap = 0
		}
		w.subscribe(ctx)
		select {
		case w.ch <- struct{}{}:
		default: // a value is waiting already
		}
	}
}

// wait waits for a signal of the subscription, or for d if there is none.
// It reports false for ok if ctx ended first.
func (w *watch) wait(ctx context.Context, d time.Duration) (signalled, ok bool) {
	var sig <-chan struct{}
	var tick <-chan time.Time
	if w.sub != nil {
		sig = w.sub.C()
	} else {
		t := time.NewTimer(d)
		defer t.Stop()
		tick = t.C
	}
	select {
	case <-sig:
		return true, true
	case <-tick:
		return false, true
	case <-ctx.Done():
		return false, false
	}
}

// subscribe subscribes to the releases of the key, where the store notifies
// them. A subscription that fails is tried again after the next tick; one
// the store does not support is not.
func (w *watch) subscribe(ctx context.Context) {
	if w.notifier == nil {
		return
	}
	s, inflight, err := do(w.c, ctx, func(ctx context.Context) (driver.Subscription, error) { return w.notifier.Subscribe(ctx, w.req) })
	if inflight != nil {
		inflight.after(w.c, func(s driver.Subscription, err error) {
			if err == nil {
				s.Close()
			}
		})
	}
	switch {
	case err == nil:
		w.sub = s
	case errors.Is(err, driver.ErrUnsupported):
		w.notifier = nil // a wrapper whose nodes cannot notify
	}
}

func (w *watch) unsubscribe() {
	if w.sub != nil {
		w.sub.Close()
		w.sub = nil
	}
}
