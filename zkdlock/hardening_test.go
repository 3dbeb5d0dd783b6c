package zkdlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// TestLostAfterConnClosed closes the driver's connection under a hold and a
// queue entry, which ends the session and deletes their nodes: Refresh and
// Release report ErrNotOwner (ErrLost to package dlock), not the client's
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
		if err := d.Refresh(ctx(t), r); !errors.Is(err, driver.ErrNotOwner) {
			t.Errorf("Refresh after the connection closed = %v; want ErrNotOwner", err)
		}
		if err := d.Release(ctx(t), r); !errors.Is(err, driver.ErrNotOwner) {
			t.Errorf("Release after the connection closed = %v; want ErrNotOwner", err)
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
		if err := d.Release(ctx(t), r); !errors.Is(err, driver.ErrNotOwner) {
			t.Errorf("Release after the refused Acquire = %v; want ErrNotOwner", err)
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

// TestHungDriverConfig checks the conformance config's NewHungDriver through
// package dlock: once the store hangs, a TryLock and a Refresh whose
// contexts end return promptly, the driver's requests end by the client's
// receive timeout, and the Client closes.
func TestHungDriverConfig(t *testing.T) {
	const session = 3 * time.Second // receive timeout: 2s
	cfg := suiteConfig(t, false, WithParentLinger(0), WithSessionTTL(session))
	d, hang := cfg.NewHungDriver(t)
	c, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryLock(ctx(t), key(t))
	if err != nil {
		t.Fatal(err)
	}
	hang()
	for _, call := range []struct {
		name string
		fn   func(context.Context) error
	}{
		{"TryLock", func(ctx context.Context) error { _, err := c.TryLock(ctx, key(t)); return err }},
		{"Lock.Refresh", l.Refresh},
	} {
		cctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- call.fn(cctx) }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s on the hung store = %v; want DeadlineExceeded", call.name, err)
			}
		case <-time.After(session):
			t.Errorf("%s on the hung store still running %v after its deadline", call.name, session)
			<-done
		}
		cancel()
	}
	closed := make(chan error, 1)
	start := time.Now()
	go func() { closed <- c.Close() }()
	select {
	case <-closed:
		t.Logf("Close took %v", time.Since(start))
	case <-time.After(30 * time.Second):
		t.Fatal("Client.Close on the hung store still running after 30s")
	}
}

// TestAbandonedAcquireLeavesNothing ends a TryLock's context while its
// Create is on the wire: the TryLock returns at once through package dlock,
// the Create still lands on the server, and the Release dlock makes once
// the driver's Acquire has returned removes the node it made, with the
// driver's session still live.
func TestAbandonedAcquireLeavesNothing(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	const delay = 500 * time.Millisecond // each way
	p, err := testsrv.StartDelayedProxy(srv.Addr, delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	k := key(t)
	dlocktest.AbandonedAcquire(t, newTestDriver(t, p.Addr(), WithParentLinger(0)), delay, k)
	assertNoResidue(t, srv.Addr, k)
	other := client(t, newTestDriver(t, srv.Addr))
	l2, err := other.TryLock(ctx(t), k)
	if err != nil {
		t.Fatalf("TryLock by another client: %v", err)
	}
	l2.Release(ctx(t))
}

// TestRequestWhileReconnecting makes a request while the client, cut off
// from a hung server, tries to set up a session again: go-zookeeper would
// hold the request in its queue until a session is set up or the
// connection is closed, so the driver waits for the session itself, and the
// request ends with its context.
func TestRequestWhileReconnecting(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	p := startProxy(t, srv.Addr)
	d := newTestDriver(t, p.Addr(), WithSessionTTL(2*time.Second))
	r := req(key(t))
	mustAcquire(t, d, r, true)
	p.Block()
	// The client drops the silent connection after its receive timeout
	// (two thirds of the session timeout); nothing signals it.
	for i := 0; d.conn.State() == zk.StateHasSession; i++ {
		if i == 1000 {
			t.Fatal("the client kept its session 10s after the server went silent")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Refresh(c, r) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Refresh while reconnecting = %v; want DeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("Refresh while reconnecting still running 10s after its deadline")
		d.Close()
		<-done
	}
}
