package dlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memdlock"
)

func TestLockAllBadInput(t *testing.T) {
	store := memdlock.New()
	c := newClient(t, store.Share())
	for name, keys := range map[string][]string{
		"empty":     nil,
		"duplicate": {"a", "b", "a"},
		"bad key":   {"a", ""},
	} {
		_, err := c.LockAll(t.Context(), keys)
		var ae *dlock.ArgError
		if !errors.As(err, &ae) {
			t.Errorf("%s: LockAll(%q) = %v; want an *ArgError", name, keys, err)
		}
	}
	if n := store.Count(""); n != 0 {
		t.Errorf("store holds %d records after rejected calls; want none", n)
	}
}

// TestLockAllNoDeadlock runs clients that ask for the same keys in opposite
// orders: the canonical order lets every one of them finish, and never two
// hold a key at once.
func TestLockAllNoDeadlock(t *testing.T) {
	store := memdlock.New()
	orders := [][]string{{"x", "y", "z"}, {"z", "y", "x"}, {"y", "x"}, {"z", "x"}}
	var (
		mu     sync.Mutex
		inside = map[string]bool{}
		wg     sync.WaitGroup
	)
	for _, keys := range orders {
		c := newClient(t, store.Share())
		wg.Go(func() {
			for range 20 {
				m, err := c.LockAll(t.Context(), keys, dlock.WithBackoff(time.Millisecond, 5*time.Millisecond))
				if err != nil {
					t.Errorf("LockAll(%q): %v", keys, err)
					return
				}
				mu.Lock()
				for _, k := range keys {
					if inside[k] {
						t.Errorf("%q held twice", k)
					}
					inside[k] = true
				}
				mu.Unlock()
				mu.Lock()
				for _, k := range keys {
					inside[k] = false
				}
				mu.Unlock()
				if err := m.Release(t.Context()); err != nil {
					t.Errorf("Release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if n := store.Count(""); n != 0 {
		t.Errorf("store holds %d records at the end; want none", n)
	}
}

func TestMultiLockContext(t *testing.T) {
	store := memdlock.New()
	c := newClient(t, store.Share())
	m, err := c.LockAll(t.Context(), []string{"b", "a"})
	if err != nil {
		t.Fatal(err)
	}
	ls := m.Locks()
	if len(ls) != 2 || ls[0].Key() != "a" || ls[1].Key() != "b" {
		t.Fatalf("Locks = %v; want a then b", ls)
	}
	// The context carries every lock: a nested Lock of any key re-enters.
	for i, k := range []string{"a", "b"} {
		if l, err := c.TryLock(m.Context(), k); err != nil || l != ls[i] {
			t.Fatalf("TryLock(%s) with the multi-lock's context = %v, %v; want the held lock", k, l, err)
		} else {
			l.Release(t.Context())
		}
	}
	if _, err := c.ForceRelease(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	if err := ls[0].Refresh(t.Context()); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Refresh after a forced release: %v; want ErrLost", err)
	}
	<-m.Done()
	if cause := context.Cause(m.Context()); !errors.Is(cause, dlock.ErrLost) {
		t.Errorf("multi-lock context cause = %v; want ErrLost", cause)
	}
	if err := m.Release(t.Context()); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Release: %v; want the loss of a reported", err)
	}
	if n := store.Count(""); n != 0 {
		t.Errorf("store holds %d records after Release; want none", n)
	}
}
