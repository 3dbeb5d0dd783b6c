package etcddlock

import (
	"context"
	"fmt"
	"maps"
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
	id    string // its record's
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
	// blocks). create is its CreateRevision (the incarnation: names are
	// reused) and mod its ModRevision: a later one is a downgrade.
	name   string
	create int64
	mod    int64
	// ahead holds, for a permit that waits, the names of the entries ahead
	// of it, each with whether it is a lock entry: it is admitted once fewer
	// than limit are left and none of them is a lock entry.
	ahead map[string]bool
	limit int
	// last reports that nothing else keeps the waiter out: the end of the
	// watched entry (its deletion, or a downgrade) admits it, and so does,
	// for a permit, the deletion that leaves fewer than limit ahead. It
	// holds because entries ahead of an entry never grow in number (new
	// ones go to the back) and never become exclusive, so it needs the
	// waiter to have an entry.
	last bool
}

func (b *blocker) blocks() bool { return b.name != "" || b.ahead != nil }

// stays compares the watched entry with what b read of it: the same
// incarnation, and for a reader's blocker, not downgraded.
func (b *blocker) stays() []clientv3.Cmp {
	c := isEntry(b.name, b.create)
	if b.mod != 0 {
		c = append(c, clientv3.Compare(clientv3.ModRevision(b.name), "=", b.mod))
	}
	return c
}

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
//     than its limit are left, none of them a lock entry (a foreign one).
//
// So a release of an exclusive lock wakes the next writer or the readers
// behind it, a release of a reader wakes at most the writer right behind it,
// and a waiting permit is signalled only once it is admitted. When the read
// that found the blocker showed that nothing else keeps the waiter out (an
// exclusive waiter's predecessor was first in the queue, a reader had no
// other writer ahead, a permit counts what is ahead of it), the blocker's
// end is signalled at once: entries ahead of an entry only ever go, so that
// end admits the waiter. Otherwise the queue is read again after a change,
// and the waiter is signalled when that read finds nothing blocking it, or
// watches the next blocker. Either way the waiter's record notes that it is
// admitted before the signal, and the Acquire that the signal prompts reads
// only its own entry: a handoff reads the queue (which the server scans
// whole) at most once, however many wait in it. The end of the session of
// the owner's entry is signalled too (the waiter then learns that its entry
// is gone). An owner without an entry (an Acquire without Queue) is treated
// as one at the end of the queue; no blocker is the last for it, since new
// entries may come ahead of it.
//
// Subscribe returns at once. The first blocker of an owner with an entry is
// the one its last Acquire read (and the Acquire that package dlock makes
// right after subscribing reads the queue only if that blocker has gone);
// for others the subscription's goroutine reads it, alongside that Acquire.
// Whatever happens after that read is seen by the watch or by the read that
// follows it, and a read that finds nothing blocking signals.
//
// Each watch starts at the server's current revision; once it is
// established the watched entry is read again (for a permit, the entries
// ahead), and a change found then counts. If the store moved on while the
// watch was being registered, etcd may serve the watch from its catch-up
// loop (which runs every 100ms) for a while, so, if the blocker is the last
// (its end is due to admit the waiter), the read is repeated a few times over
// the next 130ms. (A watch from an older revision, such as the
// one right after the read that found the blocker, would be caught up by that
// loop whenever any write came in between: on a busy key, nearly always.)
func (d *Driver) Subscribe(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcddlock: subscribe %q: %w", req.Key, err)
	}
	w := waiter{id: reqID(req), key: req.Key, mode: req.Mode, limit: req.Limit}
	var ended <-chan struct{}
	rec, ok := d.table.Get(w.id)
	if ok {
		w.rev, w.mode, w.limit, ended = rec.rev, rec.mode, rec.limit, rec.sess.done
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
		if rec.lost {
			s.signal() // the next Acquire learns of the loss
			return
		}
		d.follow(wctx, s, w, ended, rec.wait)
	}()
	return s, nil
}

// follow watches what blocks w until ctx ends or nothing does; then it
// signals. The first blocker is hint, if it is set (the one the owner's
// last Acquire read: a later change is seen by await's read). A waiter with
// an entry that nothing blocks any more is admitted for good (entries ahead
// only go): its record says so before the signal, and the Acquire that the
// signal prompts reads nothing but its own entry. So a handoff reads the
// queue once, whatever its length.
func (d *Driver) follow(ctx context.Context, s *subscription, w waiter, ended <-chan struct{}, hint *blocker) {
	for {
		b, ok := d.next(ctx, s, w, hint)
		if !ok {
			return
		}
		hint = nil
		end := unblocked
		if b.blocks() {
			end = d.await(ctx, w, &b, ended)
		}
		switch end {
		case stopped:
			return
		case unblocked:
			d.mark(w.id, record{rev: w.rev}, func(r *record) { r.clear = w.rev > 0 })
			fallthrough
		case sessionEnded:
			s.signal()
			return
		}
	}
}

