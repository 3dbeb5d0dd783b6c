package etcddlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// A holder with a lock delay whose session ends while it holds (cut off
// from etcd, or its lease revoked by mistake, as in etcd-io/etcd#15247)
// keeps the key from others for the delay after the session lease ended,
// on the store's clock: when its entry goes, a TryLock fails, a waiter
// queued before still waits, and the shadow's lease has the delay left; the
// waiter gets the key once the delay has passed.
func TestLockDelaySessionEnds(t *testing.T) {
	const delay = 3 * time.Second
	srv := testsrv.Get(t, testsrv.Etcd)
	cli := admin(t)
	for _, tc := range []struct {
		name string
		end  func(d *Driver, cut func())
	}{
		{"cut", func(_ *Driver, cut func()) { cut() }},
		{"revoked", func(d *Driver, _ func()) {
			d.mu.Lock()
			lease := d.sess.id
			d.mu.Unlock()
			if _, err := cli.Revoke(ctx(t), lease); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy, err := testsrv.StartProxy(srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer proxy.Close()
			ad := newTestDriver(t, proxy.Addr(), WithSessionTTL(2*time.Second))
			a := newLockClient(t, ad)
			defer a.Close()
			defer proxy.Unblock()
			sb := spy(newTestDriver(t, srv.Addr))
			b := newLockClient(t, sb)
			c := newLockClient(t, newTestDriver(t, srv.Addr))
			k := key(t)

			la, err := a.Lock(ctx(t), k, dlock.WithLockDelay(delay))
			if err != nil {
				t.Fatal(err)
			}
			q, err := cli.Get(ctx(t), DefaultPrefix+k+"/", clientv3.WithPrefix())
			if err != nil || len(q.Kvs) != 2 {
				t.Fatalf("entries of the hold: %d, %v; want the entry and its shadow", len(q.Kvs), err)
			}
			entry, shadow := q.Kvs[0], q.Kvs[1]
			if strings.HasSuffix(string(entry.Key), shadowSuffix) {
				entry, shadow = shadow, entry
			}
			got := lockAsync(ctx(t), b, k)
			<-sb.queued
			gone := cli.Watch(ctx(t), string(entry.Key), clientv3.WithRev(q.Header.Revision+1), clientv3.WithFilterPut())
			tc.end(ad, proxy.Block)
			if wr := <-gone; wr.Err() != nil || len(wr.Events) == 0 {
				t.Fatalf("watching the holder's entry: %v", wr.Err())
			}
			ttl, err := cli.TimeToLive(ctx(t), clientv3.LeaseID(shadow.Lease))
			if err != nil || time.Duration(ttl.TTL)*time.Second < delay-time.Second {
				t.Errorf("shadow's lease when the session ended: %+v, %v; want the delay of %v left", ttl, err, delay)
			}
			if l, err := c.TryLock(ctx(t), k); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("TryLock once the holder's session ended = %v; want ErrNotAcquired during the lock delay", err)
				if err == nil {
					l.Release(ctx(t))
				}
			}
			select {
			case r := <-got:
				t.Fatalf("the waiter's Lock returned %v, %v once the holder's session ended; want it to wait for the delay", r.l, r.err)
			default:
			}
			r := <-got
			if r.err != nil {
				t.Fatalf("waiter's Lock: %v", r.err)
			}
			if err := r.l.Release(ctx(t)); err != nil {
				t.Error(err)
			}
			<-la.Done()
			if cause := context.Cause(la.Context()); !errors.Is(cause, dlock.ErrLost) {
				t.Errorf("holder's cause = %v; want ErrLost", cause)
			}
		})
	}
}

