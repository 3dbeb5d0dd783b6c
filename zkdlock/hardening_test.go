package zkdlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testsrv"
)

// TestLostAfterConnClosed closes the driver's connection under a hold and a
// queue entry, which ends the session and deletes their nodes: Refresh and
// Release report ErrNotHeld (ErrLost to package dlock), not the client's
// "connection closed".
func TestLostAfterConnClosed(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	d := newTestDriver(t, srv.Addr)
	other := newTestDriver(t, srv.Addr)
	held, queued := req(key(t)), req(key(t))
	queued.Queue = true
	blocker := req(queued.Key)
	mustAcquire(t, d, held, true)
	mustAcquire(t, other, blocker, true)
	if res, err := d.Acquire(ctx(t), queued); err != nil || res.Acquired {
		t.Fatalf("queued Acquire = %+v, %v; want queued", res, err)
	}
	d.Conn().Close()
	for _, r := range []driver.Request{held, queued} {
		if err := d.Refresh(ctx(t), r); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Refresh after the connection closed = %v; want ErrNotHeld", err)
		}
		if err := d.Release(ctx(t), r); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Release after the connection closed = %v; want ErrNotHeld", err)
		}
	}
	if err := other.Release(ctx(t), blocker); err != nil {
		t.Error(err)
	}

	// Through package dlock: the lock reports the loss.
	d2 := newTestDriver(t, srv.Addr)
	c := client(t, d2)
	l, err := c.Lock(ctx(t), key(t), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	d2.Conn().Close()
	if err := l.Refresh(ctx(t)); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Lock.Refresh after the connection closed = %v; want ErrLost", err)
	}
	if err := l.Release(ctx(t)); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Lock.Release after the connection closed = %v; want ErrLost", err)
	}
}

// TestCloseHung closes a driver whose server has stopped answering, with a
// hold and a call in flight: Close returns promptly all the same.
func TestCloseHung(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	p := startProxy(t, srv.Addr)
	d, err := New([]string{p.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	r := req(key(t))
	mustAcquire(t, d, r, true)
	p.Block()
	inflight := make(chan error, 1)
	go func() { inflight <- d.Refresh(context.Background(), r) }()
	closed := make(chan error, 1)
	start := time.Now()
	go func() { closed <- d.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close of a driver on a hung connection still running after 30s")
	}
	t.Logf("Close took %v", time.Since(start))
	if err := wait(t, inflight, "the Refresh in flight"); err == nil {
		t.Errorf("Refresh on a hung connection succeeded")
	}
}

// TestHugeInfo asks for a hold whose node data would exceed what
// ZooKeeper accepts in one request (jute.maxbuffer, 1 MiB by default): the
// driver refuses it with ErrUnsupported, and its session survives.
func TestHugeInfo(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	d := newTestDriver(t, srv.Addr)
	mustAcquire(t, d, req(key(t)), true) // the session is set up
	sid := d.conn.SessionID()
	for _, size := range []int{2 << 20, 1<<20 + 100<<10, 1 << 20} {
		r := req(key(t))
		r.Info = strings.Repeat("i", size)
		if res, err := d.Acquire(ctx(t), r); !errors.Is(err, driver.ErrUnsupported) {
			t.Errorf("Acquire with %d bytes of Info = %+v, %v; want ErrUnsupported", size, res, err)
		}
		if err := d.Release(ctx(t), r); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Release after the refused Acquire = %v; want ErrNotHeld", err)
		}
	}
	r2 := req(key(t))
	mustAcquire(t, d, r2, true)
	if got := d.conn.SessionID(); got != sid {
		t.Errorf("session %#x replaced by %#x", sid, got)
	}
	if err := d.Release(ctx(t), r2); err != nil {
		t.Error(err)
	}
}

// TestHungDriverConfig checks the conformance config's NewHungDriver: once
// hung, a call whose context ends returns promptly, and the driver closes.
func TestHungDriverConfig(t *testing.T) {
	cfg := suiteConfig(t, false, WithParentLinger(0))
	d, hang := cfg.NewHungDriver(t)
	r := req(key(t))
	if res, err := d.Acquire(ctx(t), r); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	hang()
	c, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Refresh(c, r) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Refresh on the hung driver = %v; want DeadlineExceeded", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Refresh on the hung driver still running 30s after its deadline")
	}
	if err := d.Close(); err != nil {
		t.Error(err)
	}
}
