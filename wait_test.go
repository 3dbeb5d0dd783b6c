package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/memdlock"
)

// holdForever takes key on store for a minute, so that a waiter's first
// attempt finds it held.
func holdForever(t *testing.T, store *memdlock.Driver, key string) {
	t.Helper()
	holder := newClient(t, store.Share())
	if _, err := holder.Lock(context.Background(), key, dlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
}

// TestWaitEndNamesStoreFailure checks that a wait that ends while the store
// fails its attempts says so: the error wraps ErrNotAcquired, the reason
// the wait ended, ErrUnavailable and the store's error, rather than
// looking like a lock that is still held.
func TestWaitEndNamesStoreFailure(t *testing.T) {
	fast := dlock.WithBackoff(time.Millisecond, 5*time.Millisecond)
	wantUnavailable := func(t *testing.T, err, reason error) {
		t.Helper()
		for _, target := range []error{dlock.ErrNotAcquired, reason, dlock.ErrUnavailable} {
			if !errors.Is(err, target) {
				t.Errorf("Lock = %v; want an error wrapping %v", err, target)
			}
		}
		if err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("Lock = %v; want it to name the store's error", err)
		}
	}

	t.Run("deadline", func(t *testing.T) {
		store := memdlock.New()
		holdForever(t, store, "k")
		// The first attempt finds the lock held; every later one fails.
		c := newClient(t, &faulty{Driver: store.Share(), failFrom: 2})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := c.Lock(ctx, "k", fast)
		wantUnavailable(t, err, context.DeadlineExceeded)
	})

	t.Run("close", func(t *testing.T) {
		store := memdlock.New()
		holdForever(t, store, "k")
		f := &faulty{Driver: store.Share(), failFrom: 2}
		c := newClient(t, f)
		var once sync.Once
		closed := make(chan struct{})
		f.set(func(f *faulty) {
			f.onFail = func() { once.Do(func() { go func() { c.Close(); close(closed) }() }) }
		})
		_, err := c.Lock(context.Background(), "k", fast)
		<-closed
		wantUnavailable(t, err, dlock.ErrClosed)
	})

	t.Run("answered since", func(t *testing.T) {
		// Failures followed by answers: the lock is held, and the
		// error says only that.
		store := memdlock.New()
		holdForever(t, store, "k")
		c := newClient(t, &faulty{Driver: store.Share(), failAttempts: map[int]bool{2: true, 3: true}})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := c.Lock(ctx, "k", fast)
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlock.ErrUnavailable) {
			t.Errorf("Lock = %v; want ErrNotAcquired and DeadlineExceeded only", err)
		}
	})

	t.Run("first attempt", func(t *testing.T) {
		// A store that fails the first attempt is reported at once, as
		// unavailable.
		store := memdlock.New()
		c := newClient(t, &faulty{Driver: store.Share(), failAttempts: map[int]bool{1: true}})
		_, err := c.Lock(context.Background(), "k")
		if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("Lock = %v; want ErrUnavailable, not ErrNotAcquired", err)
		}
	})
}

// busyFirst answers ErrBusy to the first n Acquire calls, as SQLite does
// while another process keeps the file's write lock.
type busyFirst struct {
	*memdlock.Driver
	mu sync.Mutex
	n  int
}

func (b *busyFirst) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	b.mu.Lock()
	busy := b.n > 0
	b.n--
	b.mu.Unlock()
	if busy {
		return driver.Result{}, fmt.Errorf("test: database is locked: %w", driver.ErrBusy)
	}
	return b.Driver.Acquire(ctx, req)
}

// TestBusyStoreIsWaitedOut checks that a store that answers busy (and
// changed nothing) is treated as a held key: Lock waits it out even when
// the first attempt is answered so, and TryLock reports ErrNotAcquired.
func TestBusyStoreIsWaitedOut(t *testing.T) {
	c := newClient(t, &busyFirst{Driver: memdlock.New(), n: 3})
	if _, err := c.TryLock(t.Context(), "k"); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, driver.ErrBusy) {
		t.Fatalf("TryLock on a busy store: %v; want ErrNotAcquired and the busy cause", err)
	}
	l, err := c.Lock(t.Context(), "k", dlock.WithBackoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatalf("Lock on a store busy for its first attempts: %v; want the lock once it answers", err)
	}
	l.Release(t.Context())
}
