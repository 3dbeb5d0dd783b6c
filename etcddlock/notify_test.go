package etcddlock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
