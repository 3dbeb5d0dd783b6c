package integration_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/dlocktest/bounds"
	"github.com/dlockhq/dlock/memdlock"
)

// TestHostileInput: Do's function panics and calls runtime.Goexit, and every
// duration and count option gets 0, -1, math.MaxInt64, the store's maximum
// and one more. Every error is typed, an argument that is refused leaves
// nothing held, and so does a panic.
func TestHostileInput(t *testing.T) {
	dlocktest.EachStore(t, bounds.Stores, func(t *testing.T, url string) {
		ctx := dlocktest.Ctx(t)
		c, admin := dlocktest.Open(t, url), dlocktest.Open(t, url)
		caps := c.Capabilities()
		n := 0
		key := func() string { n++; return fmt.Sprintf("k%d", n) }

		for _, goexit := range []bool{false, true} {
			k := key()
			bounds.Panics(t, goexit, func() {
				c.Do(ctx, k, func(context.Context, *dlock.Lock) error {
					if goexit {
						runtime.Goexit()
					}
					panic("boom")
				})
			})
			bounds.NothingHeld(t, admin, k)
		}

		// An observer that panics at each kind of event in turn: the
		// panic is logged, and the lock's life goes on.
		for _, kind := range []dlock.EventKind{dlock.EventAcquiring, dlock.EventAcquired, dlock.EventNotAcquired, dlock.EventRenewed, dlock.EventReleased} {
			k, seen := key(), make(chan struct{})
			var once sync.Once
			o, err := dlock.Open(ctx, url, dlock.WithObserver(dlock.ObserverFunc(func(e dlock.Event) {
				if e.Kind == kind {
					once.Do(func() { close(seen) })
					panic(fmt.Sprintf("observer at %v", kind))
				}
			})))
			if err != nil {
				t.Fatal(err)
			}
			l, err := o.Lock(ctx, k, dlock.WithTTL(max(caps.MinTTL, 100*time.Millisecond)))
			if err != nil {
				t.Fatalf("observer panicking at %v: Lock = %v", kind, err)
			}
			if _, err := o.TryLock(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("observer panicking at %v: TryLock of a held key = %v; want ErrNotAcquired", kind, err)
			}
			if kind == dlock.EventRenewed {
				<-seen
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("observer panicking at %v: Release = %v", kind, err)
			}
			<-seen
			o.Close()
			bounds.NothingHeld(t, admin, k)
		}

		// tryLock takes a key with opt and releases it; arg names the
		// option in the *ArgError expected unless ok.
		tryLock := func(what string, ok bool, arg string, opt dlock.LockOption) {
			t.Helper()
			k := key()
			l, err := c.TryLock(ctx, k, opt)
			switch {
			case ok && err == nil:
				if err := l.Release(ctx); err != nil {
					t.Errorf("%s: Release: %v", what, err)
				}
			case ok:
				t.Errorf("%s: TryLock = %v; want the lock", what, err)
			case err == nil:
				l.Release(ctx)
				t.Errorf("%s: TryLock took the lock; want an *ArgError for %q", what, arg)
			default:
				bounds.WantArg(t, err, arg)
			}
			bounds.WantTyped(t, err)
			bounds.NothingHeld(t, admin, k)
		}
		for _, d := range bounds.Durations(caps.MaxTTL) {
			tryLock(fmt.Sprintf("WithTTL(%v)", d), d == caps.MaxTTL, "ttl", dlock.WithTTL(d))
			tryLock(fmt.Sprintf("WithMaxHold(%v)", d), d > 0, "max hold", dlock.WithMaxHold(d))
			tryLock(fmt.Sprintf("WithBackoff(%v, %v)", d, d), d > 0, "backoff min", dlock.WithBackoff(d, d))

			o, err := dlock.Open(ctx, url, dlock.WithDefaultTTL(d))
			if d == caps.MaxTTL {
				if err != nil {
					t.Errorf("Open with WithDefaultTTL(%v): %v", d, err)
				} else {
					o.Close()
				}
			} else {
				bounds.WantArg(t, err, "ttl")
			}
		}
		for _, n := range bounds.Counts(caps.MaxLimit) {
			if n == caps.MaxLimit && !caps.Modes.Has(driver.Semaphore) {
				k := key()
				if _, err := c.TryLock(ctx, k, dlock.WithLimit(n)); !errors.Is(err, dlock.ErrUnsupported) {
					t.Errorf("WithLimit(%d) without semaphores = %v; want ErrUnsupported", n, err)
				}
				bounds.NothingHeld(t, admin, k)
				continue
			}
			tryLock(fmt.Sprintf("WithLimit(%d)", n), n == caps.MaxLimit, "limit", dlock.WithLimit(n))
		}

		// Release and ReleaseAfter release the lock all the same when they
		// refuse their arguments: a nil ctx, or a d too long.
		for _, release := range []func(l *dlock.Lock) error{
			func(l *dlock.Lock) error { return l.Release(bounds.NilContext) },
			func(l *dlock.Lock) error { return l.ReleaseAfter(bounds.NilContext, 0) },
			func(l *dlock.Lock) error { return l.ReleaseAfter(bounds.NilContext, caps.MinTTL) },
		} {
			k := key()
			l, err := c.TryLock(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			bounds.WantArg(t, release(l), "ctx")
			bounds.NothingHeld(t, admin, k)
		}
		most := c.MaxReleaseAfter()
		for _, d := range bounds.Durations(most) {
			k := key()
			l, err := c.TryLock(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			err = l.ReleaseAfter(ctx, d)
			bounds.WantTyped(t, err)
			switch {
			case d == most:
				if err != nil {
					t.Errorf("ReleaseAfter(%v) = %v", d, err)
				}
				if _, err := admin.TryLock(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
					t.Errorf("after ReleaseAfter(%v), TryLock = %v; want the key held by its lease", d, err)
				}
				if _, err := admin.ForceRelease(ctx, k); err != nil {
					t.Error(err)
				}
			case d > most:
				bounds.WantArg(t, err, "d")
			case err != nil:
				t.Errorf("ReleaseAfter(%v) = %v; want a release", d, err)
			}
			bounds.NothingHeld(t, admin, k)
		}
	})
}

// attempts counts the Acquire calls its driver gets, and signals the n-th.
type attempts struct {
	*memdlock.Driver
	n     atomic.Int32
	nth   int32
	reach chan struct{}
}

func (a *attempts) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	res, err := a.Driver.Acquire(ctx, req)
	if a.n.Add(1) == a.nth {
		close(a.reach)
	}
	return res, err
}

// TestBackoffAtMaxInt64: a waiter with WithBackoff(math.MaxInt64,
// math.MaxInt64) finds the lock held attempt after attempt (its holder
// renews it): the backoff must not wrap around when it grows, and the
// waiter gets the lock once it is released.
func TestBackoffAtMaxInt64(t *testing.T) {
	ctx := dlocktest.Ctx(t)
	store := memdlock.New()
	holder := newClient(t, store.Share())
	w := &attempts{Driver: store.Share(), nth: 3, reach: make(chan struct{})}
	waiter := newClient(t, w)
	l, err := holder.Lock(ctx, "k", dlock.WithTTL(150*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		<-w.reach // the backoff has grown twice
		l.Release(ctx)
	}()
	l2, err := waiter.Lock(ctx, "k", dlock.WithBackoff(math.MaxInt64, math.MaxInt64))
	if err != nil {
		t.Fatal(err)
	}
	l2.Release(ctx)
}
