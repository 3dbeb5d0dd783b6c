package etcddlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// waiterOf returns the waiter that a subscription of r on d follows.
func waiterOf(t *testing.T, d *Driver, r driver.Request) waiter {
	t.Helper()
	rec, ok := d.table.Get(reqID(r))
	if !ok {
		t.Fatalf("no record of %s owner %q", r.Mode, r.Owner)
	}
	return waiter{key: r.Key, mode: rec.mode, limit: rec.limit, rev: rec.rev}
}

// A waiter's blocker says whether its end admits the waiter (then the
// subscription signals without reading the queue again): the predecessor of
// an exclusive waiter if it is first, the writer ahead of a reader if no
// other writer is ahead, the entries ahead of a permit. An owner without an
// entry is never sure: new entries may come ahead of it.
func TestBlockerKnowsTheLast(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	d := newTestDriver(t, srv.Addr)
	defer d.Close()
	entryOf := func(r driver.Request) string {
		rec, _ := d.table.Get(reqID(r))
		return rec.name
	}
	check := func(what string, w waiter, name string, last bool) {
		t.Helper()
		b, err := d.blocker(ctx(t), w)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if b.name != name || b.last != last {
			t.Errorf("%s: blocker %q, last %v; want %q, %v", what, b.name, b.last, name, last)
		}
	}

	k := key(t)
	h, w1, w2 := req(k), req(k), req(k)
	w1.Queue, w2.Queue = true, true
	mustAcquire(t, d, h, true)
	mustAcquire(t, d, w1, false)
	mustAcquire(t, d, w2, false)
	check("first waiter", waiterOf(t, d, w1), entryOf(h), true)
	check("second waiter", waiterOf(t, d, w2), entryOf(w1), false)
	check("owner without an entry", waiter{key: k, mode: driver.Exclusive}, entryOf(w2), false)

	k = key(t) + "rw"
	x, r1, y, r2 := req(k), shared(k, true), req(k), shared(k, true)
	y.Queue = true
	mustAcquire(t, d, x, true)
	mustAcquire(t, d, r1, false)
	mustAcquire(t, d, y, false)
	mustAcquire(t, d, r2, false)
	check("reader behind the holder", waiterOf(t, d, r1), entryOf(x), true)
	check("reader behind two writers", waiterOf(t, d, r2), entryOf(y), false)

	k = key(t) + "sem"
	p1, p2 := permit(k, 1, true), permit(k, 1, true)
	mustAcquire(t, d, p1, true)
	mustAcquire(t, d, p2, false)
	for _, c := range []struct {
		what string
		w    waiter
		last bool
	}{
		{"waiting permit", waiterOf(t, d, p2), true},
		{"permit without an entry", waiter{key: k, mode: driver.Semaphore, limit: 1}, false},
	} {
		b, err := d.blocker(ctx(t), c.w)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if !b.blocks() || b.last != c.last {
			t.Errorf("%s: blocks %v, last %v; want true, %v", c.what, b.blocks(), b.last, c.last)
		}
	}
}

// A driver reuses entry names, so the predecessor a waiter found may be gone
// and its name created again (behind the waiter) before the waiter's watch
// starts: the read that follows the watch's creation tells the incarnations
// apart, and the waiter is not left watching an entry that waits for it.
func TestRecheckSeesAnotherIncarnation(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	d1 := newTestDriver(t, srv.Addr)
	defer d1.Close()
	d2 := newTestDriver(t, srv.Addr)
	defer d2.Close()
	k := key(t)
	h, w := req(k), req(k)
	w.Queue = true
	mustAcquire(t, d1, h, true)
	mustAcquire(t, d2, w, false)
	ww := waiterOf(t, d2, w)
	b, err := d2.blocker(ctx(t), ww)
	if err != nil {
		t.Fatal(err)
	}

	mustRelease(t, d1, h)
	h2 := req(k)
	h2.Queue = true
	mustAcquire(t, d1, h2, false)
	if names, _ := entries(t, admin(t), k); len(names) != 2 || names[1] != b.name {
		t.Fatalf("entries %q; want the waiter's and then %q again", names, b.name)
	}

	gone, _, err := d2.recheck(ctx(t), ww, &b)
	if err != nil || !gone {
		t.Fatalf("recheck after the predecessor's name was created again = %v, %v; want gone", gone, err)
	}
	mustAcquire(t, d2, w, true)
	mustRelease(t, d2, w)
	mustAcquire(t, d1, h2, true)
	mustRelease(t, d1, h2)
	assertEmpty(t, admin(t), k)
}

// tap is the KV and watch API of a client that closes reread once the
// driver, after a watch it opened was established, has read the store again.
// From then on only the watch's events can wake a waiter whose driver reads
// no more on its own (see TestWaiterWokenByEvent).
type tap struct {
	clientv3.KV
	clientv3.Watcher
	created atomic.Bool
	reread  chan struct{}
	once    sync.Once
}

