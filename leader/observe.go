package leader

import (
	"context"
	"crypto/rand"
	"errors"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// DefaultPollInterval is the longest Observe waits between two reads of
// the holders on a backend without notifications, unless WithPollInterval
// says otherwise.
const DefaultPollInterval = time.Second

// minPoll is the first of the quick looks after a change.
const minPoll = 2 * time.Millisecond

// ObserveOption configures Observe.
type ObserveOption func(*observeConfig)

type observeConfig struct {
	poll time.Duration
}

// WithPollInterval sets the longest wait between two reads of the holders
// where the store does not notify releases (and while nobody leads, since a
// new leader is never notified). It must be positive.
func WithPollInterval(d time.Duration) ObserveOption {
	return func(c *observeConfig) { c.poll = d }
}

// Observe reads the leader of key and returns a channel that delivers it
// first, and then the leader after every change: a new term, or nobody
// leading (a zero Leader). Each value is the leader as last read; changes
// that come and go between two reads (or while a slow reader has not taken
// the last value) are not delivered, but term numbers delivered only grow.
//
// The first read is made before Observe returns: an error (the store cannot
// be reached, the backend cannot list holders: dlock.ErrUnsupported, a bad
// key: *dlock.ArgError) is returned then. Later failures to read are retried
// until ctx ends, with nothing delivered meanwhile; a leader learns of its
// own loss from its Term's Context, not from observers. The channel is
// closed when ctx ends, or when a read finds the Client closed.
func Observe(ctx context.Context, c *dlock.Client, key string, opts ...ObserveOption) (<-chan Leader, error) {
	if err := check(ctx, c); err != nil {
		return nil, err
	}
	if err := checkKey(c, key); err != nil {
		return nil, err
	}
	cfg := observeConfig{poll: DefaultPollInterval}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.poll <= 0 {
		return nil, &dlock.ArgError{Name: "poll interval", Value: cfg.poll, Reason: "must be positive"}
	}
	o := &observer{c: c, key: key, poll: cfg.poll, ch: make(chan Leader)}
	if n, ok := c.Driver().(driver.Notifier); ok {
		o.notifier = n
		// The request names the key; the owner, which holds nothing,
		// is one no campaigner uses.
		o.req = driver.Request{Key: key, Owner: rand.Text(), TTL: dlock.DefaultTTL, Mode: driver.Exclusive}
	}
	// Subscribe before the first read, as before every read (see run).
	o.subscribe(ctx)
	cur, left, err := read(ctx, c, key)
	if err != nil {
		o.unsubscribe()
		return nil, err
	}
	go o.run(ctx, cur, left)
	return o.ch, nil
}

type observer struct {
	c        *dlock.Client
	key      string
	poll     time.Duration
	ch       chan Leader
	notifier driver.Notifier // nil without notifications
	req      driver.Request
	sub      driver.Subscription
}

func (o *observer) run(ctx context.Context, cur Leader, left time.Duration) {
	defer close(o.ch)
	defer o.unsubscribe()
	if !o.send(ctx, cur) {
		return
	}
	first := min(minPoll, o.poll)
	quick := first
	for {
		// Wait for a reason to look again.
		var wait time.Duration
		switch {
		case !cur.Elected():
			// Nobody leads, and a new leader is not notified: look
			// soon after a change, then less and less often.
			o.unsubscribe()
			wait, quick = quick, min(2*quick, o.poll)
		case o.sub != nil:
			// Releases are notified; the end of an unrenewed lease is
			// not.
			wait = leaseEnd(left, o.poll)
		default:
			wait = min(o.poll, leaseEnd(left, o.poll))
		}
		signalled, ok := o.wait(ctx, wait)
		if !ok {
			return
		}
		if signalled {
			// A subscription may end with its signal (etcd): take a
			// new one before the next read.
			o.unsubscribe()
		}

		// Subscribe before reading, so that a release after the read is
		// signalled; then read.
		for {
			if cur.Elected() || signalled {
				o.subscribe(ctx)
			}
			next, l, err := read(ctx, o.c, o.key)
			switch {
			case ctx.Err() != nil || errors.Is(err, dlock.ErrClosed):
				return
			case err != nil:
				// Keep the last state and try again after a pause.
				if !sleep(ctx, quick) {
					return
				}
				quick = min(2*quick, o.poll)
				continue
			}
			left = l
			if next == cur {
				if signalled {
					// A signal that changed nothing: do not let a
					// store that keeps signalling spin the loop.
					if !sleep(ctx, quick) {
						return
					}
					quick = min(2*quick, o.poll)
				}
				break
			}
			cur, quick = next, first
			if !o.send(ctx, cur) {
				return
			}
			if cur.Elected() && o.sub == nil && o.notifier != nil {
				// A new leader, not yet watched: subscribe and read
				// again, so that its release cannot go unseen.
				signalled = false
				continue
			}
			break
		}
	}
}

// leaseEnd returns how long to wait for a lease with left to run to end,
// or poll if that is unknown.
func leaseEnd(left, poll time.Duration) time.Duration {
	if left <= 0 {
		return poll
	}
	return left + time.Millisecond
}

// send delivers l, unless ctx ends first.
func (o *observer) send(ctx context.Context, l Leader) bool {
	select {
	case o.ch <- l:
		return true
	case <-ctx.Done():
		return false
	}
}

// wait waits for d, a signal of the subscription or the end of ctx. It
// reports whether a signal came, and false for ok if ctx ended.
func (o *observer) wait(ctx context.Context, d time.Duration) (signalled, ok bool) {
	var sig <-chan struct{}
	if o.sub != nil {
		sig = o.sub.C()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-sig:
		return true, true
	case <-t.C:
		return false, true
	case <-ctx.Done():
		return false, false
	}
}

// subscribe makes sure there is a subscription to releases of the key,
// where the store has them. A subscription that fails is not retried until
// the next read: polling covers for it.
func (o *observer) subscribe(ctx context.Context) {
	if o.notifier == nil || o.sub != nil {
		return
	}
	s, err := o.notifier.Subscribe(ctx, o.req)
	if err != nil {
		if errors.Is(err, driver.ErrUnsupported) {
			o.notifier = nil // a wrapper whose nodes cannot notify
		}
		return
	}
	o.sub = s
}

func (o *observer) unsubscribe() {
	if o.sub != nil {
		o.sub.Close()
		o.sub = nil
	}
}

// sleep waits for d or the end of ctx, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
