package dlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/memdlock"
)

// TestDowngradeOpensTheGate checks that after a downgrade other goroutines
// of the same Client can read alongside, as they can beside any read lock,
// and that a writer of the Client still waits.
func TestDowngradeOpensTheGate(t *testing.T) {
	store := memdlock.New()
	c := newClient(t, store.Share())
	ctx := t.Context()
	w, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "k", dlock.Shared()); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock(shared) beside the write lock = %v; want ErrNotAcquired", err)
	}
	if err := w.Downgrade(ctx); err != nil {
		t.Fatalf("Downgrade: %v", err)
	}
	r, err := c.TryLock(ctx, "k", dlock.Shared())
	if err != nil {
		t.Fatalf("TryLock(shared) beside the downgraded lock = %v; want a read lock", err)
	}
	if _, err := c.TryLock(ctx, "k"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock(exclusive) beside two readers = %v; want ErrNotAcquired", err)
	}
	for _, l := range []*dlock.Lock{r, w} {
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
	}
	l, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("TryLock(exclusive) after the readers left = %v", err)
	}
	l.Release(ctx)
	if n := store.Count(""); n != 0 {
		t.Errorf("store holds %d records; want none", n)
	}
}

// gatedDriver holds its first Acquire until proceed is closed, after
// closing entered.
type gatedDriver struct {
	*memdlock.Driver
	once             sync.Once
	entered, proceed chan struct{}
}

func (g *gatedDriver) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.entered)
		<-g.proceed
	}
	return g.Driver.Acquire(ctx, req)
}

// TestTryLockNotHeldUpByLocalAttempt checks that a TryLock of a reader or a
// permit asks the store while another goroutine of the same Client is
// acquiring the key, instead of failing as if the key were held.
func TestTryLockNotHeldUpByLocalAttempt(t *testing.T) {
	for _, m := range []struct {
		name string
		opt  dlock.LockOption
	}{{"shared", dlock.Shared()}, {"semaphore", dlock.WithLimit(3)}} {
		t.Run(m.name, func(t *testing.T) {
			g := &gatedDriver{Driver: memdlock.New(), entered: make(chan struct{}), proceed: make(chan struct{})}
			c := newClient(t, g)
			ctx := t.Context()
			first := make(chan error, 1)
			go func() {
				l, err := c.TryLock(ctx, "k", m.opt)
				if err == nil {
					err = l.Release(ctx)
				}
				first <- err
			}()
			<-g.entered
			l, err := c.TryLock(ctx, "k", m.opt)
			close(g.proceed)
			if err != nil {
				t.Errorf("TryLock while another goroutine acquires the key: %v; want a %s hold", err, m.name)
			} else if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
			if err := <-first; err != nil {
				t.Errorf("the first TryLock: %v", err)
			}
		})
	}
}
