package etcddlock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock/driver"
)

// subscription follows what keeps an owner waiting in a queue. It implements
// driver.Subscription.
type subscription struct {
	ch     chan struct{}
	cancel context.CancelFunc
	done   chan struct{} // closed when the following goroutine has returned
}

// C returns the channel that is signalled when the owner may be admitted.
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

// waiter is an owner waiting in a queue, as a subscription sees it.
type waiter struct {
	key   string
	mode  driver.Mode
	limit int
	rev   int64 // the CreateRevision of its entry; 0 if it has none
}

// blocker is what keeps a waiter from being admitted, as read at revision
// rev (see Driver.blocker).
type blocker struct {
	rev int64
	// name is the entry to watch: an exclusive waiter's predecessor, or the
	// exclusive entry nearest ahead of a shared waiter ("" if nothing
	// blocks). mod is its ModRevision: a later one is a downgrade.
	name string
	mod  int64
	// ahead holds, for a permit that waits, the names of the entries ahead
	// of it: it is admitted once fewer than limit are left.
	ahead map[string]bool
	limit int
}

func (b *blocker) blocks() bool { return b.name != "" || b.ahead != nil }

// Subscribe implements driver.Notifier. It watches only what keeps the owner
// waiting, and signals when that may have changed and the owner may be
// admitted:
//
//   - an exclusive waiter watches its predecessor in the queue (the entry
//     created just before its own) for its deletion, and then the next
//     predecessor, until it is first;
//   - a shared waiter watches the exclusive entry nearest ahead of it for its
//     deletion or a change of its value (a downgrade), and then the next one,
//     until none is ahead;
//   - a permit that waits watches the deletions in its queue (one watch on
//     the queue's prefix), counting those of entries ahead of it, until fewer
//     than its limit are left.
//
// So a release of an exclusive lock wakes the next writer or the readers
// behind it, a release of a reader wakes at most the writer right behind it,
// and a waiting permit reads the store only once it may be admitted: the
// waiter is signalled only when the read that follows a change finds nothing
// blocking it. The end of the session of the owner's entry is signalled too
// (the waiter then learns that its entry is gone). An owner without an entry
// (an Acquire without Queue) is treated as one at the end of the queue.
//
// Each watch starts at the server's current revision; once it is
// established the watched entry is read again (for a permit, the entries
// ahead), and a change found then counts. If the store moved on while the
// watch was being registered, etcd may serve the watch from its catch-up
// loop (which runs every 100ms) for a while, so the read is repeated a few
// times over the next 130ms. (A watch from an older revision, such as the
// one right after the read that found the blocker, would be caught up by that
// loop whenever any write came in between: on a busy key, nearly always.)
func (d *Driver) Subscribe(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	w := waiter{key: req.Key, mode: req.Mode, limit: req.Limit}
	var ended <-chan struct{}
	rec, ok := d.table.Get(reqID(req))
	if ok {
		w.rev, w.mode, w.limit, ended = rec.rev, rec.mode, rec.limit, rec.sess.done
	}
	var b blocker
	if !rec.lost { // a lost entry is signalled at once: the next Acquire learns of the loss
		var err error
		if b, err = d.blocker(ctx, w); err != nil {
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
		d.follow(wctx, s, w, b, ended)
	}()
	return s, nil
}

// follow watches what blocks w, starting with b, until ctx ends or nothing
// does; then it signals.
func (d *Driver) follow(ctx context.Context, s *subscription, w waiter, b blocker, ended <-chan struct{}) {
	for b.blocks() {
		switch d.await(ctx, w, &b, ended) {
		case stopped:
			return
		case sessionEnded:
			s.signal()
			return
		}
		delay := 50 * time.Millisecond
		for {
			var err error
			if b, err = d.blocker(ctx, w); err == nil {
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
	changed      watchEnd = iota // the blocker may be gone (or the watch failed: look again)
	sessionEnded                 // the owner's session ended
	stopped                      // the subscription or the driver was closed
)

// catchUpPolls are the delays between the reads that check a blocker while
// its watch may not be delivering events yet (see await). They add up to
// more than etcd's 100ms catch-up period.
var catchUpPolls = []time.Duration{2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond, 16 * time.Millisecond, 32 * time.Millisecond, 64 * time.Millisecond}

// await watches b, which blocks w, until it may no longer block it.
//
// It establishes a watch from the server's current revision and then reads
// the store again: a change found then happened before the watch began.
// etcd registers a new watch as up to date (events are pushed as they
// happen) only if no write landed between its choice of the start revision
// and the registration; otherwise the watch catches up in a loop that runs
// every 100ms, and a change in the meantime would be heard late. The reply
// to the watch's creation carries the revision it started from, and the read
// tells whether the store has moved on since: if it has, the watch may be
// catching up, and the store is read again at growing intervals for about
// 130ms, until the catch-up loop must have run.
func (d *Driver) await(ctx context.Context, w waiter, b *blocker, ended <-chan struct{}) watchEnd {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wch clientv3.WatchChan
	switch w.mode {
	case driver.Semaphore:
		wch = d.cli.Watch(wctx, d.queuePrefix(w.key), clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	case driver.Shared:
		wch = d.cli.Watch(wctx, b.name, clientv3.WithCreatedNotify())
	default:
		wch = d.cli.Watch(wctx, b.name, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	}
	var poll *time.Timer
	var polls []time.Duration
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
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
			if gone, _ := d.recheck(ctx, w, b); gone {
				return changed
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
				return changed // the watch failed: look again
			}
			for _, ev := range wr.Events {
				if b.changedBy(ev) {
					return changed
				}
			}
			if !wr.Created {
				continue
			}
			gone, rev := d.recheck(ctx, w, b)
			if gone {
				return changed
			}
			if rev > wr.Header.Revision && poll == nil {
				poll = time.NewTimer(catchUpPolls[0])
				polls = catchUpPolls[1:]
			}
		}
	}
}

// changedBy reports whether a watch event may end b: any event on the
// watched entry (the watch of an exclusive waiter's predecessor filters out
// Puts), or for a permit the deletion of an entry ahead that leaves fewer
// than the limit.
func (b *blocker) changedBy(ev *clientv3.Event) bool {
	if b.ahead == nil {
		return true
	}
	k := string(ev.Kv.Key)
	if ev.Type == clientv3.EventTypeDelete && ev.Kv.ModRevision > b.rev && b.ahead[k] {
		delete(b.ahead, k)
	}
	return len(b.ahead) < b.limit
}

// recheck reads the store again and reports whether b may no longer block
// w, and the revision of the read. A read that fails counts as a change
// (the waiter then asks).
func (d *Driver) recheck(ctx context.Context, w waiter, b *blocker) (bool, int64) {
	if b.ahead != nil {
		nb, err := d.blocker(ctx, w)
		if err != nil || !nb.blocks() {
			return true, 0
		}
		*b = nb
		return false, nb.rev
	}
	resp, err := d.cli.Get(ctx, b.name, clientv3.WithKeysOnly())
	if err != nil || len(resp.Kvs) == 0 {
		return true, 0
	}
	return w.mode == driver.Shared && resp.Kvs[0].ModRevision != b.mod, resp.Header.Revision
}

// blocker reads what keeps w waiting (see blocker and Subscribe).
func (d *Driver) blocker(ctx context.Context, w waiter) (blocker, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend)}
	if w.rev > 0 {
		opts = append(opts, clientv3.WithMaxCreateRev(w.rev-1))
	}
	switch w.mode {
	case driver.Exclusive:
		opts = append(opts, clientv3.WithLimit(1), clientv3.WithKeysOnly())
	case driver.Semaphore:
		opts = append(opts, clientv3.WithKeysOnly())
	}
	resp, err := d.cli.Get(ctx, d.queuePrefix(w.key), opts...)
	if err != nil {
		return blocker{}, err
	}
	b := blocker{rev: resp.Header.Revision}
	switch w.mode {
	case driver.Semaphore:
		if len(resp.Kvs) >= w.limit {
			b.ahead, b.limit = make(map[string]bool, len(resp.Kvs)), w.limit
			for _, kv := range resp.Kvs {
				b.ahead[string(kv.Key)] = true
			}
		}
	case driver.Shared:
		i := slices.IndexFunc(resp.Kvs, func(kv *mvccpb.KeyValue) bool { return decode(kv).mode() == driver.Exclusive })
		if i >= 0 {
			b.name, b.mod = string(resp.Kvs[i].Key), resp.Kvs[i].ModRevision
		}
	default:
		if len(resp.Kvs) > 0 {
			b.name = string(resp.Kvs[0].Key)
		}
	}
	return b, nil
}
