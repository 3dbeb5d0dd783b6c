package drivertest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/holdid"
)

// testPortableHolds checks Capabilities.PortableHolds. A driver that
// declares it implements driver.HoldReader, keeps a hold that a Client
// detached and then closed (with its driver), and serves it to a Client
// over another driver of the store: read back, resumed from its hold ID,
// refreshed and released there. One that does not declare it refuses
// Detach with ErrUnsupported.
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
	reader, ok := s.driver(t).(driver.HoldReader)
	if !ok {
		t.Fatalf("a driver that declares PortableHolds does not implement driver.HoldReader")
	}
	id := l.HoldID()
	if err := l.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	owner := decode(t, id).Owner
	h, err := reader.ReadHold(ctx(t), key, owner)
	if err != nil || h.Key != key || h.Owner != owner || h.Token != l.Token() || h.Mode != driver.Exclusive || h.Limit != 0 || h.TTL > longTTL {
		t.Errorf("ReadHold = %+v, %v; want the exclusive hold of token %d", h, err, l.Token())
	}
	if _, err := reader.ReadHold(ctx(t), key, owner+"x"); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("ReadHold of another owner = %v; want ErrNotOwner", err)
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

// decode returns the fields of a hold ID.
func decode(t *testing.T, id string) holdid.Ref {
	t.Helper()
	r, err := holdid.Decode(id)
	if err != nil {
		t.Fatalf("a hold ID does not decode: %v", err)
	}
	return r
}

// edit returns id with edit applied to its fields.
func edit(t *testing.T, id string, edit func(r *holdid.Ref)) string {
	r := decode(t, id)
	edit(&r)
	return r.Encode()
}