// An entry and its shadow count as one entry: a hold with a lock delay
// lists once, takes one permit of a semaphore, and its downgrade admits the
// readers that wait for it; after the releases nothing is left.
func TestLockDelayShadowCountsOnce(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	a := newLockClient(t, newTestDriver(t, srv.Addr))
	sb := spy(newTestDriver(t, srv.Addr))
	b := newLockClient(t, sb)
	k := key(t)
	delay := dlock.WithLockDelay(time.Minute)

	l, err := a.Lock(ctx(t), k, delay)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := b.List(ctx(t), k)
	if err != nil || len(hs) != 1 || hs[0].Token != l.Token() || hs[0].Owner != l.OwnerID() {
		t.Errorf("List of a hold with a lock delay = %+v, %v; want its holder once", hs, err)
	}
	got := lockAsync(ctx(t), b, k, dlock.Shared())
	<-sb.queued
	if err := l.Downgrade(ctx(t)); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("reader waiting for a downgrade of a hold with a lock delay: %v", r.err)
	}
	for _, l := range []*dlock.Lock{r.l, l} {
		if err := l.Release(ctx(t)); err != nil {
			t.Error(err)
		}
	}

	p, err := a.Lock(ctx(t), k+"/sem", dlock.WithLimit(2), delay)
	if err != nil {
		t.Fatal(err)
	}
	q, err := b.TryLock(ctx(t), k+"/sem", dlock.WithLimit(2))
	if err != nil {
		t.Fatalf("TryLock of the second permit of two beside one with a lock delay: %v", err)
	}
	for _, l := range []*dlock.Lock{q, p} {
		if err := l.Release(ctx(t)); err != nil {
			t.Error(err)
		}
	}
	assertEmpty(t, admin(t), k)
}

// concurrency.Mutex waits for the shadow of a hold with a lock delay whose
// session ended, as dlock does: both are kept out during the delay, and the
// Mutex gets the key after it. Once the driver sees the session gone, it
// moves the shadow to a lease of the delay and revokes the delay lease.
func TestLockDelayInterop(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	cli := admin(t)
	ad := newTestDriver(t, srv.Addr, WithSessionTTL(2*time.Second))
	a := newLockClient(t, ad)
	c := newLockClient(t, newTestDriver(t, srv.Addr))
	k := key(t)
	if _, err := a.Lock(ctx(t), k, dlock.WithLockDelay(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	q, err := cli.Get(ctx(t), DefaultPrefix+k+"/", clientv3.WithPrefix())
	if err != nil || len(q.Kvs) != 2 {
		t.Fatalf("entries of the hold: %d, %v; want the entry and its shadow", len(q.Kvs), err)
	}
	shadow := q.Kvs[1]
	if !strings.HasSuffix(string(shadow.Key), shadowSuffix) {
		shadow = q.Kvs[0]
	}
	moved := cli.Watch(ctx(t), string(shadow.Key), clientv3.WithRev(q.Header.Revision+1))
	ad.mu.Lock()
	lease := ad.sess.id
	ad.mu.Unlock()
	if _, err := cli.Revoke(ctx(t), lease); err != nil {
		t.Fatal(err)
	}
	if wr := <-moved; wr.Err() != nil || len(wr.Events) == 0 || wr.Events[0].Type != clientv3.EventTypePut {
		t.Fatalf("watching the shadow: %+v, %v; want it moved to another lease", wr.Events, wr.Err())
	} else if l, err := cli.TimeToLive(ctx(t), clientv3.LeaseID(wr.Events[0].Kv.Lease)); err != nil || l.GrantedTTL != 3 {
		t.Errorf("the shadow's new lease: %+v, %v; want one of the delay, 3s", l, err)
	}
	m := newMutex(t, srv.Addr, DefaultPrefix+k, 5)
	defer m.s.Close()
	if err := m.m.TryLock(ctx(t)); !errors.Is(err, concurrency.ErrLocked) {
		t.Errorf("Mutex.TryLock once the holder's session ended = %v; want ErrLocked during the lock delay", err)
	}
	if l, err := c.TryLock(ctx(t), k); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock once the holder's session ended = %v; want ErrNotAcquired during the lock delay", err)
		if err == nil {
			l.Release(ctx(t))
		}
	}
	if err := m.lock(ctx(t)); err != nil {
		t.Fatalf("Mutex.Lock after the lock delay: %v", err)
	}
	if err := m.unlock(); err != nil {
		t.Fatal(err)
	}
	if l, err := cli.TimeToLive(ctx(t), clientv3.LeaseID(shadow.Lease)); err != nil || l.TTL != -1 {
		t.Errorf("the delay lease once its shadows moved: %+v, %v; want it revoked", l, err)
	}
	assertEmpty(t, cli, k)
}
