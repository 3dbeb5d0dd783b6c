package drivertest

import (
	"errors"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// testLockDelay checks dlock.WithLockDelay: a holder that stops renewing
// keeps the key from others for the delay after its own lease ended, on a
// lock taken with the delay and on one resumed from its hold ID by a Client
// without it, while a Release, or a forced one, frees the key at once. A driver that does not
// declare LockDelay refuses the option.
func (s *suite) testLockDelay(t *testing.T) {
	p := prefix(t)
	a, b := s.client(t), s.client(t)
	ttl := s.shortTTL()
	delay := max(2*time.Second, 2*ttl)
	if !s.caps.LockDelay {
		_, err := a.TryLock(ctx(t), p+"k", dlock.WithLockDelay(delay))
		if ae := (*dlock.ArgError)(nil); !errors.As(err, &ae) || ae.Name != "lock delay" {
			t.Errorf("TryLock with a lock delay on a driver without LockDelay = %v; want an *ArgError named \"lock delay\"", err)
		}
		return
	}
	// A release frees the key at once, whatever the delay.
	l, err := a.Lock(ctx(t), p+"released", dlock.WithTTL(longTTL), dlock.WithLockDelay(longTTL))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if l.TTL() > longTTL {
		t.Errorf("Lock.TTL() = %v with a lock delay; want the lease asked for, %v, or less", l.TTL(), longTTL)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if l, err := b.TryLock(ctx(t), p+"released"); err != nil {
		t.Errorf("TryLock after a release with a lock delay: %v; want the key free at once", err)
	} else {
		l.Release(ctx(t))
	}
	// So does an operator's forced release (documented as such).
	if f, ok := s.driver(t).(driver.ForceReleaser); ok {
		if _, err := a.Lock(ctx(t), p+"forced", dlock.WithTTL(longTTL), dlock.WithLockDelay(longTTL)); err != nil {
			t.Fatalf("Lock: %v", err)
		}
		if n, err := f.ForceRelease(ctx(t), p+"forced"); err != nil || n != 1 {
			t.Fatalf("ForceRelease = %d, %v; want 1", n, err)
		}
		if l, err := b.TryLock(ctx(t), p+"forced"); err != nil {
			t.Errorf("TryLock after a forced release with a lock delay: %v; want the key free at once", err)
		} else {
			l.Release(ctx(t))
		}
	}

	// Holders that stop renewing: one that took the lock with the delay
	// (and a reader and a semaphore's permit, where the driver has them),
	// one resumed with the delay its hold ID carries, and a lock without
	// delay taken after them, whose end on the store tells that theirs
	// have ended too. held maps their keys to the mode of the next holder.
	opts := []dlock.LockOption{dlock.WithTTL(ttl), dlock.WithoutRenewal()}
	held := map[string][]dlock.LockOption{p + "stopped": nil}
	if s.caps.Modes.Has(driver.Shared) {
		held[p+"reader"] = nil // a writer
		if _, err := a.Lock(ctx(t), p+"reader", append(opts, dlock.Shared(), dlock.WithLockDelay(delay))...); err != nil {
			t.Fatalf("Lock: %v", err)
		}
	}
	if s.caps.Modes.Has(driver.Semaphore) {
		held[p+"permit"] = []dlock.LockOption{dlock.WithLimit(1)}
		if _, err := a.Lock(ctx(t), p+"permit", append(opts, dlock.WithLimit(1), dlock.WithLockDelay(delay))...); err != nil {
			t.Fatalf("Lock: %v", err)
		}
	}
	if _, err := a.Lock(ctx(t), p+"stopped", append(opts, dlock.WithLockDelay(delay))...); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if s.caps.PortableHolds {
		held[p+"resumed"] = nil
		l, err := a.Lock(ctx(t), p+"resumed", dlock.WithTTL(longTTL), dlock.WithLockDelay(delay))
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
		id := l.HoldID()
		if err := l.Detach(); err != nil {
			t.Fatalf("Detach: %v", err)
		}
		if _, err := b.Resume(ctx(t), id, opts...); err != nil {
			t.Fatalf("Resume: %v", err)
		}
	}
	if _, err := a.Lock(ctx(t), p+"ref", opts...); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	ref, err := b.Lock(ctx(t), p+"ref", dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("Lock waiting for an expired lease: %v", err)
	}
	for key, mode := range held {
		if l, err := b.TryLock(ctx(t), key, mode...); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryLock of %q once its holder's lease ended = %v; want ErrNotAcquired during the lock delay", key, err)
			if err == nil {
				l.Release(ctx(t))
			}
		}
	}
	if err := ref.Release(ctx(t)); err != nil {
		t.Errorf("Release: %v", err)
	}
	for key, mode := range held {
		l, err := b.Lock(ctx(t), key, append(mode, dlock.WithTTL(longTTL))...)
		if err == nil {
			err = l.Release(ctx(t))
		}
		if err != nil {
			t.Errorf("Lock of %q after the lock delay: %v", key, err)
		}
	}
	s.assertNoResidue(t, p)
}
