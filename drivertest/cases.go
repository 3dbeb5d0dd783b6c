package drivertest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// longTTL is the lease of locks that must not expire during a test.
const longTTL = 5 * time.Minute

func (s *suite) testMutualExclusion(t *testing.T) {
	key := prefix(t) + "k"
	const clients, goroutines, rounds = 3, 4, 8
	var (
		mu         sync.Mutex
		inside     int
		lastToken  uint64
		count      int
		violations []string
		wg         sync.WaitGroup
	)
	var cs []*dlock.Client
	for range clients {
		c := s.client(t)
		cs = append(cs, c)
		for range goroutines {
			wg.Go(func() {
				for range rounds {
					l, err := c.Lock(ctx(t), key, dlock.WithTTL(longTTL), dlock.WithBackoff(time.Millisecond, 20*time.Millisecond))
					if err != nil {
						t.Errorf("Lock: %v", err)
						return
					}
					mu.Lock()
					inside++
					if inside != 1 {
						violations = append(violations, fmt.Sprintf("%d holders at once", inside))
					}
					if l.Token() <= lastToken {
						violations = append(violations, fmt.Sprintf("token %d after token %d", l.Token(), lastToken))
					}
					lastToken = l.Token()
					mu.Unlock()
					time.Sleep(time.Millisecond) // widen the critical section
					mu.Lock()
					inside--
					count++
					mu.Unlock()
					if err := l.Release(ctx(t)); err != nil {
						t.Errorf("Release: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	for _, v := range violations {
		t.Error(v)
	}
	if want := clients * goroutines * rounds; count != want {
		t.Errorf("%d critical sections ran; want %d", count, want)
	}
	// A driver may finish a release in the background (a quorum's node
	// that answered after the majority did); Close waits for that work.
	for _, c := range cs {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	s.assertNoResidue(t, key)
}

func (s *suite) testTryLockHeld(t *testing.T) {
	key := prefix(t) + "k"
	a, b := s.client(t), s.client(t)
	l, err := a.TryLock(ctx(t), key, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("TryLock on a free key: %v", err)
	}
	for name, c := range map[string]*dlock.Client{"other client": b, "same client": a} {
		_, err := c.TryLock(ctx(t), key, dlock.WithTTL(longTTL))
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryLock on a held key (%s) = %v; want ErrNotAcquired", name, err)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			t.Errorf("TryLock on a held key (%s) = %v; want no context error", name, err)
		}
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	l2, err := b.TryLock(ctx(t), key, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("TryLock after release: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after token %d; want it greater", l2.Token(), l.Token())
	}
	if err := l2.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	s.assertNoResidue(t, key)
}

func (s *suite) testExpiryAndTakeover(t *testing.T) {
	key := prefix(t) + "k"
	a, b := s.client(t), s.client(t)
	la, err := a.Lock(ctx(t), key, dlock.WithTTL(s.shortTTL()), dlock.WithoutRenewal())
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	lb, err := b.Lock(ctx(t), key, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("Lock waiting for an expired lease: %v", err)
	}
	if lb.Token() <= la.Token() {
		t.Errorf("takeover token %d <= expired holder's %d", lb.Token(), la.Token())
	}
	if cause := waitDone(t, la, "expired holder"); !errors.Is(cause, dlock.ErrLost) {
		t.Errorf("expired holder's cause = %v; want ErrLost", cause)
	}
	if err := la.Release(ctx(t)); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Release by the expired holder = %v; want ErrLost", err)
	}
	if err := lb.Refresh(ctx(t)); err != nil {
		t.Errorf("new holder's Refresh after the old holder's Release = %v; want nil", err)
	}
	if err := lb.Release(ctx(t)); err != nil {
		t.Errorf("Release by the new holder: %v", err)
	}
	s.assertNoResidue(t, key)
}

func (s *suite) testRefreshExtends(t *testing.T) {
	key := prefix(t) + "k"
	a, b := s.client(t), s.client(t)
	// A lease of 2s at least: each refresh below must come back within
	// three quarters of it, which a loaded machine (SQLite's busy handler
	// while other tests run) may not manage with less.
	ttl := max(s.shortTTL(), 2*time.Second)
	l, err := a.Lock(ctx(t), key, dlock.WithTTL(ttl), dlock.WithoutRenewal())
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	// Refresh by hand for twice the lease; the lock must survive it.
	for range 8 {
		time.Sleep(ttl / 4)
		before := l.ValidUntil()
		if err := l.Refresh(ctx(t)); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
		if !l.ValidUntil().After(before) {
			t.Errorf("ValidUntil %v did not move past %v on Refresh", l.ValidUntil(), before)
		}
	}
	if _, err := b.TryLock(ctx(t), key); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock on a lock refreshed past its first lease = %v; want ErrNotAcquired", err)
	}
	if err := l.Cause(); err != nil {
		t.Errorf("refreshed lock Err = %v; want nil", err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Errorf("Release: %v", err)
	}

	// Automatic renewal keeps a lock for many leases. (A lease of 2s at
	// least leaves a renewal, sent every third of it, room on a loaded
	// machine: SQLite's busy handler alone can hold one back for 100ms
	// at a time.)
	ttl = max(ttl, 2*time.Second)
	l, err = a.Lock(ctx(t), key, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	time.Sleep(2 * ttl)
	if _, err := b.TryLock(ctx(t), key); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock on an auto-renewed lock = %v; want ErrNotAcquired", err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Errorf("Release of an auto-renewed lock: %v", err)
	}
	s.assertNoResidue(t, key)
}

func (s *suite) testAfterLoss(t *testing.T) {
	key := prefix(t) + "k"
	a, b := s.client(t), s.client(t)
	la, err := a.Lock(ctx(t), key, dlock.WithTTL(s.shortTTL()), dlock.WithoutRenewal())
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if cause := waitDone(t, la, "lock without renewal"); !errors.Is(cause, dlock.ErrLost) {
		t.Fatalf("cause = %v; want ErrLost", cause)
	}
	if err := la.Refresh(ctx(t)); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Refresh after loss = %v; want ErrLost", err)
	}
	if err := la.Cause(); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Err after loss = %v; want ErrLost", err)
	}
	lb, err := b.Lock(ctx(t), key, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("Lock after the holder's loss: %v", err)
	}
	if lb.Token() <= la.Token() {
		t.Errorf("token %d after lost token %d; want it greater", lb.Token(), la.Token())
	}
	// The lost handle cannot disturb the new holder.
	if err := la.Release(ctx(t)); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Release after loss = %v; want ErrLost", err)
	}
	if err := la.Refresh(ctx(t)); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Refresh after loss = %v; want ErrLost", err)
	}
	if _, err := a.TryLock(ctx(t), key); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock while the new holder holds = %v; want ErrNotAcquired", err)
	}
	if err := lb.Release(ctx(t)); err != nil {
		t.Errorf("new holder's Release = %v; want nil", err)
	}
	s.assertNoResidue(t, key)
}

func (s *suite) request(key string) driver.Request {
	return driver.Request{Key: key, Owner: rand.Text(), TTL: longTTL, Mode: driver.Exclusive, Info: "drivertest"}
}

func (s *suite) testForeignOwner(t *testing.T) {
	key := prefix(t) + "k"
	d, d2 := s.driver(t), s.driver(t)
	req := s.request(key)
	res, err := d.Acquire(ctx(t), req)
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire on a free key = %+v, %v", res, err)
	}
	foreign := req
	foreign.Owner = rand.Text()
	for _, dd := range []driver.Driver{d, d2} {
		if err := dd.Release(ctx(t), foreign); !errors.Is(err, driver.ErrNotOwner) {
			t.Errorf("Release by a foreign owner = %v; want ErrNotOwner", err)
		}
		if err := dd.Refresh(ctx(t), foreign); !errors.Is(err, driver.ErrNotOwner) {
			t.Errorf("Refresh by a foreign owner = %v; want ErrNotOwner", err)
		}
		fres, err := dd.Acquire(ctx(t), foreign)
		if err != nil || fres.Acquired {
			t.Errorf("Acquire by a foreign owner = %+v, %v; want not acquired", fres, err)
		}
		if fres.RetryAfter < 0 || fres.RetryAfter > req.TTL {
			t.Errorf("RetryAfter = %v; want within [0, %v]", fres.RetryAfter, req.TTL)
		}
	}
	// The owner still holds the lock, with the same token.
	if err := d2.Refresh(ctx(t), req); err != nil {
		t.Errorf("owner's Refresh after foreign attempts = %v; want nil", err)
	}
	again, err := d.Acquire(ctx(t), req)
	if err != nil || !again.Acquired || again.Token != res.Token {
		t.Errorf("owner's repeated Acquire = %+v, %v; want acquired with token %d", again, err, res.Token)
	}
	if err := d.Release(ctx(t), req); err != nil {
		t.Errorf("owner's Release = %v", err)
	}
	if err := d.Release(ctx(t), req); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("second Release = %v; want ErrNotOwner", err)
	}
	s.assertNoResidue(t, key)
}

