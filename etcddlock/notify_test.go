package etcddlock

import (
	"testing"

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