// next returns the blocker for follow to watch: hint, if it is set, else
// what a read of the queue finds, read again after a failure (which it
// signals, to let the waiter find out by asking) until ctx ends.
func (d *Driver) next(ctx context.Context, s *subscription, w waiter, hint *blocker) (blocker, bool) {
	if hint != nil {
		b := *hint
		b.ahead = maps.Clone(b.ahead) // changedBy changes it
		return b, true
	}
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, maxRetryDelay) {
		b, err := d.blocker(ctx, w)
		if err == nil {
			return b, true
		}
		s.signal()
		if !sleep(ctx, delay) {
			return blocker{}, false
		}
	}
}

type watchEnd int

const (
	changed      watchEnd = iota // the blocker may be gone (or the watch failed: look again)
	unblocked                    // the blocker ended and it was the last (see blocker.last)
	sessionEnded                 // the owner's session ended
	stopped                      // the subscription or the driver was closed
)

// catchUpPolls are the delays between the reads that check a blocker while
// its watch may not be delivering events yet (see await). They add up to
// more than etcd's 100ms catch-up period.
var catchUpPolls = []time.Duration{2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond, 16 * time.Millisecond, 32 * time.Millisecond, 64 * time.Millisecond}

// await watches b, which blocks w, until it may no longer block it. It
// returns unblocked if b was the last thing keeping w out and has ended,
// changed if b may have ended and w must look again.
//
// It establishes a watch from the server's current revision and then reads
// the store again: a change found then happened before the watch began.
// etcd registers a new watch as up to date (events are pushed as they
// happen) only if no write landed between its choice of the start revision
// and the registration; otherwise the watch catches up in a loop that runs
// every 100ms, and a change in the meantime would be heard late. The reply
// to the watch's creation carries the revision it started from, and the read
// tells whether the store has moved on since: if it has, the watch may be
// catching up, and for a last blocker (see blocker.last) the store is read
// again at growing intervals for about 130ms, until the catch-up loop must
// have run. Other blockers are left to the watch: a write rarely lands in
// the instant between the server's choice and the registration, and a late
// event costs at most the loop's period, whereas those reads, six per
// subscription, would cost the server more per handoff the more waiters
// join and leave the queue.
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
	var poll catchUp
	for {
		select {
		case <-ctx.Done():
			return stopped
		case <-ended:
			return sessionEnded
		case <-poll.tick:
			if gone, _, err := d.recheck(ctx, w, b); err != nil {
				return changed
			} else if gone {
				return b.end()
			}
			poll.next()
		case wr, ok := <-wch:
			if end, over := d.heard(ctx, w, b, wr, ok, &poll); over {
				return end
			}
		}
	}
}

// heard handles a reply wr of await's watch (ok is false once the watch is
// closed) and reports whether the wait is over, and how: an event that ends
// b, or the watch's creation, after which the store is read again (and, if
// b is the last, read on poll's schedule if it has moved on since the
// watch's start). A read
// that fails is a possible change: the waiter then asks.
func (d *Driver) heard(ctx context.Context, w waiter, b *blocker, wr clientv3.WatchResponse, ok bool, poll *catchUp) (watchEnd, bool) {
	switch {
	case !ok && ctx.Err() != nil:
		return stopped, true
	case !ok || wr.Err() != nil:
		return changed, true // the watch failed: look again
	case slices.ContainsFunc(wr.Events, b.changedBy):
		return b.end(), true
	case !wr.Created:
		return changed, false
	}
	switch gone, rev, err := d.recheck(ctx, w, b); {
	case err != nil:
		return changed, true
	case gone:
		return b.end(), true
	case rev > wr.Header.Revision && poll.tick == nil && b.last:
		poll.left = catchUpPolls
		poll.next()
	}
	return changed, false
}

// catchUp is await's schedule of reads while its watch may be catching up:
// one when tick fires (never while it is nil), then one after each of left.
type catchUp struct {
	tick <-chan time.Time
	left []time.Duration
}

// next schedules the next read, if any is left.
func (c *catchUp) next() {
	c.tick = nil
	if len(c.left) > 0 {
		c.tick, c.left = time.After(c.left[0]), c.left[1:]
	}
}

