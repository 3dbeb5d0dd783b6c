package natsdlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dlockhq/dlock/driver"
)

// Subscribe implements driver.Notifier: a subscription to the subject of
// the key's record, on which every write of the key is published (a
// release's purge, a force release, a takeover's create). It costs the
// server an interest, not a consumer. Every message signals: the waiter's
// next Acquire tells whether it was a release. The end of a hold's TTL
// publishes nothing (package dlock polls, using Result.RetryAfter).
func (d *Driver) Subscribe(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	if err := d.check(ctx, req); err != nil {
		return nil, err
	}
	s := &sub{ch: make(chan struct{}, 1)}
	var err error
	s.ns, err = d.nc.Subscribe(d.subj+entryKey(req.Key), func(*nats.Msg) {
		select {
		case s.ch <- struct{}{}:
		default:
		}
	})
	if err == nil {
		// The server has the interest once it answers a ping sent after it:
		// every write from then on is signalled. The client flushes only
		// with a deadline.
		fctx, cancel := context.WithTimeout(ctx, flushTimeout)
		defer cancel()
		if err = d.nc.FlushWithContext(fctx); err != nil {
			s.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("natsdlock: subscribe %q: %w", req.Key, withCtx(ctx, err))
	}
	return s, nil
}

// flushTimeout bounds the ping that confirms a subscription.
const flushTimeout = 10 * time.Second

type sub struct {
	ns   *nats.Subscription
	ch   chan struct{}
	once sync.Once
}

func (s *sub) C() <-chan struct{} { return s.ch }

func (s *sub) Close() error {
	var err error
	s.once.Do(func() {
		if err = s.ns.Unsubscribe(); err == nats.ErrConnectionClosed {
			err = nil
		}
	})
	return err
}
