package drivertest

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// The cases of this file check the modes a driver declares in
// Capabilities.Modes: read-write locks (Shared) and semaphores.

// needMode skips t unless the driver declares m.
func (s *suite) needMode(t *testing.T, m driver.Mode) {
	t.Helper()
	if !s.caps.Modes.Has(m) {
		t.Skipf("driver does not declare %s locks", m)
	}
}

// spyClient returns a Client over a new driver watched by a spy, closed when
// t ends.
func (s *suite) spyClient(t *testing.T) (*dlock.Client, *spy) {
	t.Helper()
	sp := newSpy(s.cfg.NewDriver(t))
	c, err := dlock.New(sp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, sp
}

// lockAsync starts Lock in a goroutine and returns the channel of its result.
func lockAsync(t *testing.T, c *dlock.Client, key string, opts ...dlock.LockOption) <-chan result {
	ch := make(chan result, 1)
	go func() {
		l, err := c.Lock(ctx(t), key, opts...)
		ch <- result{l, err}
	}()
	return ch
}

type result struct {
	l   *dlock.Lock
	err error
}

// mustRelease releases l and fails t if that fails.
func mustRelease(t *testing.T, l *dlock.Lock) {
	t.Helper()
	if err := l.Release(ctx(t)); err != nil {
		t.Errorf("Release(%q): %v", l.Key(), err)
	}
}

func (s *suite) testSharedReaders(t *testing.T) {
	s.needMode(t, driver.Shared)
	key := prefix(t) + "k"
	var readers []*dlock.Lock
	var last uint64
	for i := range 3 {
		l, err := s.client(t).TryLock(ctx(t), key, dlock.Shared(), dlock.WithTTL(longTTL), dlock.WithInfo("reader"))
		if err != nil {
			t.Fatalf("reader %d: TryLock(Shared) while %d readers hold: %v", i, i, err)
		}
		if l.Mode() != driver.Shared || l.Token() <= last {
			t.Errorf("reader %d: mode %v token %d; want shared and a token above %d", i, l.Mode(), l.Token(), last)
		}
		last = l.Token()
		readers = append(readers, l)
	}
	if l, ok := s.driver(t).(driver.Lister); ok {
		hs, err := l.List(ctx(t), key)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if len(hs) != 3 {
			t.Errorf("List = %+v; want the 3 readers", hs)
		}
		for i, h := range hs {
			if h.Mode != driver.Shared || h.Token != readers[i].Token() {
				t.Errorf("holder %d = %+v; want shared with token %d", i, h, readers[i].Token())
			}
		}
	}
	w := s.client(t)
	if _, err := w.TryLock(ctx(t), key, dlock.WithTTL(longTTL)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("writer's TryLock while readers hold: %v; want ErrNotAcquired", err)
	}
	for _, l := range readers {
		mustRelease(t, l)
	}
	wl, err := w.TryLock(ctx(t), key, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("writer's TryLock after the readers left: %v", err)
	}
	if wl.Token() <= last {
		t.Errorf("writer's token %d is not above the readers' %d", wl.Token(), last)
	}
	mustRelease(t, wl)
	s.assertNoResidue(t, key)
}

func (s *suite) testWriterExcludesReaders(t *testing.T) {
	s.needMode(t, driver.Shared)
	key := prefix(t) + "k"
	wl, err := s.client(t).Lock(ctx(t), key, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatal(err)
	}
	rc := s.client(t)
	if _, err := rc.TryLock(ctx(t), key, dlock.Shared(), dlock.WithTTL(longTTL)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("reader's TryLock while a writer holds: %v; want ErrNotAcquired", err)
	}
	if _, err := s.client(t).TryLock(ctx(t), key, dlock.WithTTL(longTTL)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("second writer's TryLock: %v; want ErrNotAcquired", err)
	}
	got := lockAsync(t, rc, key, dlock.Shared(), dlock.WithTTL(longTTL))
	mustRelease(t, wl)
	r := <-got
	if r.err != nil {
		t.Fatalf("waiting reader after the writer left: %v", r.err)
	}
	if r.l.Token() <= wl.Token() {
		t.Errorf("reader's token %d is not above the writer's %d", r.l.Token(), wl.Token())
	}
	mustRelease(t, r.l)
	s.assertNoResidue(t, key)
}

// testNoWriterStarvation checks writer preference: once a writer waits, new
// readers wait behind it.
func (s *suite) testNoWriterStarvation(t *testing.T) {
	s.needMode(t, driver.Shared)
	key := prefix(t) + "k"
	r1, err := s.client(t).Lock(ctx(t), key, dlock.Shared(), dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatal(err)
	}
	wc, sp := s.spyClient(t)
	wgot := lockAsync(t, wc, key, dlock.WithTTL(longTTL))
	<-sp.queued
	r2c := s.client(t)
	if l, err := r2c.TryLock(ctx(t), key, dlock.Shared(), dlock.WithTTL(longTTL)); !errors.Is(err, dlock.ErrNotAcquired) {
		if l != nil {
			l.Release(ctx(t))
		}
		t.Fatalf("new reader's TryLock while a writer waits: %v; want ErrNotAcquired (writer preference)", err)
	}
	mustRelease(t, r1)
	w := <-wgot
	if w.err != nil {
		t.Fatalf("waiting writer after the reader left: %v", w.err)
	}
	if _, err := r2c.TryLock(ctx(t), key, dlock.Shared(), dlock.WithTTL(longTTL)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("reader's TryLock while the writer holds: %v; want ErrNotAcquired", err)
	}
	mustRelease(t, w.l)
	r2, err := r2c.TryLock(ctx(t), key, dlock.Shared(), dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("reader's TryLock after the writer left: %v", err)
	}
	mustRelease(t, r2)
	s.assertNoResidue(t, key)
}

func (s *suite) testDowngrade(t *testing.T) {
	s.needMode(t, driver.Shared)
	key := prefix(t) + "k"
	wl, err := s.client(t).Lock(ctx(t), key, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatal(err)
	}
	rc, sp := s.spyClient(t)
	rgot := lockAsync(t, rc, key, dlock.Shared(), dlock.WithTTL(longTTL))
	<-sp.queued
	if err := wl.Downgrade(ctx(t)); err != nil {
		t.Fatalf("Downgrade: %v", err)
	}
	if wl.Mode() != driver.Shared || wl.Cause() != nil {
		t.Fatalf("after Downgrade: mode %v, err %v; want a held shared lock", wl.Mode(), wl.Cause())
	}
	r := <-rgot
	if r.err != nil {
		t.Fatalf("waiting reader after the downgrade: %v", r.err)
	}
	if _, err := s.client(t).TryLock(ctx(t), key, dlock.WithTTL(longTTL)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("writer's TryLock while the downgraded lock and a reader hold: %v; want ErrNotAcquired", err)
	}
	if l, ok := s.driver(t).(driver.Lister); ok {
		hs, err := l.List(ctx(t), key)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if len(hs) != 2 || hs[0].Token != wl.Token() || hs[0].Mode != driver.Shared {
			t.Errorf("List = %+v; want the downgraded lock (token %d, shared) and the reader", hs, wl.Token())
		}
	}
	if err := wl.Downgrade(ctx(t)); !errors.Is(err, dlock.ErrModeMismatch) {
		t.Errorf("Downgrade of a read lock: %v; want ErrModeMismatch", err)
	}
	if err := wl.Refresh(ctx(t)); err != nil {
		t.Errorf("Refresh after Downgrade: %v", err)
	}
	mustRelease(t, wl)
	mustRelease(t, r.l)
	s.assertNoResidue(t, key)
}

func (s *suite) testUpgradeRefused(t *testing.T) {
	s.needMode(t, driver.Shared)
	key := prefix(t) + "k"
	c := s.client(t)
	rl, err := c.Lock(ctx(t), key, dlock.Shared(), dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(rl.Context(), key, dlock.WithTTL(longTTL)); !errors.Is(err, dlock.ErrUpgrade) {
		t.Fatalf("write Lock with the read lock's context: %v; want ErrUpgrade", err)
	}
	if rl.Cause() != nil {
		t.Fatalf("the read lock ended after the refused upgrade: %v", rl.Cause())
	}
	// A driver asked directly refuses too, and keeps the read hold.
	d := s.driver(t)
	req := s.request(key)
	req.Mode = driver.Shared
	if res, err := d.Acquire(ctx(t), req); err != nil || !res.Acquired {
		t.Fatalf("driver: shared Acquire = %+v, %v", res, err)
	}
	req.Mode = driver.Exclusive
	if res, err := d.Acquire(ctx(t), req); !errors.Is(err, driver.ErrModeMismatch) {
		t.Errorf("driver: exclusive Acquire by a shared holder = %+v, %v; want ErrModeMismatch", res, err)
	}
	if err := d.Release(ctx(t), req); err != nil {
		t.Errorf("driver: Release of the shared hold: %v", err)
	}
	mustRelease(t, rl)
	// So does it once an exclusive hold was downgraded: the hold is shared.
	req = s.request(key)
	for _, m := range []driver.Mode{driver.Exclusive, driver.Shared} {
		req.Mode = m
		if res, err := d.Acquire(ctx(t), req); err != nil || !res.Acquired {
			t.Fatalf("driver: %s Acquire (a write hold, then its downgrade) = %+v, %v", m, res, err)
		}
	}
	req.Mode = driver.Exclusive
	if res, err := d.Acquire(ctx(t), req); !errors.Is(err, driver.ErrModeMismatch) {
		t.Errorf("driver: exclusive Acquire by the owner of a downgraded hold = %+v, %v; want ErrModeMismatch", res, err)
	}
	if err := d.Release(ctx(t), req); err != nil {
		t.Errorf("driver: Release of the downgraded hold: %v", err)
	}
	s.assertNoResidue(t, key)
}

func (s *suite) testSemaphoreLimit(t *testing.T) {
	s.needMode(t, driver.Semaphore)
	key := prefix(t) + "k"
	const limit = 3
	var held []*dlock.Lock
	for i := range limit + 2 {
		l, err := s.client(t).TryLock(ctx(t), key, dlock.WithLimit(limit), dlock.WithTTL(longTTL))
		switch {
		case i < limit && err != nil:
			t.Fatalf("permit %d of %d: %v", i+1, limit, err)
		case i >= limit && !errors.Is(err, dlock.ErrNotAcquired):
			t.Fatalf("TryLock with all %d permits taken: %v; want ErrNotAcquired", limit, err)
		case err == nil:
			if l.Mode() != driver.Semaphore || l.Limit() != limit {
				t.Errorf("permit: mode %v limit %d; want semaphore, %d", l.Mode(), l.Limit(), limit)
			}
			held = append(held, l)
		}
	}
	if l, ok := s.driver(t).(driver.Lister); ok {
		hs, err := l.List(ctx(t), key)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if len(hs) != limit || hs[0].Mode != driver.Semaphore || hs[0].Limit != limit {
			t.Errorf("List = %+v; want %d semaphore holders with limit %d", hs, limit, limit)
		}
	}
	for _, l := range held {
		mustRelease(t, l)
	}

	// Under contention the number of holders never exceeds the limit.
	const clients, goroutines, rounds, n = 3, 3, 5, 2
	var (
		mu      sync.Mutex
		inside  int
		most    int
		wg      sync.WaitGroup
		lastTok = map[uint64]bool{}
	)
	for range clients {
		c := s.client(t)
		for range goroutines {
			wg.Go(func() {
				for range rounds {
					l, err := c.Lock(ctx(t), key, dlock.WithLimit(n), dlock.WithTTL(longTTL))
					if err != nil {
						t.Errorf("Lock(WithLimit(%d)): %v", n, err)
						return
					}
					mu.Lock()
					inside++
					most = max(most, inside)
					if lastTok[l.Token()] {
						t.Errorf("token %d handed out twice", l.Token())
					}
					lastTok[l.Token()] = true
					mu.Unlock()
					mu.Lock()
					inside--
					mu.Unlock()
					mustRelease(t, l)
				}
			})
		}
	}
	wg.Wait()
	if most > n {
		t.Errorf("%d holders at once; want at most %d", most, n)
	}
	s.assertNoResidue(t, key)
}

func (s *suite) testSemaphorePermitExpires(t *testing.T) {
	s.needMode(t, driver.Semaphore)
	key := prefix(t) + "k"
	long, err := s.client(t).Lock(ctx(t), key, dlock.WithLimit(2), dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.client(t).Lock(ctx(t), key, dlock.WithLimit(2), dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatal(err)
	}
	c := s.client(t)
	if _, err := c.TryLock(ctx(t), key, dlock.WithLimit(2), dlock.WithTTL(longTTL)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock with both permits taken: %v; want ErrNotAcquired", err)
	}
	mustRelease(t, other)
	// A permit that is not renewed (its lease may end at any moment after
	// this, so nothing is asserted while it lasts) comes back when its
	// lease ends; the other stays taken.
	short, err := s.client(t).Lock(ctx(t), key, dlock.WithLimit(2), dlock.WithTTL(s.shortTTL()), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Lock(ctx(t), key, dlock.WithLimit(2), dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("Lock after a permit's lease ran out: %v", err)
	}
	if err := waitDone(t, short, "expired permit"); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("expired permit's cause = %v; want ErrLost", err)
	}
	if _, err := s.client(t).TryLock(ctx(t), key, dlock.WithLimit(2), dlock.WithTTL(longTTL)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock with both permits taken again: %v; want ErrNotAcquired", err)
	}
	mustRelease(t, l)
	mustRelease(t, long)
	s.assertNoResidue(t, key)
}

func (s *suite) testModeMismatch(t *testing.T) {
	s.needMode(t, driver.Semaphore)
	key := prefix(t) + "k"
	sem, err := s.client(t).Lock(ctx(t), key, dlock.WithLimit(2), dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatal(err)
	}
	c := s.client(t)
	try := map[string][]dlock.LockOption{
		"another limit": {dlock.WithLimit(3)},
		"exclusive":     nil,
	}
	if s.caps.Modes.Has(driver.Shared) {
		try["shared"] = []dlock.LockOption{dlock.Shared()}
	}
	for name, opts := range try {
		_, err := c.TryLock(ctx(t), key, append(opts, dlock.WithTTL(longTTL))...)
		if !errors.Is(err, dlock.ErrModeMismatch) {
			t.Errorf("%s on a semaphore with limit 2: %v; want ErrModeMismatch", name, err)
		}
		namesOnce(t, name+" on a semaphore with limit 2", err, key)
	}
	mustRelease(t, sem)
	ex, err := s.client(t).Lock(ctx(t), key, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.TryLock(ctx(t), key, dlock.WithLimit(2), dlock.WithTTL(longTTL))
	if !errors.Is(err, dlock.ErrModeMismatch) {
		t.Errorf("semaphore on a held mutex: %v; want ErrModeMismatch", err)
	}
	namesOnce(t, "semaphore on a held mutex", err, key)
	if ex.Cause() != nil {
		t.Errorf("the mutex ended: %v", ex.Cause())
	}
	mustRelease(t, ex)
	s.assertNoResidue(t, key)
}

// namesOnce checks that err's message names key once, as dlock promises
// however many layers (dlock, the driver, its store) wrapped it.
func namesOnce(t *testing.T, what string, err error, key string) {
	t.Helper()
	if err != nil && strings.Count(err.Error(), strconv.Quote(key)) != 1 {
		t.Errorf("%s: %q does not name the key once", what, err)
	}
}
