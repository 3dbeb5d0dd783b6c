package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/memdlock"
)

func TestReentrant(t *testing.T) {
	store := memdlock.New()
	c := newClient(t, store.Share())
	other := newClient(t, store.Share())
	ctx := t.Context()

	l, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "k"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock without the held lock's context: %v; want ErrNotAcquired (not reentrant)", err)
	}
	l2, err := c.Lock(l.Context(), "k")
	if err != nil || l2 != l {
		t.Fatalf("Lock with the held lock's context = %p, %v; want the held lock %p", l2, err, l)
	}
	// Through a lock of another key, whose context carries both.
	lb, err := c.Lock(l.Context(), "b")
	if err != nil || lb == l {
		t.Fatalf("Lock of another key = %v, %v; want a new lock", lb, err)
	}
	l3, err := c.TryLock(lb.Context(), "k")
	if err != nil || l3 != l {
		t.Fatalf("TryLock through the inner lock's context = %p, %v; want the held lock", l3, err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("inner Release %d: %v", i, err)
		}
		if _, err := other.TryLock(ctx, "k"); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("after inner Release %d another client got the lock (%v); want it still held", i, err)
		}
		if l.Cause() != nil {
			t.Fatalf("after inner Release %d: lock ended: %v", i, l.Cause())
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("last Release: %v", err)
	}
	if err := l.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release once too often: %v; want ErrNotHeld", err)
	}
	if _, err := c.Lock(l.Context(), "k"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("re-entering a released lock: %v; want ErrNotAcquired", err)
	}
	lo, err := other.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("after the last Release another client cannot lock: %v", err)
	}
	lo.Release(ctx)
}

func TestReentrantDo(t *testing.T) {
	c := newClient(t, memdlock.New())
	depth := 0
	var tokens []uint64
	var do func(ctx context.Context, l *dlock.Lock) error
	do = func(ctx context.Context, l *dlock.Lock) error {
		tokens = append(tokens, l.Token())
		if depth++; depth < 3 {
			return c.Do(ctx, "k", do)
		}
		return nil
	}
	if err := c.Do(t.Context(), "k", do); err != nil {
		t.Fatal(err)
	}
	if len(tokens) != 3 || tokens[0] != tokens[1] || tokens[1] != tokens[2] {
		t.Errorf("tokens of nested Do = %v; want three equal tokens", tokens)
	}
	l, err := c.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatalf("after the outermost Do the lock is still held: %v", err)
	}
	l.Release(t.Context())
}

func TestReentrantReleaseAfter(t *testing.T) {
	store := memdlock.New()
	c := newClient(t, store.Share())
	ctx := t.Context()
	l, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(l.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseAfter(ctx, 0); err != nil || l.Cause() != nil {
		t.Fatalf("inner ReleaseAfter: %v, lock %v; want the lock still held", err, l.Cause())
	}
	if err := l.ReleaseAfter(ctx, 0); err != nil || !errors.Is(l.Cause(), dlock.ErrNotHeld) {
		t.Fatalf("outer ReleaseAfter: %v, lock %v; want it released", err, l.Cause())
	}
}

// unfair is an in-process store that declares no FIFO order.
type unfair struct{ *memdlock.Driver }

func (u unfair) Capabilities() driver.Capabilities {
	caps := u.Driver.Capabilities()
	caps.FIFO = false
	return caps
}

func TestFairUnsupported(t *testing.T) {
	c := newClient(t, unfair{memdlock.New()})
	if _, err := c.Lock(t.Context(), "k", dlock.Fair()); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("Fair on a backend without FIFO: %v; want ErrUnsupported", err)
	}
	fair := newClient(t, memdlock.New())
	l, err := fair.Lock(t.Context(), "k", dlock.Fair())
	if err != nil {
		t.Fatalf("Fair on a FIFO backend: %v", err)
	}
	l.Release(t.Context())
}

// A function that needs the lock can be called with or without it held:
// with the holder's context it re-enters instead of waiting for itself.
func ExampleClient_Lock_reentrant() {
	ctx := context.Background()
	c, err := dlock.Open(ctx, "mem://reentrant-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	update := func(ctx context.Context) error {
		l, err := c.Lock(ctx, "account:42")
		if err != nil {
			return err
		}
		defer l.Release(ctx)
		fmt.Println("updating under token", l.Token())
		return nil
	}

	l, err := c.Lock(ctx, "account:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	update(l.Context()) // re-enters: same lock, same token
	l.Release(ctx)
	// Output: updating under token 1
}