func (s *suite) testSameOwnerAcquire(t *testing.T) {
	key := prefix(t) + "k"
	d := s.driver(t)
	req := s.request(key)
	first, err := d.Acquire(ctx(t), req)
	if err != nil || !first.Acquired {
		t.Fatalf("Acquire = %+v, %v", first, err)
	}
	second, err := s.driver(t).Acquire(ctx(t), req)
	if err != nil || !second.Acquired || second.Token != first.Token {
		t.Errorf("repeated Acquire by the owner = %+v, %v; want acquired with token %d", second, err, first.Token)
	}
	if err := d.Release(ctx(t), req); err != nil {
		t.Errorf("Release = %v", err)
	}
	s.assertNoResidue(t, key)
}

func (s *suite) testFencingTokens(t *testing.T) {
	key := prefix(t) + "k"
	clients := []*dlock.Client{s.client(t), s.client(t), s.client(t)}
	var last uint64
	check := func(l *dlock.Lock, how string) {
		t.Helper()
		if l.Token() <= last {
			t.Errorf("%s: token %d after %d; want strictly greater", how, l.Token(), last)
		}
		last = l.Token()
	}
	for i := range 6 {
		l, err := clients[i%3].Lock(ctx(t), key, dlock.WithTTL(longTTL))
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
		check(l, "after release")
		if err := l.Release(ctx(t)); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	for i := range 2 {
		l, err := clients[i].Lock(ctx(t), key, dlock.WithTTL(s.shortTTL()), dlock.WithoutRenewal())
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
		check(l, "after expiry")
		waitDone(t, l, "lock left to expire")
	}
	l, err := clients[2].Lock(ctx(t), key, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	check(l, "after expiry")
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	s.assertNoResidue(t, key)
}

func (s *suite) testLostSignal(t *testing.T) {
	key := prefix(t) + "k"
	c := s.client(t)
	// Do's context ends when the lock is lost, and Do reports the loss.
	var fnCause error
	err := c.Do(ctx(t), key, func(ctx context.Context, l *dlock.Lock) error {
		<-ctx.Done()
		fnCause = context.Cause(ctx)
		return nil
	}, dlock.WithTTL(s.shortTTL()), dlock.WithoutRenewal())
	if !errors.Is(fnCause, dlock.ErrLost) {
		t.Errorf("Do's context cause = %v; want ErrLost", fnCause)
	}
	if !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Do = %v; want ErrLost", err)
	}

	// Renewal notices when the store no longer has the lease.
	f, ok := s.driver(t).(driver.ForceReleaser)
	if !ok {
		return
	}
	// A lease long enough that a renewal delayed on a loaded machine does
	// not let it run out before the forced release.
	key = prefix(t) + "k2"
	l, err := c.Lock(ctx(t), key, dlock.WithTTL(max(2*time.Second, s.shortTTL())))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if n, err := f.ForceRelease(ctx(t), key); err != nil || n != 1 {
		t.Fatalf("ForceRelease = %d, %v; want 1", n, err)
	}
	if cause := waitDone(t, l, "force-released lock with renewal"); !errors.Is(cause, dlock.ErrLost) {
		t.Errorf("cause = %v; want ErrLost", cause)
	}
	s.assertNoResidue(t, key)
}

func (s *suite) testCancelledWait(t *testing.T) {
	key := prefix(t) + "k"
	a, b := s.client(t), s.client(t)
	l, err := a.Lock(ctx(t), key, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	for name, c := range map[string]*dlock.Client{"other client": b, "same client": a} {
		wctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := c.Lock(wctx, key)
		cancel()
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Lock with a deadline on a held key (%s) = %v; want ErrNotAcquired and DeadlineExceeded", name, err)
		}
		wctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		_, err = c.Lock(wctx, key)
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Errorf("Lock with a cancelled context on a held key (%s) = %v; want ErrNotAcquired and Canceled", name, err)
		}
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	s.assertNoResidue(t, key)
	// The abandoned waits left nothing that blocks the key.
	l, err = b.TryLock(ctx(t), key)
	if err != nil {
		t.Fatalf("TryLock after abandoned waits: %v", err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// testNotification checks that a waiter is woken by the change that admits
// it: the release of an exclusive lock ahead of a writer or a reader, the
// downgrade of a write lock ahead of a reader, the release of a permit ahead
// of a permit. Polling would take minutes: only a notification can wake the
// waiter before its deadline.
func (s *suite) testNotification(t *testing.T) {
	n, ok := s.driver(t).(driver.Notifier)
	if !ok {
		t.Skip("driver does not implement driver.Notifier")
	}
	sub, err := n.Subscribe(ctx(t), s.request(prefix(t)+"k"))
	if errors.Is(err, driver.ErrUnsupported) {
		t.Skip("driver.Notifier reports ErrUnsupported")
	}
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	sub.Close()
	for _, c := range []struct {
		name      string
		mode      driver.Mode // the waiter's
		downgrade bool        // the holder downgrades rather than releases
	}{
		{"Exclusive", driver.Exclusive, false},
		{"Shared", driver.Shared, false},
		{"SharedAfterDowngrade", driver.Shared, true},
		{"Semaphore", driver.Semaphore, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.needMode(t, c.mode)
			key := prefix(t) + "k"
			opts := []dlock.LockOption{dlock.WithTTL(longTTL)}
			if c.mode == driver.Semaphore {
				opts = append(opts, dlock.WithLimit(1))
			}
			l, err := s.client(t).Lock(ctx(t), key, opts...)
			if err != nil {
				t.Fatalf("Lock: %v", err)
			}
			if c.mode == driver.Shared {
				opts = append(opts, dlock.Shared())
			}
			b, sp := s.spyClient(t)
			got := make(chan error, 1)
			go func() {
				wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				lb, err := b.Lock(wctx, key, append(opts, dlock.WithBackoff(time.Hour, time.Hour))...)
				if err == nil {
					err = lb.Release(context.Background())
				}
				got <- err
			}()
			<-sp.waiting
			if c.downgrade {
				err = l.Downgrade(ctx(t))
			} else {
				err = l.Release(ctx(t))
			}
			if err != nil {
				t.Fatalf("admitting the waiter: %v", err)
			}
			if err := <-got; err != nil {
				t.Errorf("waiter not woken: %v", err)
			}
			if c.downgrade {
				mustRelease(t, l)
			}
			s.assertNoResidue(t, key)
		})
	}
}

// spy forwards to a driver and closes waiting once an Acquire has failed
// after a subscription was made: the waiter is then asleep on its
// subscription. It closes queued once an Acquire with Request.Queue set has
// failed: the waiter then has its place in a FIFO driver's queue.
type spy struct {
	driver.Driver
	waiting    chan struct{} // closed once the waiter sleeps
	queued     chan struct{} // closed once the waiter is queued
	mu         sync.Mutex
	subscribed bool
	signalled  bool
}

func newSpy(d driver.Driver) *spy {
	return &spy{Driver: d, waiting: make(chan struct{}), queued: make(chan struct{})}
}

func (s *spy) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	res, err := s.Driver.Acquire(ctx, req)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && !res.Acquired && s.subscribed && !s.signalled {
		close(s.waiting)
		s.signalled = true
	}
	if err == nil && !res.Acquired && req.Queue {
		select {
		case <-s.queued:
		default:
			close(s.queued)
		}
	}
	return res, err
}

// Subscribe forwards to the driver's Subscribe, or reports ErrUnsupported
// (which makes package dlock poll) if the driver is no Notifier.
func (s *spy) Subscribe(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	n, ok := s.Driver.(driver.Notifier)
	if !ok {
		return nil, driver.ErrUnsupported
	}
	sub, err := n.Subscribe(ctx, req)
	s.mu.Lock()
	s.subscribed = err == nil
	s.mu.Unlock()
	return sub, err
}

// testFIFO checks that waiters on separate clients acquire in the order they
// started waiting, on drivers that declare FIFO.
func (s *suite) testFIFO(t *testing.T) {
	if !s.caps.FIFO {
		t.Skip("driver does not declare FIFO")
	}
	key := prefix(t) + "k"
	l, err := s.client(t).Lock(ctx(t), key, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	const waiters = 5
	order := make(chan int, waiters)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range waiters {
		sp := newSpy(s.cfg.NewDriver(t))
		c, err := dlock.New(sp)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		wg.Go(func() {
			l, err := c.Lock(ctx(t), key, dlock.WithTTL(longTTL))
			if err != nil {
				t.Errorf("waiter %d: Lock: %v", i, err)
				return
			}
			order <- i
			if err := l.Release(ctx(t)); err != nil {
				t.Errorf("waiter %d: Release: %v", i, err)
			}
		})
		// The next waiter starts only once this one has its place.
		select {
		case <-sp.queued:
		case <-time.After(waitTimeout):
			t.Fatalf("waiter %d never queued (no Acquire with Request.Queue failed)", i)
		}
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wg.Wait()
	close(order)
	want := 0
	for i := range order {
		if i != want {
			t.Errorf("waiter %d acquired in place %d; want waiters in the order they queued", i, want)
		}
		want++
	}
	if want != waiters {
		t.Errorf("%d waiters acquired; want %d", want, waiters)
	}
	s.assertNoResidue(t, key)
}

// testMultiLock checks that LockAll takes every key or none: a failed or
// cancelled multi-lock leaves no partial hold behind.
func (s *suite) testMultiLock(t *testing.T) {
	p := prefix(t)
	a, b, c := p+"a", p+"b", p+"c"
	holder, client := s.client(t), s.client(t)
	hb, err := holder.Lock(ctx(t), b, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("Lock(b): %v", err)
	}
	if _, err := client.TryLockAll(ctx(t), []string{c, a, b}, dlock.WithTTL(longTTL)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLockAll with b held: %v; want ErrNotAcquired", err)
	}
	s.assertNoResidue(t, a)
	s.assertNoResidue(t, c)
	wctx, cancel := context.WithTimeout(ctx(t), 200*time.Millisecond)
	_, err = client.LockAll(wctx, []string{c, b, a}, dlock.WithTTL(longTTL))
	cancel()
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockAll with b held until the deadline: %v; want ErrNotAcquired and DeadlineExceeded", err)
	}
	s.assertNoResidue(t, a)
	s.assertNoResidue(t, c)
	if err := hb.Release(ctx(t)); err != nil {
		t.Fatalf("Release(b): %v", err)
	}
	m, err := client.LockAll(ctx(t), []string{b, c, a}, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("LockAll of free keys: %v", err)
	}
	if _, err := holder.TryLock(ctx(t), c, dlock.WithTTL(longTTL)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock(c) while the multi-lock holds it: %v; want ErrNotAcquired", err)
	}
	if err := m.Release(ctx(t)); err != nil {
		t.Fatalf("MultiLock.Release: %v", err)
	}
	s.assertNoResidue(t, p)
}

func (s *suite) testReleaseAndClose(t *testing.T) {
	key := prefix(t) + "k"
	a, b := s.client(t), s.client(t)
	l, err := a.Lock(ctx(t), key, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := l.Release(ctx(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Release = %v; want ErrNotHeld", err)
	}
	if err := l.Refresh(ctx(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Refresh after Release = %v; want ErrNotHeld", err)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrNotHeld) {
		t.Errorf("context cause after Release = %v; want ErrNotHeld", cause)
	}

	// Close releases held locks and ends their contexts.
	l, err = a.Lock(ctx(t), key, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrClosed) {
		t.Errorf("context cause after Close = %v; want ErrClosed", cause)
	}
	lb, err := b.TryLock(ctx(t), key)
	if err != nil {
		t.Fatalf("TryLock after the holder's client closed: %v", err)
	}
	if err := lb.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// Every use after Close reports ErrClosed.
	uses := map[string]error{
		"Lock":    func() error { _, err := a.Lock(ctx(t), key); return err }(),
		"TryLock": func() error { _, err := a.TryLock(ctx(t), key); return err }(),
		"Do": a.Do(ctx(t), key, func(context.Context, *dlock.Lock) error {
			t.Error("Do ran fn on a closed client")
			return nil
		}),
		"List":         func() error { _, err := a.List(ctx(t), key); return err }(),
		"ForceRelease": func() error { _, err := a.ForceRelease(ctx(t), key); return err }(),
		"Lock.Release": l.Release(ctx(t)),
		"Lock.Refresh": l.Refresh(ctx(t)),
	}
	for name, err := range uses {
		if !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("%s after Close = %v; want ErrClosed", name, err)
		}
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close = %v; want nil", err)
	}
	s.assertNoResidue(t, key)
}

func (s *suite) testListAndForceRelease(t *testing.T) {
	key := prefix(t) + "k"
	a, b := s.client(t), s.client(t)
	l, err := a.Lock(ctx(t), key, dlock.WithTTL(longTTL), dlock.WithInfo("drivertest-holder"))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	hs, err := b.List(ctx(t), key[:len(key)-1])
	switch {
	case errors.Is(err, dlock.ErrUnsupported):
		if _, ok := s.driver(t).(driver.Lister); ok {
			t.Errorf("List = %v, but the driver implements driver.Lister", err)
		}
	case err != nil:
		t.Errorf("List: %v", err)
	case len(hs) != 1:
		t.Errorf("List = %+v; want exactly the one holder", hs)
	default:
		h := hs[0]
		if h.Key != key || h.Token != l.Token() || h.Info != "drivertest-holder" || h.Mode != driver.Exclusive || h.Owner != l.OwnerID() {
			t.Errorf("List = %+v; want key %q, token %d, info %q, exclusive, owner %s", h, key, l.Token(), "drivertest-holder", l.OwnerID())
		}
		if h.TTL <= 0 || h.TTL > longTTL {
			t.Errorf("listed TTL = %v; want within (0, %v]", h.TTL, longTTL)
		}
	}

	n, err := b.ForceRelease(ctx(t), key)
	if errors.Is(err, dlock.ErrUnsupported) {
		if _, ok := s.driver(t).(driver.ForceReleaser); ok {
			t.Errorf("ForceRelease = %v, but the driver implements driver.ForceReleaser", err)
		}
		if err := l.Release(ctx(t)); err != nil {
			t.Errorf("Release: %v", err)
		}
		s.assertNoResidue(t, key)
		return
	}
	if err != nil || n != 1 {
		t.Fatalf("ForceRelease = %d, %v; want 1", n, err)
	}
	lb, err := b.TryLock(ctx(t), key, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("TryLock after ForceRelease: %v", err)
	}
	if lb.Token() <= l.Token() {
		t.Errorf("token %d after force-released token %d", lb.Token(), l.Token())
	}
	if err := l.Refresh(ctx(t)); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Refresh by the force-released holder = %v; want ErrLost", err)
	}
	if err := lb.Release(ctx(t)); err != nil {
		t.Errorf("Release: %v", err)
	}
	if n, err := b.ForceRelease(ctx(t), key); err != nil || n != 0 {
		t.Errorf("ForceRelease of a free key = %d, %v; want 0, nil", n, err)
	}
	s.assertNoResidue(t, key)
}

func (s *suite) testUnsupportedModes(t *testing.T) {
	key := prefix(t) + "k"
	d := s.driver(t)
	for _, m := range []driver.Mode{driver.Shared, driver.Semaphore} {
		if s.caps.Modes.Has(m) {
			continue
		}
		req := s.request(key)
		req.Mode, req.Limit = m, 2
		if res, err := d.Acquire(ctx(t), req); !errors.Is(err, driver.ErrUnsupported) {
			t.Errorf("Acquire in undeclared mode %v = %+v, %v; want ErrUnsupported", m, res, err)
		}
	}
	s.assertNoResidue(t, key)
}

func (s *suite) testBadInput(t *testing.T) {
	p := prefix(t)
	c := s.client(t)
	caps := c.Capabilities()
	var nilCtx context.Context
	lockErr := func(key string, opts ...dlock.LockOption) error {
		_, err := c.TryLock(ctx(t), key, opts...)
		return err
	}
	type badCase struct {
		name, arg string
		err       error
	}
	cases := []badCase{
		{"empty key", "key", lockErr("")},
		{"key over the limit", "key", lockErr(p + strings.Repeat("k", caps.MaxKeyLen))},
		{"key not UTF-8", "key", lockErr(p + "\xff")},
		{"key with NUL", "key", lockErr(p + "a\x00b")},
		{"zero TTL", "ttl", lockErr(p+"k", dlock.WithTTL(0))},
		{"negative TTL", "ttl", lockErr(p+"k", dlock.WithTTL(-time.Second))},
		{"TTL below minimum", "ttl", lockErr(p+"k", dlock.WithTTL(caps.MinTTL-1))},
		{"negative lock delay", "lock delay", lockErr(p+"k", dlock.WithLockDelay(-time.Second))},
		{"lock delay past the maximum lease", "lock delay", lockErr(p+"k", dlock.WithTTL(caps.MaxTTL/2), dlock.WithLockDelay(caps.MaxTTL))},
		{"zero backoff", "backoff min", lockErr(p+"k", dlock.WithBackoff(0, time.Second))},
		{"backoff out of order", "backoff max", lockErr(p+"k", dlock.WithBackoff(time.Second, time.Millisecond))},
		{"nil ctx Lock", "ctx", func() error { _, err := c.Lock(nilCtx, p+"k"); return err }()},
		{"nil ctx TryLock", "ctx", func() error { _, err := c.TryLock(nilCtx, p+"k"); return err }()},
		{"nil ctx List", "ctx", func() error { _, err := c.List(nilCtx, p); return err }()},
		{"nil ctx ForceRelease", "ctx", func() error { _, err := c.ForceRelease(nilCtx, p+"k"); return err }()},
		{"nil fn Do", "fn", c.Do(ctx(t), p+"k", nil)},
	}
	cases = append(cases,
		badCase{"TTL above maximum", "ttl", lockErr(p+"k", dlock.WithTTL(max(caps.MaxTTL, dlock.DefaultMaxTTL)+time.Second))},
		badCase{"TTL of 100000h", "ttl", lockErr(p+"k", dlock.WithTTL(100000*time.Hour))},
		badCase{"info over the limit", "info", lockErr(p+"k", dlock.WithInfo(strings.Repeat("i", dlock.MaxInfoLen+1)))},
		badCase{"info of 1 MiB", "info", lockErr(p+"k", dlock.WithInfo(strings.Repeat("i", 1<<20)))},
		badCase{"info not UTF-8", "info", lockErr(p+"k", dlock.WithInfo("\xff"))},
		badCase{"info with NUL", "info", lockErr(p+"k", dlock.WithInfo("a\x00b"))},
		badCase{"client info over the limit", "info", func() error {
			_, err := dlock.New(s.driver(t), dlock.WithOwnerInfo(strings.Repeat("i", dlock.MaxInfoLen+1)))
			return err
		}()},
	)
	if caps.Modes.Has(driver.Semaphore) {
		cases = append(cases,
			badCase{"limit 2^31", "limit", lockErr(p+"k", dlock.WithLimit(1<<31))},
			badCase{"limit above maximum", "limit", lockErr(p+"k", dlock.WithLimit(caps.MaxLimit+1))},
		)
	}
	l, err := c.Lock(ctx(t), p+"held", dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	cases = append(cases,
		badCase{"nil ctx Release", "ctx", l.Release(nilCtx)},
		badCase{"nil ctx Refresh", "ctx", l.Refresh(nilCtx)},
		badCase{"nil ctx ReleaseAfter", "ctx", l.ReleaseAfter(nilCtx, time.Second)},
		badCase{"ReleaseAfter(MaxInt64)", "d", l.ReleaseAfter(ctx(t), math.MaxInt64)},
		badCase{"ReleaseAfter above maximum", "d", l.ReleaseAfter(ctx(t), caps.MaxTTL+time.Second)},
	)
	for _, tc := range cases {
		var ae *dlock.ArgError
		switch {
		case !errors.Is(tc.err, dlock.ErrInvalidArgument):
			t.Errorf("%s: err = %v; want ErrInvalidArgument", tc.name, tc.err)
		case !errors.As(tc.err, &ae) || ae.Name != tc.arg:
			t.Errorf("%s: err = %v; want an *ArgError naming %q", tc.name, tc.err, tc.arg)
		}
	}
	// A release that refuses its arguments releases all the same.
	if err := l.Release(ctx(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release after rejected releases = %v; want ErrNotHeld (they released it)", err)
	}
	if l, err := c.TryLock(ctx(t), p+"held"); err != nil {
		t.Fatalf("TryLock after rejected releases = %v; want the lock free", err)
	} else if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}

	// A key of exactly the declared limit works.
	long := p + strings.Repeat("k", caps.MaxKeyLen-len(p))
	l, err = c.TryLock(ctx(t), long, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("TryLock with a key of %d bytes (the declared limit): %v", len(long), err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	s.assertNoResidue(t, p)
}