// newTappedDriver returns a driver whose client's reads and watches go
// through a tap, closed when t ends.
func newTappedDriver(t *testing.T, addr string) (*Driver, *tap) {
	t.Helper()
	cli := newClient(t, addr)
	tp := &tap{KV: cli.KV, Watcher: cli.Watcher, reread: make(chan struct{})}
	cli.KV, cli.Watcher = tp, tp
	d, err := newDriver(cli, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, tp
}

func (tp *tap) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	in, out := tp.Watcher.Watch(ctx, key, opts...), make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for wr := range in {
			if wr.Created {
				tp.created.Store(true)
			}
			select {
			case out <- wr:
			case <-ctx.Done():
			}
		}
	}()
	return out
}

func (tp *tap) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	defer tp.read(tp.created.Load())
	return tp.KV.Get(ctx, key, opts...)
}

func (tp *tap) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	defer tp.read(tp.created.Load())
	return tp.KV.Do(ctx, op)
}

// read notes a read that has returned; after is whether it was sent after a
// watch was established.
func (tp *tap) read(after bool) {
	if after {
		tp.once.Do(func() { close(tp.reread) })
	}
}

// A waiter is woken by the watch event of the change that admits it: the
// deletion of an exclusive waiter's predecessor, the deletion or the
// downgrade of the writer ahead of a reader, the deletion of a permit ahead
// of a full semaphore's waiting permit. The change comes after the waiter's
// watch was established and the store read again, and the reads that cover
// a watch still catching up are turned off, so nothing but the event can
// signal the waiter before the (generous) deadline.
func TestWaiterWokenByEvent(t *testing.T) {
	polls := catchUpPolls
	catchUpPolls = nil
	t.Cleanup(func() { catchUpPolls = polls })
	srv := testsrv.Get(t, testsrv.Etcd)
	d1 := newTestDriver(t, srv.Addr)
	defer d1.Close()
	queued := func(k string) driver.Request { r := req(k); r.Queue = true; return r }
	reader := func(k string) driver.Request { return shared(k, true) }
	for _, c := range []struct {
		name      string
		waiter    func(k string) driver.Request
		downgrade bool // the holder downgrades rather than releases
	}{
		{"exclusive", queued, false},
		{"reader", reader, false},
		{"reader after a downgrade", reader, true},
		{"permit", func(k string) driver.Request { return permit(k, 1, true) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := key(t)
			w, h := c.waiter(k), req(k)
			if w.Mode == driver.Semaphore {
				h = permit(k, 1, true)
			}
			d2, tp := newTappedDriver(t, srv.Addr)
			mustAcquire(t, d1, h, true)
			mustAcquire(t, d2, w, false)
			s := subscribe(t, d2, w)
			select {
			case <-tp.reread:
			case <-ctx(t).Done():
				t.Fatal("the waiter's watch was never established")
			}
			if c.downgrade {
				h.Mode = driver.Shared
				mustAcquire(t, d1, h, true)
			} else {
				mustRelease(t, d1, h)
			}
			select {
			case <-s.C():
			case <-time.After(20 * time.Second):
				t.Fatal("waiter not woken by the change that admits it")
			}
			mustAcquire(t, d2, w, true)
			mustRelease(t, d2, w)
			if c.downgrade {
				mustRelease(t, d1, h)
			}
			assertEmpty(t, admin(t), k)
		})
	}
}

// queueReads is the KV API of a client that counts the reads of the range
// of keys under queue (which the server scans whole) that its requests made
// the server run: ranges, range comparisons, and the ranges in the branches
// of transactions that ran.
type queueReads struct {
	clientv3.KV
	queue string
	n     atomic.Int64
}

func (q *queueReads) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	q.n.Add(q.ranges(nil, []clientv3.Op{clientv3.OpGet(key, opts...)}, nil, true, nil))
	return q.KV.Get(ctx, key, opts...)
}

func (q *queueReads) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	q.n.Add(q.ranges(nil, []clientv3.Op{op}, nil, true, nil))
	return q.KV.Do(ctx, op)
}

func (q *queueReads) Txn(ctx context.Context) clientv3.Txn {
	return &countedTxn{Txn: q.KV.Txn(ctx), q: q}
}

type countedTxn struct {
	clientv3.Txn
	q        *queueReads
	cmps     []clientv3.Cmp
	thn, els []clientv3.Op
}

func (t *countedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.cmps, t.Txn = cs, t.Txn.If(cs...)
	return t
}

func (t *countedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.thn, t.Txn = ops, t.Txn.Then(ops...)
	return t
}

func (t *countedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.els, t.Txn = ops, t.Txn.Else(ops...)
	return t
}

