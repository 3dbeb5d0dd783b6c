package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
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

// counting counts a driver's Acquire and AcquireAll calls.
type counting struct {
	*memdlock.Driver
	one, all atomic.Int32
}

func (c *counting) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	c.one.Add(1)
	return c.Driver.Acquire(ctx, req)
}

func (c *counting) AcquireAll(ctx context.Context, reqs []driver.Request) (driver.MultiResult, error) {
	c.all.Add(1)
	return c.Driver.AcquireAll(ctx, reqs)
}

// TestLockAllAtOnce checks that on a driver.MultiAcquirer a multi-lock is
// one atomic step, so that a refused TryLockAll takes nothing at all, and
// that LockAll falls back to the canonical order to wait.
func TestLockAllAtOnce(t *testing.T) {
	store := memdlock.New()
	d := &counting{Driver: store.Share()}
	c, other := newClient(t, d), newClient(t, store.Share())
	m, err := c.TryLockAll(t.Context(), []string{"c", "a", "b"})
	if err != nil {
		t.Fatalf("TryLockAll of free keys: %v", err)
	}
	if all, one := d.all.Load(), d.one.Load(); all != 1 || one != 0 {
		t.Errorf("TryLockAll made %d AcquireAll and %d Acquire calls; want 1 and 0", all, one)
	}
	for _, l := range m.Locks() {
		if _, err := other.TryLock(t.Context(), l.Key()); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryLock(%s) while the multi-lock holds it: %v; want ErrNotAcquired", l.Key(), err)
		}
	}
	if err := m.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}

	hb, err := other.Lock(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	d.all.Store(0)
	_, err = c.TryLockAll(t.Context(), []string{"c", "a", "b"})
	if !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), `"b" is held`) {
		t.Errorf("TryLockAll with b held: %v; want ErrNotAcquired naming b", err)
	}
	if all, one := d.all.Load(), d.one.Load(); all != 1 || one != 0 {
		t.Errorf("refused TryLockAll made %d AcquireAll and %d Acquire calls; want 1 and 0", all, one)
	}
	if n := store.Count(""); n != 1 {
		t.Errorf("store holds %d records after a refused TryLockAll; want 1 (b)", n)
	}

	// LockAll tries at once, then waits key by key.
	wctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err = c.LockAll(wctx, []string{"a", "b"})
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("LockAll with b held until the deadline: %v; want ErrNotAcquired and DeadlineExceeded", err)
	}
	if all, one := d.all.Load(), d.one.Load(); all != 2 || one == 0 {
		t.Errorf("LockAll made %d AcquireAll calls in all and %d Acquire; want 2 and some", all, one)
	}
	if err := hb.Release(t.Context()); err != nil {
		t.Fatal(err)
	}

	// A key the context holds already is re-entered, so the set is taken
	// key by key.
	la, err := c.Lock(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	d.all.Store(0)
	m, err = c.LockAll(la.Context(), []string{"a", "b"})
	if err != nil {
		t.Fatalf("LockAll re-entering a: %v", err)
	}
	if got := m.Locks()[0]; got != la {
		t.Errorf("LockAll re-entering a returned a new lock for a (token %d, held %d)", got.Token(), la.Token())
	}
	if all := d.all.Load(); all != 0 {
		t.Errorf("LockAll re-entering a made %d AcquireAll calls; want 0", all)
	}
	if err := m.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := la.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := store.Count(""); n != 0 {
		t.Errorf("store holds %d records at the end; want none", n)
	}
}
