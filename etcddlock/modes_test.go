package etcddlock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// quiet is how long a test waits to see that a subscription is NOT
// signalled. A signal that is due arrives within milliseconds of the change
// that causes it.
const quiet = 200 * time.Millisecond

func mustAcquire(t *testing.T, d *Driver, r driver.Request, want bool) driver.Result {
	t.Helper()
	res, err := d.Acquire(ctx(t), r)
	if err != nil || res.Acquired != want {
		t.Fatalf("Acquire(%s, queue %v) = %+v, %v; want acquired %v", r.Mode, r.Queue, res, err, want)
	}
	return res
}

func mustRelease(t *testing.T, d *Driver, r driver.Request) {
	t.Helper()
	if err := d.Release(ctx(t), r); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func subscribe(t *testing.T, d *Driver, r driver.Request) driver.Subscription {
	t.Helper()
	s, err := d.Subscribe(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func signalled(t *testing.T, s driver.Subscription, what string) {
	t.Helper()
	select {
	case <-s.C():
	case <-ctx(t).Done():
		t.Fatalf("%s: no signal", what)
	}
}

func notSignalled(t *testing.T, s driver.Subscription, what string) {
	t.Helper()
	select {
	case <-s.C():
		t.Fatalf("%s: signalled, though it is still blocked", what)
	case <-time.After(quiet):
	}
}

func shared(key string, queue bool) driver.Request {
	r := req(key)
	r.Mode, r.Queue = driver.Shared, queue
	return r
}

func permit(key string, limit int, queue bool) driver.Request {
	r := req(key)
	r.Mode, r.Limit, r.Queue = driver.Semaphore, limit, queue
	return r
}

// A reader queued behind a writer is woken by the writer's downgrade (a Put
// of its entry, which keeps its CreateRevision and so its token) and then
// admitted next to it.
func TestDowngradeWakesReaders(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	d := newTestDriver(t, srv.Addr)
	defer d.Close()
	k := key(t)
	w := req(k)
	wres := mustAcquire(t, d, w, true)
	r := shared(k, true)
	mustAcquire(t, d, r, false)
	s := subscribe(t, d, r)
	notSignalled(t, s, "reader behind a writer")

	w.Mode = driver.Shared
	if res := mustAcquire(t, d, w, true); res.Token != wres.Token {
		t.Fatalf("downgrade token %d; want the write lock's %d", res.Token, wres.Token)
	}
	signalled(t, s, "reader after the downgrade")
	rres := mustAcquire(t, d, r, true)
	if rres.Token <= wres.Token {
		t.Errorf("reader's token %d is not above the writer's %d", rres.Token, wres.Token)
	}
	if err := d.Refresh(ctx(t), w); err != nil {
		t.Errorf("Refresh after the downgrade: %v", err)
	}
	if _, err := d.Acquire(ctx(t), func() driver.Request { x := w; x.Mode = driver.Exclusive; return x }()); !errors.Is(err, driver.ErrModeMismatch) {
		t.Errorf("upgrade of the downgraded lock: %v; want ErrModeMismatch", err)
	}
	mustAcquire(t, d, req(k), false)
	hs, err := d.List(ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[0].Mode != driver.Shared || hs[0].Token != wres.Token || hs[1].Token != rres.Token {
		t.Errorf("List = %+v; want the downgraded lock and the reader", hs)
	}
	if n, err := d.ForceRelease(ctx(t), k); err != nil || n != 2 {
		t.Errorf("ForceRelease = %d, %v; want 2 readers", n, err)
	}
	assertEmpty(t, admin(t), k)
}

// A writer waits for every reader ahead, but is signalled only once the last
// one has gone; a reader queued behind the waiting writer (writer
// preference) watches the writer and is not woken by the readers' releases.
func TestReadWriteWatchesBlocker(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	d := newTestDriver(t, srv.Addr)
	defer d.Close()
	k := key(t)
	r1, r2 := shared(k, false), shared(k, false)
	mustAcquire(t, d, r1, true)
	mustAcquire(t, d, r2, true)
	w := req(k)
	w.Queue = true
	mustAcquire(t, d, w, false)
	mustAcquire(t, d, shared(k, false), false) // a new reader does not pass the waiting writer
	r3 := shared(k, true)
	mustAcquire(t, d, r3, false)
	ws, rs := subscribe(t, d, w), subscribe(t, d, r3)

	mustRelease(t, d, r1)
	notSignalled(t, ws, "writer with a reader ahead")
	notSignalled(t, rs, "reader behind the waiting writer")
	mustRelease(t, d, r2)
	signalled(t, ws, "writer after the readers left")
	wres := mustAcquire(t, d, w, true)
	notSignalled(t, rs, "reader behind the writer")
	mustAcquire(t, d, r3, false)
	mustRelease(t, d, w)
	signalled(t, rs, "reader after the writer left")
	if res := mustAcquire(t, d, r3, true); res.Token <= wres.Token {
		t.Errorf("reader's token %d is not above the writer's %d", res.Token, wres.Token)
	}
	mustRelease(t, d, r3)
	assertEmpty(t, admin(t), k)
}

// Permits are admitted while fewer than the limit are ahead; a waiting
// permit is signalled when a release leaves fewer than the limit ahead of it
// and not before. Permits live in a name range of their own, so a lock
// request on the key, or a permit of another limit, is refused in the
// transaction that would create its entry, and the store is unchanged.
func TestSemaphoreQueue(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	d := newTestDriver(t, srv.Addr)
	defer d.Close()
	k := key(t)
	p1, p2, p3, p4 := permit(k, 2, true), permit(k, 2, false), permit(k, 2, true), permit(k, 2, true)
	t1 := mustAcquire(t, d, p1, true)
	t2 := mustAcquire(t, d, p2, true)
	if t2.Token <= t1.Token {
		t.Errorf("second permit's token %d is not above the first's %d", t2.Token, t1.Token)
	}
	mustAcquire(t, d, permit(k, 2, false), false)
	mustAcquire(t, d, p3, false)
	mustAcquire(t, d, p4, false)
	names, _ := entries(t, admin(t), k)
	if len(names) != 4 {
		t.Fatalf("entries %q; want 4", names)
	}
	for _, n := range names {
		if !strings.HasPrefix(n, d.semPrefix(k, 2)) {
			t.Errorf("permit entry %q is not under %q", n, d.semPrefix(k, 2))
		}
	}
	for _, r := range []driver.Request{req(k), shared(k, true), permit(k, 3, true), permit(k, 1, false)} {
		if res, err := d.Acquire(ctx(t), r); !errors.Is(err, driver.ErrModeMismatch) {
			t.Errorf("Acquire(%s, limit %d) on a semaphore of 2 = %+v, %v; want ErrModeMismatch", r.Mode, r.Limit, res, err)
		}
	}
	if after, _ := entries(t, admin(t), k); len(after) != 4 {
		t.Errorf("entries after the refused requests: %q; want the 4 permits", after)
	}
	hs, err := d.List(ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[0].Limit != 2 || hs[0].Mode != driver.Semaphore || hs[1].Token != t2.Token {
		t.Errorf("List = %+v; want the 2 permits held", hs)
	}

	s3, s4 := subscribe(t, d, p3), subscribe(t, d, p4)
	notSignalled(t, s3, "third permit")
	mustRelease(t, d, p1)
	signalled(t, s3, "third permit after a release")
	mustAcquire(t, d, p3, true)
	notSignalled(t, s4, "fourth permit with two ahead")
	mustRelease(t, d, p2)
	signalled(t, s4, "fourth permit after the second release")
	mustAcquire(t, d, p4, true)
	if n, err := d.ForceRelease(ctx(t), k); err != nil || n != 2 {
		t.Errorf("ForceRelease = %d, %v; want 2 permits", n, err)
	}
	assertEmpty(t, admin(t), k)
}

// A key used as a lock refuses permits, and its entries are not disturbed.
func TestLockRefusesPermits(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	d := newTestDriver(t, srv.Addr)
	defer d.Close()
	k := key(t)
	r := shared(k, false)
	mustAcquire(t, d, r, true)
	for _, p := range []driver.Request{permit(k, 1, true), permit(k, 5, false)} {
		if res, err := d.Acquire(ctx(t), p); !errors.Is(err, driver.ErrModeMismatch) {
			t.Errorf("permit on a read lock = %+v, %v; want ErrModeMismatch", res, err)
		}
	}
	if names, _ := entries(t, admin(t), k); len(names) != 1 {
		t.Errorf("entries %q; want the reader's only", names)
	}
	mustRelease(t, d, r)
	assertEmpty(t, admin(t), k)
}
