package zkdlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// spy forwards to a driver and closes waiting once an Acquire has failed
// after a subscription was made: the waiter is then asleep on its
// subscription, with nothing in flight.
type spy struct {
	driver.Driver
	waiting    chan struct{}
	mu         sync.Mutex
	subscribed bool
	signalled  bool
}

func newSpy(d driver.Driver) *spy { return &spy{Driver: d, waiting: make(chan struct{})} }

func (s *spy) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	res, err := s.Driver.Acquire(ctx, req)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && !res.Acquired && s.subscribed && !s.signalled {
		close(s.waiting)
		s.signalled = true
	}
	return res, err
}

func (s *spy) Subscribe(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	sub, err := s.Driver.(driver.Notifier).Subscribe(ctx, req)
	s.mu.Lock()
	s.subscribed = err == nil
	s.mu.Unlock()
	return sub, err
}

// client returns a dlock Client over d, closed when t ends.
func client(t *testing.T, d driver.Driver) *dlock.Client {
	t.Helper()
	c, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// startProxy starts a proxy to addr, closed after everything else when t
// ends.
func startProxy(t *testing.T, addr string) *testsrv.Proxy {
	t.Helper()
	p, err := testsrv.StartProxy(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("%s: nothing after a minute", what)
		var zero T
		return zero
	}
}

// assertNoResidue checks that nothing remains of the keys under prefix, not
// even an empty key's znode: call it without a linger period, or after
// closing the drivers (Close removes the lingering znodes).
func assertNoResidue(t *testing.T, addr, prefix string) {
	t.Helper()
	if n, err := residue(ctx(t), addr, DefaultPrefix, prefix); err != nil || n != 0 {
		t.Errorf("residue under %q = %d, %v; want none", prefix, n, err)
	}
}

// waitSession waits until the server grants d a session whose ID passes ok.
func waitSession(t *testing.T, d *Driver, ok func(id int64) bool) {
	t.Helper()
	for {
		id, next := d.sess.current()
		if ok(id) {
			return
		}
		wait(t, next, "a new session")
	}
}

func TestNegotiatedSessionTimeout(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	d := newTestDriver(t, srv.Addr, WithSessionTTL(30*time.Second))
	r := req(key(t))
	r.TTL = time.Minute
	res, err := d.Acquire(ctx(t), r)
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	if got := d.SessionTimeout(); got != testsrv.ZooKeeperMaxSessionTimeout {
		t.Errorf("SessionTimeout = %v; want the server's maximum %v", got, testsrv.ZooKeeperMaxSessionTimeout)
	}
	if res.TTL != testsrv.ZooKeeperMaxSessionTimeout {
		t.Errorf("Result.TTL = %v; want the granted session timeout %v", res.TTL, testsrv.ZooKeeperMaxSessionTimeout)
	}
	if err := d.Release(ctx(t), r); err != nil {
		t.Fatal(err)
	}

	// A lease shorter than the session is granted as asked.
	r = req(key(t))
	r.TTL = 5 * time.Second
	if res, err := d.Acquire(ctx(t), r); err != nil || res.TTL != r.TTL {
		t.Errorf("Acquire with TTL %v = %+v, %v; want TTL %v", r.TTL, res, err, r.TTL)
	}
	if err := d.Release(ctx(t), r); err != nil {
		t.Fatal(err)
	}

	// Without the granted timeout, Acquire fails rather than guess, and
	// the Release that follows leaves nothing.
	d.sess.mu.Lock()
	d.sess.timeout = 0
	d.sess.mu.Unlock()
	r = req(key(t))
	if res, err := d.Acquire(ctx(t), r); err == nil {
		t.Errorf("Acquire with an unknown session timeout = %+v; want an error", res)
	}
	if err := d.Release(ctx(t), r); err != nil {
		t.Errorf("Release after the failed Acquire = %v; want nil (its node was there)", err)
	}
	d.Close()
	assertNoResidue(t, srv.Addr, r.Key)
}

// TestCutOff cuts the holder off the server: its session expires on the
// server and a waiter takes the lock, but only after the holder's lock has
// signalled the loss.
func TestCutOff(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	p := startProxy(t, srv.Addr)
	const session = 2 * time.Second
	hd := newTestDriver(t, p.Addr(), WithSessionTTL(session))
	holder := client(t, hd)
	sp := newSpy(newTestDriver(t, srv.Addr))
	waiter := client(t, sp)
	k := key(t)

	l1, err := holder.Lock(ctx(t), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if l1.TTL() != session {
		t.Errorf("lease = %v; want the session timeout %v", l1.TTL(), session)
	}
	type result struct {
		l   *dlock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Lock(ctx(t), k, dlock.WithTTL(time.Minute))
		got <- result{l, err}
	}()
	wait(t, sp.waiting, "waiter queued")
	p.Block()

	r := wait(t, got, "waiter's Lock")
	if r.err != nil {
		t.Fatalf("waiter's Lock: %v", r.err)
	}
	select {
	case <-l1.Done():
	default:
		t.Fatal("the waiter acquired while the cut-off holder's lock was still valid")
	}
	if cause := context.Cause(l1.Context()); !errors.Is(cause, dlock.ErrLost) {
		t.Errorf("cut-off holder's cause = %v; want ErrLost", cause)
	}
	if r.l.Token() <= l1.Token() {
		t.Errorf("waiter's token %d <= cut-off holder's %d", r.l.Token(), l1.Token())
	}

	// Back online, the holder's driver learns that its session expired:
	// the old hold is gone, and new acquisitions get a new session.
	p.Unblock()
	if err := l1.Release(ctx(t)); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Release of the lost lock = %v; want ErrLost", err)
	}
	k2 := key(t)
	l3, err := holder.Lock(ctx(t), k2)
	if err != nil {
		t.Fatalf("Lock on the holder's driver after its session expired: %v", err)
	}
	if err := l3.Release(ctx(t)); err != nil {
		t.Error(err)
	}
	if err := r.l.Release(ctx(t)); err != nil {
		t.Error(err)
	}
	holder.Close()
	waiter.Close()
	assertNoResidue(t, srv.Addr, k)
	assertNoResidue(t, srv.Addr, k2)
}

// TestWaiterSessionExpiry expires a waiter's session while it waits: the
// wait goes on (the waiter queues again, at the back, in a new session) and
// gets the lock once the holder releases it.
func TestWaiterSessionExpiry(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	p := startProxy(t, srv.Addr)
	holder := client(t, newTestDriver(t, srv.Addr))
	wd := newTestDriver(t, p.Addr(), WithSessionTTL(2*time.Second))
	sp := newSpy(wd)
	waiter := client(t, sp)
	k := key(t)

	l, err := holder.Lock(ctx(t), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		// No polling: nothing but the subscription wakes the waiter.
		lw, err := waiter.Lock(ctx(t), k, dlock.WithTTL(10*time.Minute), dlock.WithBackoff(time.Hour, time.Hour))
		if err == nil {
			lw.Release(context.Background())
		}
		got <- err
	}()
	wait(t, sp.waiting, "waiter queued")

	// Watch the waiter's node, from a connection of the test's own.
	tc, err := dial(ctx(t), srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	parent := wd.parentPath(k)
	children, _, err := tc.Children(parent)
	if err != nil {
		t.Fatal(err)
	}
	q := queue(children)
	if len(q) != 2 {
		t.Fatalf("queue = %v; want the holder and the waiter", children)
	}
	exists, _, ch, err := tc.ExistsW(parent + "/" + q[1].name)
	if err != nil || !exists {
		t.Fatalf("ExistsW(waiter's node) = %v, %v", exists, err)
	}

	p.Block()
	if ev := wait(t, ch, "the server expiring the waiter's session"); ev.Type != zk.EventNodeDeleted {
		t.Fatalf("event on the waiter's node = %+v; want its deletion", ev)
	}
	p.Unblock()
	if err := l.Release(ctx(t)); err != nil {
		t.Error(err)
	}
	if err := wait(t, got, "waiter's Lock"); err != nil {
		t.Errorf("waiter's Lock = %v; want the lock", err)
	}
	holder.Close()
	waiter.Close()
	assertNoResidue(t, srv.Addr, k)
}

// TestLostReply makes the nodes a Create whose reply was lost leaves behind
// (by hand, with the owner's name) and checks that Acquire, Refresh and
// Release find them by name instead of making a second one or leaving them.
func TestLostReply(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	d := newTestDriver(t, srv.Addr, WithParentLinger(0))
	tc, err := dial(ctx(t), srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	orphan := func(c *zk.Conn, r driver.Request) (string, int64) {
		t.Helper()
		parent := d.parentPath(r.Key)
		if err := d.ensureParent(parent); err != nil {
			t.Fatal(err)
		}
		p, err := c.Create(parent+"/"+nodeBase(r.Owner, r.Mode, r.Limit, CuratorMutex), encodeData(r.Owner, r.Info, false), zk.FlagEphemeralSequential, acl)
		if err != nil {
			t.Fatal(err)
		}
		_, st, err := c.Exists(p)
		if err != nil {
			t.Fatal(err)
		}
		return p, st.Czxid
	}
	nodes := func(r driver.Request) int {
		t.Helper()
		children, _, err := tc.Children(d.parentPath(r.Key))
		if err != nil {
			t.Fatal(err)
		}
		return len(children)
	}

	for _, tc := range []struct {
		name string
		conn *zk.Conn
	}{
		{"same session", d.conn},
		{"other session", tc},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Acquire adopts the node.
			r := req(key(t))
			_, czxid := orphan(tc.conn, r)
			res, err := d.Acquire(ctx(t), r)
			if err != nil || !res.Acquired || res.Token != uint64(czxid) {
				t.Fatalf("Acquire = %+v, %v; want acquired with the orphan's token %d", res, err, czxid)
			}
			if n := nodes(r); n != 1 {
				t.Errorf("%d nodes after Acquire; want the orphan alone", n)
			}
			if err := d.Refresh(ctx(t), r); err != nil {
				t.Errorf("Refresh = %v", err)
			}
			if err := d.Release(ctx(t), r); err != nil {
				t.Errorf("Release = %v", err)
			}
			assertNoResidue(t, srv.Addr, r.Key)

			// Release without a record finds it by name.
			r = req(key(t))
			orphan(tc.conn, r)
			if err := d.Release(ctx(t), r); err != nil {
				t.Errorf("Release of an unrecorded node = %v", err)
			}
			if err := d.Release(ctx(t), r); !errors.Is(err, driver.ErrNotOwner) {
				t.Errorf("second Release = %v; want ErrNotOwner", err)
			}
			assertNoResidue(t, srv.Addr, r.Key)

			// Refresh without a record finds it by name too.
			r = req(key(t))
			orphan(tc.conn, r)
			if err := d.Refresh(ctx(t), r); err != nil {
				t.Errorf("Refresh of an unrecorded node = %v", err)
			}
			_, recorded := d.holds.Get(r.Owner)
			if want := tc.conn == d.conn; recorded != want {
				t.Errorf("after Refresh, recorded = %v; want %v (only the driver's own session's nodes)", recorded, want)
			}
			if err := d.Release(ctx(t), r); err != nil {
				t.Errorf("Release = %v", err)
			}
			assertNoResidue(t, srv.Addr, r.Key)
		})
	}
}

// TestSessionExpiry expires the driver's session under a hold and a queue
// entry: both are lost (Refresh, Release and a queued Acquire report
// ErrNotOwner), and the driver acquires again in a new session.
func TestSessionExpiry(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	p := startProxy(t, srv.Addr)
	d := newTestDriver(t, p.Addr(), WithSessionTTL(2*time.Second))
	other := newTestDriver(t, srv.Addr)
	held, queued := req(key(t)), req(key(t))
	queued.Queue = true
	blocker := req(queued.Key)
	for _, x := range []struct {
		d *Driver
		r driver.Request
	}{{d, held}, {other, blocker}} {
		if res, err := x.d.Acquire(ctx(t), x.r); err != nil || !res.Acquired {
			t.Fatalf("Acquire = %+v, %v", res, err)
		}
	}
	if res, err := d.Acquire(ctx(t), queued); err != nil || res.Acquired {
		t.Fatalf("queued Acquire = %+v, %v; want queued", res, err)
	}
	sid := d.conn.SessionID()
	tc, err := dial(ctx(t), srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	h, _ := d.holds.Get(held.Owner)
	_, _, ch, err := tc.ExistsW(h.path)
	if err != nil {
		t.Fatal(err)
	}
	p.Block()
	wait(t, ch, "the server expiring the session")
	p.Unblock()
	waitSession(t, d, func(id int64) bool { return id != sid })

	if _, err := d.Acquire(ctx(t), queued); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("queued Acquire after the session expired = %v; want ErrNotOwner", err)
	}
	if err := d.Refresh(ctx(t), held); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("Refresh after the session expired = %v; want ErrNotOwner", err)
	}
	for _, r := range []driver.Request{held, queued} {
		if err := d.Release(ctx(t), r); !errors.Is(err, driver.ErrNotOwner) {
			t.Errorf("Release after the session expired = %v; want ErrNotOwner", err)
		}
	}
	again := req(held.Key)
	if res, err := d.Acquire(ctx(t), again); err != nil || !res.Acquired {
		t.Fatalf("Acquire in a new session = %+v, %v", res, err)
	}
	if d.conn.SessionID() == sid {
		t.Errorf("session ID unchanged after expiry")
	}
	for _, x := range []struct {
		d *Driver
		r driver.Request
	}{{d, again}, {other, blocker}} {
		if err := x.d.Release(ctx(t), x.r); err != nil {
			t.Error(err)
		}
	}
	d.Close()
	other.Close()
	assertNoResidue(t, srv.Addr, held.Key)
	assertNoResidue(t, srv.Addr, queued.Key)
}
