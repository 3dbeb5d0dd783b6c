package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/memdlock"
)

// atOnce wraps an in-process store's atomic multi-key attempts: the first
// busy ones answer ErrBusy, and each one takes at least slow.
type atOnce struct {
	*memdlock.Driver
	busy atomic.Int32
	slow time.Duration
}

func (a *atOnce) AcquireAll(ctx context.Context, reqs []driver.Request) (driver.MultiResult, error) {
	if a.busy.Add(-1) >= 0 {
		return driver.MultiResult{}, fmt.Errorf("test: database is locked: %w", driver.ErrBusy)
	}
	time.Sleep(a.slow) // a store that answers late
	return a.Driver.AcquireAll(ctx, reqs)
}

// TestAtOnceModeMismatch checks that a mode mismatch found by the atomic
// attempt of LockAll or TryLockAll is reported as such: the store
// answered, so it is not ErrUnavailable, and nothing is taken.
func TestAtOnceModeMismatch(t *testing.T) {
	store := memdlock.New()
	c, other := newClient(t, store.Share()), newClient(t, store.Share())
	l, err := other.Lock(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	for name, acquire := range map[string]func(context.Context, []string, ...dlock.LockOption) (*dlock.MultiLock, error){
		"LockAll": c.LockAll, "TryLockAll": c.TryLockAll,
	} {
		_, err := acquire(t.Context(), []string{"a", "b"}, dlock.WithLimit(2))
		if !errors.Is(err, dlock.ErrModeMismatch) || errors.Is(err, dlock.ErrUnavailable) {
			t.Errorf("%s of a mutex as a semaphore: %v; want ErrModeMismatch, not ErrUnavailable", name, err)
		}
		if n := store.Count(""); n != 1 {
			t.Errorf("%s: the store holds %d records; want 1 (b)", name, n)
		}
	}
}

// TestAtOnceBusy checks that a busy answer to the atomic attempt is taken
// as the single-key policy takes it: TryLockAll reports ErrNotAcquired,
// and LockAll waits it out, key by key.
func TestAtOnceBusy(t *testing.T) {
	store := memdlock.New()
	d := &atOnce{Driver: store.Share()}
	d.busy.Store(2)
	c := newClient(t, d, dlock.WithLogger(slog.New(slog.DiscardHandler)))
	keys := []string{"a", "b"}
	if _, err := c.TryLockAll(t.Context(), keys); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, driver.ErrBusy) {
		t.Errorf("TryLockAll on a busy store: %v; want ErrNotAcquired and the busy cause", err)
	}
	m, err := c.LockAll(t.Context(), keys)
	if err != nil {
		t.Fatalf("LockAll on a store busy for its atomic attempt: %v; want the locks", err)
	}
	if err := m.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := store.Count(""); n != 0 {
		t.Errorf("the store holds %d records at the end; want none", n)
	}
}

// TestAtOnceAfterMaxHold checks that TryLockAll never hands out locks whose
// max hold ran out before the store answered the atomic attempt, and
// leaves nothing behind.
func TestAtOnceAfterMaxHold(t *testing.T) {
	store := memdlock.New()
	const maxHold = 5 * time.Millisecond
	c := newClient(t, &atOnce{Driver: store.Share(), slow: 2 * maxHold})
	m, err := c.TryLockAll(t.Context(), []string{"a", "b"}, dlock.WithTTL(time.Minute), dlock.WithMaxHold(maxHold))
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLockAll answered after the max hold = %v, %v; want ErrNotAcquired", m, err)
	}
	if n := store.Count(""); n != 0 {
		t.Errorf("the store holds %d records; want none", n)
	}
}

// unqueued is an in-process store without queues or read-write locks
// (so that waiters do not queue); it reports each refused attempt on
// refused and counts releases.
type unqueued struct {
	*memdlock.Driver
	refused  chan struct{}
	releases atomic.Int32
}

func (r *unqueued) Capabilities() driver.Capabilities {
	caps := r.Driver.Capabilities()
	caps.FIFO, caps.Modes = false, driver.Modes(driver.Exclusive)
	return caps
}

func (r *unqueued) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	res, err := r.Driver.Acquire(ctx, req)
	if err == nil && !res.Acquired {
		select {
		case r.refused <- struct{}{}:
		default:
		}
	}
	return res, err
}

func (r *unqueued) Release(ctx context.Context, req driver.Request) error {
	r.releases.Add(1)
	return r.Driver.Release(ctx, req)
}

// TestWaitAfterRefusalReleasesNothing checks that a wait that ends after
// the store refused its attempt, and so kept nothing of it, sends no
// release on its way out.
func TestWaitAfterRefusalReleasesNothing(t *testing.T) {
	store := memdlock.New()
	l, err := newClient(t, store.Share()).Lock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	d := &unqueued{Driver: store.Share(), refused: make(chan struct{}, 1)}
	c := newClient(t, d)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-d.refused
		cancel()
	}()
	if _, err := c.Lock(ctx, "k"); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock of a held key until cancelled: %v; want ErrNotAcquired and Canceled", err)
	}
	if n := d.releases.Load(); n != 0 {
		t.Errorf("the wait sent %d releases; want none", n)
	}
}
