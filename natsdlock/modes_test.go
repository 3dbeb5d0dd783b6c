package natsdlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// permit returns a new owner's request for one of two permits of key.
func permit(key string, ttl time.Duration) driver.Request {
	r := req(key)
	r.Mode, r.Limit, r.TTL = driver.Semaphore, 2, ttl
	return r
}

// TestPermitEndsWhileOthersRefresh checks that a permit whose lease has
// ended stops counting although the key's record lives on, rewritten by
// another holder's refreshes more often than the permit's lease lasts:
// each holder's lease ends on the server's clock when its own TTL from its
// own last write has passed, not with the record.
func TestPermitEndsWhileOthersRefresh(t *testing.T) {
	d := newTestDriver(t, testsrv.Get(t, testsrv.NATS).Addr)
	k := key(t)
	short, long, next := permit(k, minTTL), permit(k, time.Minute), permit(k, time.Minute)
	for _, r := range []driver.Request{short, long} {
		if res, err := d.Acquire(ctx(t), r); err != nil || !res.Acquired {
			t.Fatalf("Acquire = %+v, %v", res, err)
		}
		defer d.Release(ctx(t), r)
	}
	defer d.Release(ctx(t), next)
	wait, cancel := context.WithTimeout(ctx(t), 20*time.Second)
	defer cancel()
	for {
		if err := d.Refresh(wait, long); err != nil {
			t.Fatalf("Refresh of the long permit: %v", err)
		}
		res, err := d.Acquire(wait, next)
		if err != nil {
			t.Fatalf("Acquire of the third permit: %v", err)
		}
		if res.Acquired {
			break
		}
		// The end of a lease publishes nothing: wait half the time the
		// store says it has left, so that the long permit's refreshes
		// rewrite the record more often than the short lease lasts.
		select {
		case <-time.After(res.RetryAfter / 2):
		case <-wait.Done():
			t.Fatal("the third permit was never granted: the ended permit still counts")
		}
	}
	if err := d.Refresh(ctx(t), short); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("Refresh of the ended permit = %v; want ErrNotOwner", err)
	}
	hs, err := d.List(ctx(t), k)
	if err != nil || len(hs) != 2 || hs[0].Owner != long.Owner || hs[1].Owner != next.Owner || hs[1].Limit != 2 {
		t.Errorf("List = %+v, %v; want the long permit and the third, of 2", hs, err)
	}
}

// TestLostPlace checks that a waiter whose queue entry expired learns it
// instead of queueing again at the back, whether or not the key is free
// when it comes back, and that nothing of it is left once it releases.
func TestLostPlace(t *testing.T) {
	addr := testsrv.Get(t, testsrv.NATS).Addr
	d := newTestDriver(t, addr)
	k := key(t)
	holder := req(k)
	if res, err := d.Acquire(ctx(t), holder); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	w := req(k)
	w.TTL, w.Queue = minTTL, true
	if res, err := d.Acquire(ctx(t), w); err != nil || res.Acquired {
		t.Fatalf("queued Acquire = %+v, %v; want a wait", res, err)
	}
	// The entry's lease ends on the server's clock; nothing signals it.
	time.Sleep(2 * minTTL)
	if res, err := d.Acquire(ctx(t), w); !errors.Is(err, driver.ErrNotOwner) {
		t.Fatalf("Acquire after the queue entry expired = %+v, %v; want ErrNotOwner", res, err)
	}
	if err := d.Release(ctx(t), holder); err != nil {
		t.Fatal(err)
	}
	if res, err := d.Acquire(ctx(t), w); !errors.Is(err, driver.ErrNotOwner) {
		t.Fatalf("Acquire of a free key after the queue entry expired = %+v, %v; want ErrNotOwner", res, err)
	}
	if err := d.Release(ctx(t), w); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("Release of the expired entry = %v; want ErrNotOwner", err)
	}
	if n, err := residue(ctx(t), addr, DefaultBucket, k); err != nil || n != 0 {
		t.Errorf("residue = %d, %v; want none", n, err)
	}
	// Once released, the owner may queue afresh.
	if res, err := d.Acquire(ctx(t), w); err != nil || !res.Acquired {
		t.Fatalf("Acquire after the release = %+v, %v", res, err)
	}
	if err := d.Release(ctx(t), w); err != nil {
		t.Fatal(err)
	}
}

// TestQueuedAcquireRenewsAtHalfLease checks that a waiter's further
// Acquire leaves the key's record as it is while its queue entry has more
// than half its lease left: every write wakes the key's waiters, and
// waiters that each wrote on waking would keep waking each other.
func TestQueuedAcquireRenewsAtHalfLease(t *testing.T) {
	d := newTestDriver(t, testsrv.Get(t, testsrv.NATS).Addr)
	k := key(t)
	holder := req(k)
	if res, err := d.Acquire(ctx(t), holder); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	defer d.Release(ctx(t), holder)
	var ws []driver.Request
	for range 2 {
		w := req(k)
		w.Queue = true
		ws = append(ws, w)
		defer d.Release(ctx(t), w)
		if res, err := d.Acquire(ctx(t), w); err != nil || res.Acquired {
			t.Fatalf("queued Acquire = %+v, %v; want a wait", res, err)
		}
	}
	before, err := d.last(ctx(t), d.subj+entryKey(k))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if res, err := d.Acquire(ctx(t), w); err != nil || res.Acquired {
			t.Fatalf("further queued Acquire = %+v, %v; want a wait", res, err)
		}
	}
	after, err := d.last(ctx(t), d.subj+entryKey(k))
	if err != nil {
		t.Fatal(err)
	}
	if after.Sequence != before.Sequence {
		t.Errorf("the further Acquires wrote the record (revision %d, then %d); want it left as it was", before.Sequence, after.Sequence)
	}
}
