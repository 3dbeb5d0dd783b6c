package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/fill"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/job"
	"github.com/dlockhq/dlock/leader"
	"github.com/dlockhq/dlock/memdlock"
	"github.com/dlockhq/dlock/ratelimit"
)

// TestErrorsNameKeyOnce collects the errors of the common failure paths
// and checks that each names the key exactly once and carries the
// "dlock:" prefix at most once, however many layers wrapped it, and that
// errors.Is still finds the sentinels. (Its case of a backend whose store
// is down is in internal/testing/integration.)
func TestErrorsNameKeyOnce(t *testing.T) {
	const key = "order:42"
	ctx := context.Background()
	check := func(t *testing.T, what string, err error, targets ...error) {
		t.Helper()
		dlocktest.ErrorNamesKeyOnce(t, what, key, err, targets...)
	}
	hold := func(t *testing.T, c *dlock.Client, opts ...dlock.LockOption) *dlock.Lock {
		t.Helper()
		l, err := c.Lock(ctx, key, append([]dlock.LockOption{dlock.WithTTL(time.Minute)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	t.Run("held", func(t *testing.T) {
		store := memdlock.New()
		a, b := newClient(t, store.Share()), newClient(t, store.Share())
		l := hold(t, a)
		_, err := b.TryLock(ctx, key)
		check(t, "TryLock of a held key", err, dlock.ErrNotAcquired)
		_, err = b.TryLockAll(ctx, []string{"a", key})
		check(t, "TryLockAll with a held key", err, dlock.ErrNotAcquired)
		_, err = a.TryLock(ctx, key)
		check(t, "TryLock of a key held by the same client", err, dlock.ErrNotAcquired)
		dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err = b.Lock(dctx, key)
		check(t, "Lock past its deadline", err, dlock.ErrNotAcquired, context.DeadlineExceeded)
		dctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err = b.LockAll(dctx, []string{"a", key})
		check(t, "LockAll past its deadline", err, dlock.ErrNotAcquired, context.DeadlineExceeded)
		_ = l
	})
	t.Run("mode", func(t *testing.T) {
		store := memdlock.New()
		a, b := newClient(t, store.Share()), newClient(t, store.Share())
		l := hold(t, a)
		_, err := b.TryLock(ctx, key, dlock.WithLimit(2))
		check(t, "TryLock of a mutex as a semaphore", err, dlock.ErrModeMismatch)
		if errors.Is(err, dlock.ErrUnavailable) {
			t.Errorf("TryLock of a mutex as a semaphore = %v; the store answered, so not ErrUnavailable", err)
		}
		_, err = a.Lock(l.Context(), key, dlock.WithLimit(2))
		check(t, "re-entering a mutex as a semaphore", err, dlock.ErrModeMismatch)

		c := newClient(t, memdlock.New())
		r := hold(t, c, dlock.Shared())
		_, err = c.Lock(r.Context(), key)
		check(t, "upgrading a read lock", err, dlock.ErrUpgrade)
		s := hold(t, newClient(t, memdlock.New()), dlock.WithLimit(2))
		check(t, "downgrading a permit", s.Downgrade(ctx), dlock.ErrModeMismatch)
	})
	t.Run("released", func(t *testing.T) {
		c := newClient(t, memdlock.New())
		l := hold(t, c)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		check(t, "Release of a released lock", l.Release(ctx), dlock.ErrNotHeld)
		check(t, "Refresh of a released lock", l.Refresh(ctx), dlock.ErrNotHeld)
		check(t, "Cause of a released lock", l.Cause(), dlock.ErrNotHeld)
		_, err := c.Lock(l.Context(), key)
		check(t, "re-entering a released lock", err, dlock.ErrNotAcquired, dlock.ErrNotHeld)
		d := hold(t, c)
		if err := d.Detach(); err != nil {
			t.Fatal(err)
		}
		check(t, "Release of a detached lock", d.Release(ctx), dlock.ErrNotHeld)
	})
	t.Run("lost", func(t *testing.T) {
		c := newClient(t, memdlock.New())
		l := hold(t, c)
		if _, err := c.ForceRelease(ctx, key); err != nil {
			t.Fatal(err)
		}
		check(t, "Refresh of a lost lock", l.Refresh(ctx), dlock.ErrLost)
		check(t, "Release of a lost lock", l.Release(ctx), dlock.ErrLost)
		check(t, "Cause of a lost lock", l.Cause(), dlock.ErrLost)
		m := hold(t, c)
		if _, err := c.ForceRelease(ctx, key); err != nil {
			t.Fatal(err)
		}
		check(t, "Release of a lock lost on the store", m.Release(ctx), dlock.ErrLost)
	})
	t.Run("closed", func(t *testing.T) {
		c := newClient(t, memdlock.New())
		l := hold(t, c)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		_, err := c.Lock(ctx, key)
		check(t, "Lock on a closed client", err, dlock.ErrClosed)
		_, err = c.TryLock(ctx, key)
		check(t, "TryLock on a closed client", err, dlock.ErrClosed)
		check(t, "Release after Close", l.Release(ctx), dlock.ErrClosed)
		check(t, "Cause after Close", l.Cause(), dlock.ErrClosed)
	})
	t.Run("unavailable", func(t *testing.T) {
		store := memdlock.New()
		holdForever(t, store, key)
		c := newClient(t, &faulty{Driver: store.Share(), failFrom: 2})
		dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := c.Lock(dctx, key, dlock.WithBackoff(time.Millisecond, 5*time.Millisecond))
		check(t, "a wait that ends while the store fails", err, dlock.ErrNotAcquired, dlock.ErrUnavailable, context.DeadlineExceeded)
		_, err = c.TryLock(ctx, key)
		check(t, "TryLock on a failing store", err, dlock.ErrUnavailable)

		f := &faulty{Driver: memdlock.New()}
		c = newClient(t, f)
		l := hold(t, c)
		f.set(func(f *faulty) { f.refreshErr = errors.New("connection reset") })
		check(t, "Refresh on a failing store", l.Refresh(ctx))
	})
	t.Run("permanent", func(t *testing.T) {
		r := &refusing{Driver: memdlock.New()}
		c := newClient(t, r)
		l := hold(t, c)
		r.mu.Lock()
		r.refreshErr, r.acquireErr = errRefused, errRefused
		r.mu.Unlock()
		check(t, "a permanent refresh failure", l.Refresh(ctx), dlock.ErrPermanent)
		wctx, cancel := context.WithTimeout(ctx, time.Hour)
		defer cancel()
		_ = l.Release(ctx)
		_, err := c.Lock(wctx, key)
		check(t, "a wait that meets a permanent failure", err, dlock.ErrPermanent, dlock.ErrUnavailable)
	})
	t.Run("recipes", func(t *testing.T) {
		store := memdlock.New()
		a, b := newClient(t, store.Share()), newClient(t, store.Share())
		l := hold(t, a)
		dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := fill.Once(dctx, b, key, fill.Cache[int]{
			Load:    func(context.Context) (int, bool, error) { return 0, false, nil },
			Compute: func(context.Context) (int, error) { return 1, nil },
			Store:   func(context.Context, int) error { return nil },
		})
		check(t, "fill.Once of a held key", err, dlock.ErrNotAcquired, context.DeadlineExceeded)
		dctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err = leader.Campaign(dctx, b, key, "b")
		check(t, "leader.Campaign for a held key", err, dlock.ErrNotAcquired, context.DeadlineExceeded)
		check(t, "job.Run of a held job", job.Run(ctx, b, key, func(context.Context) error { return nil }), job.ErrSkipped, dlock.ErrNotAcquired)
		lim, err := ratelimit.New(b, key, 2, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		_, err = lim.Allow(ctx)
		check(t, "ratelimit Allow on a lock", err, dlock.ErrModeMismatch)
		dctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		check(t, "ratelimit Wait on a lock", lim.Wait(dctx), dlock.ErrModeMismatch)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// The lock ends under fill and under a leader's term.
		_, err = fill.Once(ctx, a, key, fill.Cache[int]{
			Load: func(context.Context) (int, bool, error) { return 0, false, nil },
			Compute: func(context.Context) (int, error) {
				_, err := a.ForceRelease(ctx, key)
				return 1, err
			},
			Store: func(context.Context, int) error { return nil },
		})
		check(t, "fill.Once losing its lock", err, dlock.ErrLost)
		term, err := leader.Campaign(ctx, a, key, "a")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.ForceRelease(ctx, key); err != nil {
			t.Fatal(err)
		}
		check(t, "Resign of a lost term", term.Resign(ctx), dlock.ErrLost)
	})
}
