package etcddlock

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// A holder cut off from etcd loses its lock (its context ends with ErrLost)
// before the server's session expiry lets the waiter in.
func TestCutOffHolder(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	proxy, err := testsrv.StartProxy(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	a := newLockClient(t, newTestDriver(t, proxy.Addr(), WithSessionTTL(2*time.Second)))
	defer a.Close()
	defer proxy.Unblock() // let the holder's Close revoke its lease
	sb := spy(newTestDriver(t, srv.Addr))
	b := newLockClient(t, sb)
	k := key(t)

	la, err := a.Lock(ctx(t), k) // the default TTL of 15s, renewed
	if err != nil {
		t.Fatal(err)
	}
	if la.TTL() > 2*time.Second {
		t.Errorf("granted TTL = %v; want at most the 2s session", la.TTL())
	}
	got := lockAsync(ctx(t), b, k)
	<-sb.queued
	proxy.Block()
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter's Lock: %v", r.err)
	}
	defer r.l.Release(context.Background())
	select {
	case <-la.Done():
	default:
		t.Fatal("the waiter acquired the lock while the cut-off holder still trusted it")
	}
	if cause := context.Cause(la.Context()); !errors.Is(cause, dlock.ErrLost) {
		t.Errorf("cut-off holder's cause = %v; want ErrLost", cause)
	}
	if r.l.Token() <= la.Token() {
		t.Errorf("waiter's token %d <= the cut-off holder's %d", r.l.Token(), la.Token())
	}
}

// A waiter whose session ends while it waits loses its place in the queue
// but not its wait: it queues again, at the back, in a new session, and gets
// the lock once the holder releases it.
func TestWaiterSessionEnds(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	cli := admin(t)
	a := newLockClient(t, newTestDriver(t, srv.Addr))
	wd := newTestDriver(t, srv.Addr, WithSessionTTL(2*time.Second))
	sw := spy(wd)
	w := newLockClient(t, sw)
	k := key(t)

	l, err := a.Lock(ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	got := lockAsync(ctx(t), w, k)
	<-sw.queued
	wd.mu.Lock()
	lease := wd.sess.id
	wd.mu.Unlock()
	if _, err := cli.Revoke(ctx(t), lease); err != nil {
		t.Fatal(err)
	}
	if err := l.Refresh(ctx(t)); err != nil {
		t.Errorf("holder's Refresh: %v", err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Errorf("holder's Release: %v", err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter's Lock = %v; want the lock", r.err)
	}
	if err := r.l.Release(ctx(t)); err != nil {
		t.Error(err)
	}
	assertEmpty(t, cli, k)
}

// A holder whose session lease is revoked from outside finds out at its next
// renewal.
func TestHolderSessionEnds(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	cli := admin(t)
	d := newTestDriver(t, srv.Addr, WithSessionTTL(3*time.Second))
	c := newLockClient(t, d)
	l, err := c.Lock(ctx(t), key(t))
	if err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	lease := d.sess.id
	d.mu.Unlock()
	if _, err := cli.Revoke(ctx(t), lease); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLost) {
		t.Errorf("cause = %v; want ErrLost", cause)
	}
}

// IsOwner guards a write: it succeeds while the lock is held and fails once
// the lock was lost and taken over, or released and its entry name reused.
func TestIsOwnerGuardsWrites(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	cli := admin(t)
	d1, d2 := newTestDriver(t, srv.Addr), newTestDriver(t, srv.Addr)
	c1, c2 := newLockClient(t, d1), newLockClient(t, d2)
	k := key(t)
	data := "/dlock-test-data/" + k
	defer cli.Delete(context.Background(), data)
	write := func(d *Driver, l *dlock.Lock, v string) bool {
		t.Helper()
		resp, err := cli.Txn(ctx(t)).If(d.IsOwner(l)).Then(clientv3.OpPut(data, v)).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return resp.Succeeded
	}

	l1, err := c1.Lock(ctx(t), k, dlock.WithTTL(time.Second), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	if !write(d1, l1, "1") {
		t.Fatal("guarded write by the holder failed")
	}
	l2, err := c2.Lock(ctx(t), k) // after l1's lease ran out
	if err != nil {
		t.Fatal(err)
	}
	if write(d1, l1, "stale") {
		t.Error("guarded write by the expired holder succeeded")
	}
	if !write(d2, l2, "2") {
		t.Error("guarded write by the new holder failed")
	}
	if err := l2.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if write(d2, l2, "released") {
		t.Error("guarded write after Release succeeded")
	}
	// The next lock of the same driver re-creates l2's entry name: the
	// guard of l2 still fails, that of the new lock holds, and a driver
	// that does not know the lock never lets it write.
	l3, err := c2.Lock(ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	defer l3.Release(ctx(t))
	if write(d2, l2, "stale") {
		t.Error("guarded write by the earlier holder of the reused name succeeded")
	}
	if write(d1, l3, "other driver") {
		t.Error("guarded write through a driver that does not know the lock succeeded")
	}
	if !write(d2, l3, "3") {
		t.Error("guarded write by the holder of the reused name failed")
	}
	resp, err := cli.Get(ctx(t), data)
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "3" {
		t.Errorf("data = %v, %v; want the last holder's write", resp, err)
	}
}
