package dlock_test

import (
	"errors"
	"testing"

	"github.com/dlockhq/dlock"
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
