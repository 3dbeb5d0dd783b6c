package etcddlock

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock/driver"
)

// subscription follows an owner's predecessors in a queue. It implements
// driver.Subscription.
type subscription struct {
	ch     chan struct{}
	cancel context.CancelFunc
	done   chan struct{} // closed when the following goroutine has returned
}

// C returns the channel that is signalled when the predecessor may be gone.
func (s *subscription) C() <-chan struct{} { return s.ch }

// Close ends the watch and waits for its goroutine. It is idempotent.
func (s *subscription) Close() error {
	s.cancel()
	<-s.done
	return nil
}

func (s *subscription) signal() {
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// Subscribe implements driver.Notifier. It watches only the owner's
// predecessor in the key's queue (the entry created just before the owner's)
// and signals when it is deleted; it then finds the next predecessor and
// watches that one, until the owner is first. An owner without a predecessor
// is signalled at once. The end of the session of the owner's entry is
// signalled too (the waiter then learns that its entry is gone). An owner
// without an entry (an Acquire without Queue) follows the last entry of the
// queue instead.
//
// Each watch starts at the server's current revision; once it is
// established the predecessor is read, and if it is gone already, that
// counts as its deletion. If the store moved on while the watch was being
// registered, etcd may serve the watch from its catch-up loop (which runs
// every 100ms) for a while, so the predecessor is then read again a few
// times over the next 130ms. (A watch from an older revision, such as the
// one right after the read that found the predecessor, would be caught up
// by that loop whenever any write came in between: on a busy key, nearly
// always.)
func (d *Driver) Subscribe(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	var (
		myRev int64
		pred  string
		ended <-chan struct{}
	)
	rec, ok := d.table.Get(reqID(req))
	if ok {
		myRev, ended = rec.rev, rec.sess.done
	}
	if !rec.lost { // a lost entry is signalled at once: the next Acquire learns of the loss
		var err error
		if pred, err = d.predecessor(ctx, req.Key, myRev); err != nil {
			return nil, fmt.Errorf("etcddlock: subscribe %q: %w", req.Key, err)
		}
	}
	s := &subscription{ch: make(chan struct{}, 1), done: make(chan struct{})}
	var wctx context.Context
	wctx, s.cancel = context.WithCancel(d.ctx)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		s.cancel()
		return nil, errClosed
	}
	d.wg.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.wg.Done()
		defer close(s.done)
		d.follow(wctx, s, req.Key, myRev, pred, ended)
	}()
	return s, nil
}

// follow watches pred and its successors as the owner's predecessors until
// ctx ends or the owner has none.
func (d *Driver) follow(ctx context.Context, s *subscription, key string, myRev int64, pred string, ended <-chan struct{}) {
	for pred != "" {
		switch d.awaitDelete(ctx, pred, ended) {
		case stopped:
			return
		case sessionEnded:
			s.signal()
			return
		}
		s.signal()
		delay := 50 * time.Millisecond
		for {
			var err error
			if pred, err = d.predecessor(ctx, key, myRev); err == nil {
				break
			}
			s.signal() // let the waiter find out by asking
			if !sleep(ctx, delay) {
				return
			}
			delay = min(2*delay, maxRetryDelay)
		}
	}
	s.signal()
}

type watchEnd int

const (
	deleted      watchEnd = iota // the key was deleted (or the watch failed: look again)
	sessionEnded                 // the owner's session ended
	stopped                      // the subscription or the driver was closed
)

// catchUpPolls are the delays between the reads that check a predecessor
// while its watch may not be delivering events yet (see awaitDelete). They
// add up to more than etcd's 100ms catch-up period.
var catchUpPolls = []time.Duration{2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond, 16 * time.Millisecond, 32 * time.Millisecond, 64 * time.Millisecond}

// awaitDelete watches key until it is deleted.
//
// It establishes a watch from the server's current revision and then reads
// key: if key is already gone, that counts as its deletion (it happened
// before the watch began). etcd registers a new watch as up to date (events
// are pushed as they happen) only if no write landed between its choice of
// the start revision and the registration; otherwise the watch catches up in
// a loop that runs every 100ms, and a deletion in the meantime would be heard
// late. The reply to the watch's creation carries the revision it started
// from, and the read tells whether the store has moved on since: if it has,
// the watch may be catching up, and key is read again at growing intervals
// for about 130ms, until the catch-up loop must have run.
func (d *Driver) awaitDelete(ctx context.Context, key string, ended <-chan struct{}) watchEnd {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := d.cli.Watch(wctx, key, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	var poll *time.Timer
	var polls []time.Duration
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	gone := func() bool {
		resp, err := d.cli.Get(ctx, key, clientv3.WithCountOnly())
		return err != nil || resp.Count == 0
	}
	for {
		var tick <-chan time.Time
		if poll != nil {
			tick = poll.C
		}
		select {
		case <-ctx.Done():
			return stopped
		case <-ended:
			return sessionEnded
		case <-tick:
			if gone() {
				return deleted
			}
			if len(polls) > 0 {
				poll.Reset(polls[0])
				polls = polls[1:]
			} else {
				poll = nil
			}
		case wr, ok := <-wch:
			switch {
			case !ok && ctx.Err() != nil:
				return stopped
			case !ok || wr.Err() != nil:
				return deleted // the watch failed: look again
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return deleted
				}
			}
			if !wr.Created {
				continue
			}
			resp, err := d.cli.Get(ctx, key, clientv3.WithCountOnly())
			if err != nil || resp.Count == 0 {
				return deleted
			}
			if resp.Header.Revision > wr.Header.Revision && poll == nil {
				poll = time.NewTimer(catchUpPolls[0])
				polls = catchUpPolls[1:]
			}
		}
	}
}

// predecessor returns the entry of key's queue created last before myRev
// (the last entry of all if myRev is 0), or "" if there is none.
func (d *Driver) predecessor(ctx context.Context, key string, myRev int64) (string, error) {
	opts := append(clientv3.WithLastCreate(), clientv3.WithKeysOnly())
	if myRev > 0 {
		opts = append(opts, clientv3.WithMaxCreateRev(myRev-1))
	}
	resp, err := d.cli.Get(ctx, d.queuePrefix(key), opts...)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Key), nil
}
