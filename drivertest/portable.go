package drivertest

import (
	"errors"
	"testing"

	"github.com/dlockhq/dlock"
)

// testPortableHolds checks Capabilities.PortableHolds. A driver that
// declares it keeps a hold that a Client detached and then closed (with
// its driver), and serves it to a Client over another driver of the store:
// resumed from its hold ID, refreshed and released there. One that does
// not declare it refuses Detach with ErrUnsupported.
func (s *suite) testPortableHolds(t *testing.T) {
	key := prefix(t) + "k"
	a, b := s.client(t), s.client(t)
	l, err := a.Lock(ctx(t), key, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if !s.caps.PortableHolds {
		if err := l.Detach(); !errors.Is(err, dlock.ErrUnsupported) {
			t.Errorf("Detach without PortableHolds = %v; want ErrUnsupported", err)
		}
		if err := l.Release(ctx(t)); err != nil {
			t.Errorf("Release after a refused Detach: %v", err)
		}
		return
	}
	id := l.HoldID()
	if err := l.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := b.TryLock(ctx(t), key); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of a hold detached by a closed client = %v; want ErrNotAcquired", err)
	}
	r, err := b.Resume(ctx(t), id, dlock.WithoutRenewal())
	if err != nil {
		t.Fatalf("Resume on another driver: %v", err)
	}
	if r.Token() != l.Token() {
		t.Errorf("resumed token %d; want %d", r.Token(), l.Token())
	}
	if err := r.Refresh(ctx(t)); err != nil {
		t.Errorf("Refresh of the resumed lock: %v", err)
	}
	if err := r.Release(ctx(t)); err != nil {
		t.Fatalf("Release of the resumed lock: %v", err)
	}
	if _, err := b.Resume(ctx(t), id); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Resume of a released hold = %v; want ErrNotHeld", err)
	}
	lb, err := b.TryLock(ctx(t), key)
	if err != nil {
		t.Fatalf("TryLock after the release: %v", err)
	}
	if err := lb.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	s.assertNoResidue(t, key)
}