// testResumeEditedHoldID checks that a hold ID whose fields were edited
// cannot mint a fencing token: Resume takes the token, mode and limit from
// the store, and refuses an ID whose token, mode or limit differ from the
// store's (an *ArgError) or that names no live hold (ErrNotHeld), changing
// nothing. A changed lease is the bearer's to choose, as WithTTL is.
func (s *suite) testResumeEditedHoldID(t *testing.T) {
	s.needPortable(t)
	key := prefix(t) + "k"
	c := s.client(t)
	l, err := c.Lock(ctx(t), key, dlock.WithTTL(longTTL), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Lock(ctx(t), key+"2", dlock.WithTTL(longTTL), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	id := l.HoldID()
	owner := decode(t, id).Owner
	reader := s.driver(t).(driver.HoldReader)
	before, err := reader.ReadHold(ctx(t), key, owner)
	if err != nil {
		t.Fatal(err)
	}
	r := s.client(t)
	for _, tc := range []struct {
		field string
		edit  func(r *holdid.Ref)
		want  error
	}{
		{"token up", func(r *holdid.Ref) { r.Token += 1000 }, dlock.ErrInvalidArgument},
		{"token down", func(r *holdid.Ref) { r.Token-- }, dlock.ErrInvalidArgument},
		{"mode", func(r *holdid.Ref) { r.Mode = uint8(driver.Shared) }, dlock.ErrInvalidArgument},
		{"mode and limit", func(r *holdid.Ref) { r.Mode, r.Limit = uint8(driver.Semaphore), 2 }, dlock.ErrInvalidArgument},
		{"limit", func(r *holdid.Ref) { r.Limit = 2 }, dlock.ErrInvalidArgument},
		{"key", func(r *holdid.Ref) { r.Key += "2" }, dlock.ErrNotHeld},
		{"owner", func(r *holdid.Ref) { r.Owner = decode(t, other.HoldID()).Owner }, dlock.ErrNotHeld},
		{"lease", func(r *holdid.Ref) { r.TTL = 0 }, dlock.ErrInvalidArgument},
		{"lease too long", func(r *holdid.Ref) { r.TTL = uint64(maxTTL(s.caps) + time.Second) }, dlock.ErrInvalidArgument},
	} {
		got, err := r.Resume(ctx(t), edit(t, id, tc.edit), dlock.WithoutRenewal())
		if got != nil || !errors.Is(err, tc.want) {
			t.Errorf("Resume of a hold ID with its %s edited = %v, %v; want an error wrapping %v", tc.field, got, err, tc.want)
		}
	}
	if s.caps.Modes.Has(driver.Semaphore) {
		p, err := c.Lock(ctx(t), key+"sem", dlock.WithLimit(2), dlock.WithTTL(longTTL))
		if err != nil {
			t.Fatal(err)
		}
		for _, limit := range []uint64{1, 3} {
			got, err := r.Resume(ctx(t), edit(t, p.HoldID(), func(r *holdid.Ref) { r.Limit = limit }))
			if got != nil || !errors.Is(err, dlock.ErrInvalidArgument) {
				t.Errorf("Resume of a permit's hold ID with its limit edited to %d = %v, %v; want an *ArgError", limit, got, err)
			}
		}
		if err := p.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	after, err := reader.ReadHold(ctx(t), key, owner)
	if err != nil || after.Token != before.Token || after.Mode != before.Mode || after.TTL > before.TTL {
		t.Errorf("the hold after refused Resumes: %+v, %v; want it unchanged: %+v", after, err, before)
	}
	// A shorter lease: the hold is the store's, with the lease asked.
	got, err := r.Resume(ctx(t), edit(t, id, func(r *holdid.Ref) { r.TTL = uint64(longTTL / 2) }), dlock.WithoutRenewal())
	if err != nil {
		t.Fatalf("Resume of a hold ID with a shorter lease: %v", err)
	}
	if got.Token() != l.Token() || got.Mode() != driver.Exclusive || got.TTL() > longTTL/2 {
		t.Errorf("resumed %v with ttl %v; want token %d, exclusive, at most %v", got, got.TTL(), l.Token(), longTTL/2)
	}
	if err := l.Detach(); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*dlock.Lock{got, other} {
		if err := x.Release(ctx(t)); err != nil {
			t.Errorf("Release: %v", err)
		}
	}
	s.assertNoResidue(t, key)
}

// maxTTL is the longest lease of a driver with caps.
func maxTTL(caps driver.Capabilities) time.Duration {
	if caps.MaxTTL > 0 {
		return caps.MaxTTL
	}
	return dlock.DefaultMaxTTL
}

// testResumeConcurrently checks that concurrent Resumes of one live hold
// all succeed: a driver that refreshes optimistically runs its step again
// when another refresh of the hold got in between.
func (s *suite) testResumeConcurrently(t *testing.T) {
	s.needPortable(t)
	key := prefix(t) + "k"
	l, err := s.client(t).Lock(ctx(t), key, dlock.WithTTL(longTTL), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	id := l.HoldID()
	c := s.client(t)
	const n = 20
	locks := make([]*dlock.Lock, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { locks[i], errs[i] = c.Resume(ctx(t), id, dlock.WithoutRenewal()) })
	}
	wg.Wait()
	for i, err := range errs {
		switch {
		case err != nil:
			t.Errorf("Resume %d of %d at once: %v", i+1, n, err)
		case locks[i].Token() != l.Token():
			t.Errorf("Resume %d: token %d; want %d", i+1, locks[i].Token(), l.Token())
		default:
			if err := locks[i].Detach(); err != nil {
				t.Error(err)
			}
		}
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	s.assertNoResidue(t, key)
}

// testResumeShortestLease checks that a hold taken with the shortest lease
// the store offers, and half a second more (a lease that a store counting
// in seconds rounds down), can be resumed: its hold ID records the lease
// asked for, not the one granted, and the resumed lock counts on no more
// than the store grants.
func (s *suite) testResumeShortestLease(t *testing.T) {
	s.needPortable(t)
	key := prefix(t) + "k"
	ttl := max(s.caps.MinTTL, 300*time.Millisecond) + 500*time.Millisecond
	l, err := s.client(t).Lock(ctx(t), key, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.client(t).Resume(ctx(t), l.HoldID(), dlock.WithoutRenewal())
	if err != nil {
		t.Fatalf("Resume of a hold with the shortest lease: %v", err)
	}
	if r.TTL() > l.TTL() {
		t.Errorf("resumed lease %v; want at most the lease of %v the store granted", r.TTL(), l.TTL())
	}
	if err := l.Detach(); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	s.assertNoResidue(t, key)
}

// needPortable skips the test on a driver without PortableHolds.
func (s *suite) needPortable(t *testing.T) {
	if !s.caps.PortableHolds {
		t.Skip("the driver's holds are not portable")
	}
}
