package drivertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// promptly bounds how long a call may take to return once its context has
// been cancelled on a hung store. Drivers' own network timeouts are seconds;
// package dlock returns within milliseconds. The bound is generous for a
// loaded machine, yet below every driver's network timeout that matters.
const promptly = 1500 * time.Millisecond

// testHungStore checks that every call returns promptly once its context is
// cancelled, on a store that has stopped answering, and that Close returns.
func (s *suite) testHungStore(t *testing.T) {
	if s.cfg.NewHungDriver == nil {
		t.Skip("Config.NewHungDriver is not set: the store is in-process and cannot hang")
	}
	p := prefix(t)
	d, hang := s.cfg.NewHungDriver(t)
	c, err := dlock.New(d)
	if err != nil {
		t.Fatalf("dlock.New: %v", err)
	}
	held, err := c.TryLock(ctx(t), p+"held", dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("TryLock before the store hangs: %v", err)
	}
	var readers *dlock.Lock
	if s.caps.Modes.Has(driver.Shared) {
		if readers, err = c.TryLock(ctx(t), p+"write", dlock.WithTTL(longTTL)); err != nil {
			t.Fatalf("TryLock before the store hangs: %v", err)
		}
	}
	hang()
	calls := []struct {
		name string
		fn   func(ctx context.Context) error
	}{
		{"TryLock", func(ctx context.Context) error { _, err := c.TryLock(ctx, p+"free"); return err }},
		{"Lock", func(ctx context.Context) error { _, err := c.Lock(ctx, p+"free2"); return err }},
		{"Lock.Refresh", held.Refresh},
		{"Client.List", func(ctx context.Context) error { _, err := c.List(ctx, p); return err }},
		{"Client.ForceRelease", func(ctx context.Context) error { _, err := c.ForceRelease(ctx, p+"free3"); return err }},
	}
	if readers != nil {
		calls = append(calls, struct {
			name string
			fn   func(ctx context.Context) error
		}{"Lock.Downgrade", readers.Downgrade})
	}
	calls = append(calls, struct {
		name string
		fn   func(ctx context.Context) error
	}{"Lock.Release", held.Release})
	for _, call := range calls {
		cctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- call.fn(cctx) }()
		// Let the request reach the hung store, then cancel. Nothing
		// signals that a request is on the wire; a call that returns
		// before the cancel is no failure either.
		time.Sleep(100 * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s on a hung store = nil; want an error", call.name)
			}
		case <-time.After(promptly):
			t.Errorf("%s on a hung store still running %v after its context was cancelled", call.name, promptly)
			<-done
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	// Close waits for each request in flight up to dlock.ReleaseTimeout.
	bound := 4*dlock.ReleaseTimeout + waitTimeout/4
	select {
	case <-closed:
	case <-time.After(bound):
		t.Errorf("Client.Close on a hung store still running after %v", bound)
	}
}

// refusals wraps a driver and closes refused after its first Acquire that
// reached the store and was refused.
type refusals struct {
	driver.Driver
	once    sync.Once
	refused chan struct{}
}

func (r *refusals) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	res, err := r.Driver.Acquire(ctx, req)
	if err == nil && !res.Acquired {
		r.once.Do(func() { close(r.refused) })
	}
	return res, err
}

// Subscribe forwards, so that the waiter waits as it would on the bare
// driver.
func (r *refusals) Subscribe(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	if n, ok := r.Driver.(driver.Notifier); ok {
		return n.Subscribe(ctx, req)
	}
	return nil, driver.ErrUnsupported
}

