package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memdlock"
)

// TestCauseIsContextCause checks that Lock.Cause is nil while the lock is
// held and then the context's cause, while the context's own Err is only
// context.Canceled, for a release, a loss and a Close.
func TestCauseIsContextCause(t *testing.T) {
	check := func(t *testing.T, l *dlock.Lock, want error) {
		t.Helper()
		<-l.Done()
		if err := l.Context().Err(); err != context.Canceled {
			t.Errorf("Context().Err() = %v; want context.Canceled", err)
		}
		cause := l.Cause()
		if cause != context.Cause(l.Context()) {
			t.Errorf("Cause() = %v; want context.Cause(Context()) = %v", cause, context.Cause(l.Context()))
		}
		if !errors.Is(cause, want) {
			t.Errorf("Cause() = %v; want an error wrapping %v", cause, want)
		}
	}
	held := func(t *testing.T, c *dlock.Client) *dlock.Lock {
		t.Helper()
		l, err := c.Lock(context.Background(), "k", dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if l.Cause() != nil || l.Context().Err() != nil {
			t.Fatalf("held lock: Cause() = %v, Context().Err() = %v; want nil, nil", l.Cause(), l.Context().Err())
		}
		return l
	}

	t.Run("release", func(t *testing.T) {
		c := newClient(t, memdlock.New())
		l := held(t, c)
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		check(t, l, dlock.ErrNotHeld)
	})
	t.Run("lost", func(t *testing.T) {
		store := memdlock.New()
		c := newClient(t, store.Share())
		l := held(t, c)
		if _, err := c.ForceRelease(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
		if err := l.Refresh(context.Background()); !errors.Is(err, dlock.ErrLost) {
			t.Fatalf("Refresh after a forced release = %v; want ErrLost", err)
		}
		check(t, l, dlock.ErrLost)
	})
	t.Run("close", func(t *testing.T) {
		c := newClient(t, memdlock.New())
		l := held(t, c)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		check(t, l, dlock.ErrClosed)
	})
}