func (t *countedTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil {
		t.q.n.Add(t.q.ranges(t.cmps, t.thn, t.els, resp.Succeeded, resp.Responses))
	}
	return resp, err
}

// ranges counts the reads of the queue of a transaction that compared cmps
// and ran thn if ok, else els, with the responses rs (nil for a lone read).
func (q *queueReads) ranges(cmps []clientv3.Cmp, thn, els []clientv3.Op, ok bool, rs []*etcdserverpb.ResponseOp) (n int64) {
	for _, c := range cmps {
		if string(c.Key) == q.queue && len(c.RangeEnd) > 0 {
			n++
		}
	}
	ops := els
	if ok {
		ops = thn
	}
	for i, op := range ops {
		switch {
		case op.IsGet() && string(op.KeyBytes()) == q.queue && len(op.RangeBytes()) > 0:
			n++
		case op.IsTxn():
			c, t, e := op.Txn()
			r := rs[i].GetResponseTxn()
			n += q.ranges(c, t, e, r.Succeeded, r.Responses)
		}
	}
	return n
}

// A handoff reads the queue once, however many wait in it: the woken
// waiter's subscription reads what is ahead of it and, finding nothing, lets
// the Acquire it prompts read only the waiter's own entry. A waiter that
// joins the queue reads it once, with the creation of its entry: its
// subscription starts from that read, and the Acquire that package dlock
// makes right after subscribing reads the queue only if the predecessor has
// gone. Each read costs the server a scan of the whole queue, so this keeps
// the server's work per handoff from growing with the number of waiters.
func TestHandoffReadsQueueOnce(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	cli := newClient(t, srv.Addr)
	t.Cleanup(func() { cli.Close() })
	const n = 8
	k := key(t)
	dh := newTestDriver(t, srv.Addr)
	defer dh.Close()
	q := &queueReads{KV: cli.KV, queue: dh.queuePrefix(k)}
	cli.KV = q
	ds, ws, subs := []*Driver{dh}, []driver.Request{req(k)}, []driver.Subscription{nil}
	mustAcquire(t, dh, ws[0], true)
	for range n {
		d, err := newDriver(cli, false, nil) // a session of its own, as in a process of its own
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		w := req(k)
		w.Queue = true
		mustAcquire(t, d, w, false)
		s := subscribe(t, d, w)
		mustAcquire(t, d, w, false)
		ds, ws, subs = append(ds, d), append(ws, w), append(subs, s)
	}
	for i := 1; i <= n; i++ {
		mustRelease(t, ds[i-1], ws[i-1])
		signalled(t, subs[i], fmt.Sprintf("waiter %d", i))
		mustAcquire(t, ds[i], ws[i], true)
	}
	mustRelease(t, ds[n], ws[n])
	for _, s := range subs[1:] {
		s.Close() // its reads are over
	}
	if got := q.n.Load(); got > 2*n {
		t.Errorf("%d waiters read the queue %d times; want at most %d: once to join it, once per handoff", n, got, 2*n)
	}
	assertEmpty(t, admin(t), k)
}

// The reads that cover a watch still catching up (etcd registered it just
// after a write) are scheduled only for a blocker whose end is due to admit
// the waiter: the first waiter's, not the second's, which the watch alone
// follows. Those reads, six per subscription, would otherwise cost the
// server more per handoff the more waiters join and leave the queue.
func TestCatchUpReadsOnlyForTheLastBlocker(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	d := newTestDriver(t, srv.Addr)
	defer d.Close()
	k := key(t)
	h, w1, w2 := req(k), req(k), req(k)
	w1.Queue, w2.Queue = true, true
	mustAcquire(t, d, h, true)
	mustAcquire(t, d, w1, false)
	mustAcquire(t, d, w2, false)
	// The reply to a watch's creation at revision 1: the store has moved
	// on since.
	created := clientv3.WatchResponse{Header: etcdserverpb.ResponseHeader{Revision: 1}, Created: true}
	for _, c := range []struct {
		what string
		w    driver.Request
		last bool
	}{{"first waiter", w1, true}, {"second waiter", w2, false}} {
		w := waiterOf(t, d, c.w)
		b, err := d.blocker(ctx(t), w)
		if err != nil {
			t.Fatal(err)
		}
		var poll catchUp
		if end, over := d.heard(ctx(t), w, &b, created, true, &poll); over || end != changed {
			t.Fatalf("%s: heard the watch's creation = %v, %v; want it to go on watching", c.what, end, over)
		}
		if polls := poll.tick != nil; polls != c.last {
			t.Errorf("%s: catch-up reads scheduled %v; want %v", c.what, polls, c.last)
		}
	}
	for _, r := range []driver.Request{w2, w1, h} {
		mustRelease(t, d, r)
	}
	assertEmpty(t, admin(t), k)
}
