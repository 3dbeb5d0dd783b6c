package drivertest

import (
	"errors"
	"testing"

	"github.com/dlockhq/dlock/driver"
)

// testAcquireAll checks driver.MultiAcquirer, where a driver implements it:
// one AcquireAll takes every hold or none, and a refused one leaves the free
// keys free.
func (s *suite) testAcquireAll(t *testing.T) {
	d := s.driver(t)
	ma, ok := d.(driver.MultiAcquirer)
	if !ok {
		t.Skip("driver does not implement MultiAcquirer")
	}
	// The keys share a Redis Cluster hash tag, so that a store that
	// partitions keys by it can take them at once.
	p := prefix(t)
	a, b, c, e := p+"{t}a", p+"{t}b", p+"{t}c", p+"{t}e"
	reqs := func(keys ...string) []driver.Request {
		rs := make([]driver.Request, len(keys))
		for i, k := range keys {
			rs[i] = s.request(k)
		}
		return rs
	}
	first := reqs(a, b, c)
	res, err := ma.AcquireAll(ctx(t), first)
	if errors.Is(err, driver.ErrUnsupported) {
		t.Skipf("AcquireAll(%s, %s, %s) = %v: this store cannot take these keys at once", a, b, c, err)
	}
	if err != nil || !res.Acquired || len(res.Results) != len(first) {
		t.Fatalf("AcquireAll of free keys = %+v, %v; want all acquired", res, err)
	}
	other := s.driver(t)
	for i, req := range first {
		if !res.Results[i].Acquired || res.Results[i].Token == 0 {
			t.Errorf("result %d = %+v; want acquired with a token", i, res.Results[i])
		}
		// Each hold is an ordinary one: another owner cannot take it,
		// and its owner refreshes it through another driver.
		if r, err := other.Acquire(ctx(t), s.request(req.Key)); err != nil || r.Acquired {
			t.Errorf("Acquire(%s) by another owner = %+v, %v; want not acquired", req.Key, r, err)
		}
		if err := other.Refresh(ctx(t), req); err != nil {
			t.Errorf("Refresh(%s) by its owner = %v", req.Key, err)
		}
	}

	// One held key refuses the whole set, and the free key stays free.
	second := reqs(e, b)
	res2, err := ma.AcquireAll(ctx(t), second)
	if err != nil || res2.Acquired || res2.Blocked != 1 {
		t.Fatalf("AcquireAll(e, b) with b held = %+v, %v; want not acquired, blocked at 1", res2, err)
	}
	if res2.RetryAfter < 0 || res2.RetryAfter > longTTL {
		t.Errorf("RetryAfter = %v; want within [0, %v]", res2.RetryAfter, longTTL)
	}
	if err := other.Release(ctx(t), second[0]); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("Release(e) by the refused owner = %v; want ErrNotOwner (nothing taken)", err)
	}
	free := s.request(e)
	if r, err := other.Acquire(ctx(t), free); err != nil || !r.Acquired {
		t.Errorf("Acquire(e) after the refused AcquireAll = %+v, %v; want acquired", r, err)
	}
	if err := other.Release(ctx(t), free); err != nil {
		t.Errorf("Release(e): %v", err)
	}

	// A request of a mode that cannot share its key refuses the set.
	if s.caps.Modes.Has(driver.Semaphore) {
		mixed := reqs(e, a)
		mixed[1].Mode, mixed[1].Limit = driver.Semaphore, 2
		if r, err := ma.AcquireAll(ctx(t), mixed); !errors.Is(err, driver.ErrModeMismatch) || r.Acquired {
			t.Errorf("AcquireAll(e, semaphore a) with a held exclusive = %+v, %v; want ErrModeMismatch", r, err)
		}
		if err := other.Release(ctx(t), mixed[0]); !errors.Is(err, driver.ErrNotOwner) {
			t.Errorf("Release(e) after a refused AcquireAll = %v; want ErrNotOwner (nothing taken)", err)
		}
	}

	// Readers share across AcquireAll calls.
	if s.caps.Modes.Has(driver.Shared) {
		r1, r2 := reqs(p+"{t}r1", p+"{t}r2"), reqs(p+"{t}r1", p+"{t}r2")
		for _, rs := range [][]driver.Request{r1, r2} {
			for i := range rs {
				rs[i].Mode = driver.Shared
			}
			if r, err := ma.AcquireAll(ctx(t), rs); err != nil || !r.Acquired {
				t.Errorf("AcquireAll of shared r1, r2 = %+v, %v; want acquired by both readers", r, err)
			}
		}
		for _, req := range append(r1, r2...) {
			if err := d.Release(ctx(t), req); err != nil {
				t.Errorf("Release(%s) of a reader: %v", req.Key, err)
			}
		}
	}

	for _, req := range first {
		if err := d.Release(ctx(t), req); err != nil {
			t.Errorf("Release(%s): %v", req.Key, err)
		}
	}
	s.assertNoResidue(t, p)
}