// testCloseEndsWaits checks that Close ends a wait in progress at once with
// ErrClosed and leaves nothing of it on the store: the key is free for
// others as soon as its holder releases it.
func (s *suite) testCloseEndsWaits(t *testing.T) {
	key := prefix(t) + "k"
	a, c := s.client(t), s.client(t)
	l, err := a.Lock(ctx(t), key, dlock.WithTTL(longTTL))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	for _, mode := range []struct {
		name string
		opts []dlock.LockOption
	}{{"exclusive", nil}, {"fair", []dlock.LockOption{dlock.Fair()}}} {
		if len(mode.opts) > 0 && !s.caps.FIFO {
			continue
		}
		r := &refusals{Driver: s.cfg.NewDriver(t), refused: make(chan struct{})}
		b, err := dlock.New(r)
		if err != nil {
			t.Fatalf("dlock.New: %v", err)
		}
		got := make(chan error, 1)
		go func() {
			_, err := b.Lock(ctx(t), key, append(mode.opts, dlock.WithTTL(longTTL))...)
			got <- err
		}()
		<-r.refused // b waits, queued on a store that queues
		closed := make(chan error, 1)
		go func() { closed <- b.Close() }()
		select {
		case err := <-got:
			if !errors.Is(err, dlock.ErrClosed) || !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("%s Lock ended by Close = %v; want ErrNotAcquired and ErrClosed", mode.name, err)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("%s Lock still waiting after Close", mode.name)
		}
		if err := <-closed; err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// The closed waiters left no queue entry: the key is free at once.
	l, err = c.TryLock(ctx(t), key)
	if err != nil {
		t.Fatalf("TryLock after the waiters' clients closed: %v", err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	s.assertNoResidue(t, key)
}

// testReleaseEndedContext checks that Release reaches the store when the
// caller's context has ended, as with `defer lock.Release(ctx)` in a request
// whose deadline passed, and that Do releases when its function panics.
func (s *suite) testReleaseEndedContext(t *testing.T) {
	key := prefix(t) + "k"
	a, b := s.client(t), s.client(t)
	for _, name := range []string{"cancelled", "deadline"} {
		var rctx context.Context
		var cancel context.CancelFunc
		if name == "cancelled" {
			rctx, cancel = context.WithCancel(ctx(t))
		} else {
			rctx, cancel = context.WithDeadline(ctx(t), time.Now().Add(time.Hour))
		}
		l, err := a.Lock(rctx, key, dlock.WithTTL(longTTL))
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
		cancel()
		if err := l.Release(rctx); err != nil {
			t.Errorf("Release with a %s context = %v; want nil", name, err)
		}
		lb, err := b.TryLock(ctx(t), key)
		if err != nil {
			t.Fatalf("TryLock after a Release with a %s context: %v", name, err)
		}
		if err := lb.Release(ctx(t)); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}

	// Do releases the lock when fn panics, before the panic goes on.
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v; want the panic of fn", r)
			}
		}()
		a.Do(ctx(t), key, func(context.Context, *dlock.Lock) error { panic("boom") }, dlock.WithTTL(longTTL))
		t.Error("Do returned; want fn's panic")
	}()
	lb, err := b.TryLock(ctx(t), key)
	if err != nil {
		t.Fatalf("TryLock after Do's fn panicked: %v", err)
	}
	if err := lb.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}

	// Do releases the lock when its context ends while fn runs.
	dctx, cancel := context.WithCancel(ctx(t))
	err = a.Do(dctx, key, func(ctx context.Context, _ *dlock.Lock) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	}, dlock.WithTTL(longTTL))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Do whose context was cancelled = %v; want Canceled", err)
	}
	lb, err = b.TryLock(ctx(t), key)
	if err != nil {
		t.Fatalf("TryLock after Do's context was cancelled: %v", err)
	}
	if err := lb.Release(ctx(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	s.assertNoResidue(t, key)
}

// testRacingReleases checks that one hold is released once: concurrent
// Release calls and a concurrent Close report one clean release, never a
// loss.
func (s *suite) testRacingReleases(t *testing.T) {
	p := prefix(t)
	var mu sync.Mutex
	var losses []string
	observer := dlock.ObserverFunc(func(e dlock.Event) {
		if e.Kind == dlock.EventLost {
			mu.Lock()
			losses = append(losses, fmt.Sprintf("%s: %v", e.Key, e.Err))
			mu.Unlock()
		}
	})
	const racers = 4
	for round := range 3 {
		c := s.client(t, dlock.WithObserver(observer))
		key := fmt.Sprintf("%sk%d", p, round)
		l, err := c.Lock(ctx(t), key, dlock.WithTTL(longTTL))
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
		errs := make(chan error, racers+1)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range racers {
			wg.Go(func() {
				<-start
				errs <- l.Release(ctx(t))
			})
		}
		if round > 0 {
			// Close races the releases too.
			wg.Go(func() {
				<-start
				if err := c.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		clean := 0
		for err := range errs {
			switch {
			case err == nil:
				clean++
			case errors.Is(err, dlock.ErrLost):
				t.Errorf("a racing Release = %v; want nil, ErrNotHeld or ErrClosed", err)
			case !errors.Is(err, dlock.ErrNotHeld) && !errors.Is(err, dlock.ErrClosed):
				t.Errorf("a racing Release = %v; want nil, ErrNotHeld or ErrClosed", err)
			}
		}
		if round == 0 && clean != 1 || clean > 1 {
			t.Errorf("%d racing Releases returned nil; want one (or none when Close released it)", clean)
		}
		if cause := context.Cause(l.Context()); errors.Is(cause, dlock.ErrLost) {
			t.Errorf("context cause after racing releases = %v; want no loss", cause)
		}
		s.assertNoResidue(t, key)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(losses) > 0 {
		t.Errorf("racing releases reported losses: %v", losses)
	}
}