// end is how await reports that b has ended (or may have).
func (b *blocker) end() watchEnd {
	if b.last {
		return unblocked
	}
	return changed
}

// changedBy reports whether a watch event ends b: any event on the watched
// entry (its deletion, or a Put, which is a downgrade or comes after a
// deletion; the watch of an exclusive waiter's predecessor filters out
// Puts), or for a permit the deletion of an entry ahead that leaves fewer
// than the limit, and no lock entry (a foreign one, say), ahead.
func (b *blocker) changedBy(ev *clientv3.Event) bool {
	if b.ahead == nil {
		return true
	}
	k := string(ev.Kv.Key)
	if _, ok := b.ahead[k]; ok && ev.Type == clientv3.EventTypeDelete && ev.Kv.ModRevision > b.rev {
		delete(b.ahead, k)
	}
	for _, lock := range b.ahead {
		if lock {
			return false
		}
	}
	return len(b.ahead) < b.limit
}

// recheck reads the store again and reports whether b has ended (the
// watched entry is gone, is another incarnation, or was downgraded; for a
// permit, it is admitted), and the revision of the
// read. The caller treats a read that fails as a possible change: the waiter
// then asks.
func (d *Driver) recheck(ctx context.Context, w waiter, b *blocker) (gone bool, rev int64, _ error) {
	if b.ahead != nil {
		nb, err := d.blocker(ctx, w)
		switch {
		case err != nil:
			return false, 0, err
		case !nb.blocks():
			return true, nb.rev, nil
		}
		*b = nb
		return false, nb.rev, nil
	}
	resp, err := d.cli.Get(ctx, b.name, clientv3.WithKeysOnly())
	switch {
	case err != nil:
		return false, 0, err
	case len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != b.create:
		// Gone, or gone and created again (behind w: names are reused).
		return true, resp.Header.Revision, nil
	}
	return w.mode == driver.Shared && resp.Kvs[0].ModRevision != b.mod, resp.Header.Revision, nil
}

// blocker reads what keeps w waiting (see blocker and Subscribe): the entries
// of w's queue ahead of it, with their values, as aheadOp reads them.
func (d *Driver) blocker(ctx context.Context, w waiter) (blocker, error) {
	rev := w.rev - 1
	if w.rev == 0 {
		rev = 0
	}
	resp, err := d.cli.Do(ctx, d.aheadOp(w.key, rev, false))
	if err != nil {
		return blocker{}, err
	}
	return judge(w, resp.Get().Header.Revision, merge(d.own(w.key, resp.Get().Kvs))), nil
}

// waiting returns what keeps r's entry out by kvs, its queue as an Acquire
// read it at revision rev, for the Subscribe that follows; nil if the entry
// is admitted.
func (r record) waiting(rev int64, kvs []*mvccpb.KeyValue, admitted bool) *blocker {
	if admitted {
		return nil
	}
	b := judge(waiter{rev: r.rev, mode: r.mode, limit: r.limit}, rev, kvs)
	return &b
}

// judge returns what keeps w waiting among kvs, the entries of its queue
// ahead of it as read at revision rev (entries from w's own on are
// ignored). An exclusive waiter needs only their keys.
func judge(w waiter, rev int64, kvs []*mvccpb.KeyValue) blocker {
	if w.rev > 0 {
		kvs = slices.DeleteFunc(slices.Clone(kvs), func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision >= w.rev })
	}
	b := blocker{rev: rev}
	switch w.mode {
	case driver.Semaphore:
		if len(kvs) >= w.limit || slices.ContainsFunc(kvs, isLock) {
			b.ahead, b.limit = make(map[string]bool, len(kvs)), w.limit
			for _, kv := range kvs {
				b.ahead[string(kv.Key)] = isLock(kv)
			}
			b.last = w.rev > 0
		}
	case driver.Shared:
		// The nearest writer ahead, and whether an older one is there
		// too.
		for i := len(kvs) - 1; i >= 0; i-- {
			if kv := kvs[i]; isExclusive(kv) {
				b.name, b.create, b.mod = string(kv.Key), kv.CreateRevision, kv.ModRevision
				b.last = w.rev > 0 && !slices.ContainsFunc(kvs[:i], isExclusive)
				break
			}
		}
	default:
		if len(kvs) > 0 {
			kv := kvs[len(kvs)-1]
			b.name, b.create = string(kv.Key), kv.CreateRevision
			b.last = w.rev > 0 && len(kvs) == 1
		}
	}
	return b
}
