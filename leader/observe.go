package leader

import (
	"context"
	"errors"
	"time"

	"github.com/dlockhq/dlock"
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
// closed when ctx ends or the Client is closed.
func Observe(ctx context.Context, c *dlock.Client, key string, opts ...ObserveOption) (<-chan Leader, error) {
	if err := check(ctx, c); err != nil {
		return nil, err
	}
	cfg := observeConfig{poll: DefaultPollInterval}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.poll <= 0 {
		return nil, &dlock.ArgError{Name: "poll interval", Value: cfg.poll, Reason: "must be positive"}
	}
	// Watch before the first read, so that no release after it goes
	// unseen.
	wctx, cancel := context.WithCancel(ctx)
	released, err := c.Watch(wctx, key, cfg.poll)
	if err != nil {
		cancel()
		return nil, err
	}
	o := &observer{c: c, key: key, poll: cfg.poll, ch: make(chan Leader), released: released, cancel: cancel}
	cur, left, err := read(ctx, c, key)
	if err != nil {
		o.stop()
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
	released <-chan struct{} // from Client.Watch
	cancel   context.CancelFunc
}

// run delivers cur, then reads the leader again whenever it may have
// changed and delivers it when it did, until ctx ends or the Client is
// closed.
func (o *observer) run(ctx context.Context, cur Leader, left time.Duration) {
	defer close(o.ch)
	defer o.stop()
	first := min(minPoll, o.poll)
	quick := first
	for o.send(ctx, cur) {
		failed := false
		for {
			// Wait for a release, or for the leader's lease to end
			// if nobody renews it; while nobody leads (a new leader
			// is not notified), or after a failed read, look soon,
			// then less and less often.
			wait := leaseEnd(left, o.poll)
			if failed || !cur.Elected() {
				wait, quick = quick, min(2*quick, o.poll)
			}
			if !o.wait(ctx, wait) {
				return
			}
			next, l, err := read(ctx, o.c, o.key)
			if ctx.Err() != nil || errors.Is(err, dlock.ErrClosed) {
				return
			}
			if failed = err != nil; failed {
				continue // keep the last state
			}
			left = l
			if next != cur {
				cur, quick = next, first
				break
			}
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

// wait waits for d or a value from the watch of releases. It reports false
// if ctx ended or the watch did (the Client was closed).
func (o *observer) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case _, ok := <-o.released:
		return ok
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// stop ends the watch of releases and waits until it has left nothing on
// the store.
func (o *observer) stop() {
	o.cancel()
	for range o.released {
	}
}
