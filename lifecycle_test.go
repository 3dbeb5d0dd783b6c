package dlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/memdlock"
)

// stuck wraps a real in-process store and, once hung, holds every request
// after it has been applied until the test lets it go, ignoring ctx, as a
// client library that cannot abandon a request on the wire does
// (go-redis, gomemcache, go-zookeeper). It records calls for an owner that
// start while an Acquire for that owner runs, which the driver contract
// forbids.
type stuck struct {
	*memdlock.Driver
	mu        sync.Mutex
	hung      bool
	release   chan struct{} // closed to let held requests go
	entered   chan string   // receives the name of each held request
	acquiring map[string]bool
	broken    []string
}

func newStuck() *stuck {
	return &stuck{Driver: memdlock.New(), release: make(chan struct{}), entered: make(chan string, 64), acquiring: map[string]bool{}}
}

// Capabilities tells package dlock that requests may outlive their ctx.
func (s *stuck) Capabilities() driver.Capabilities {
	caps := s.Driver.Capabilities()
	caps.CancelsPromptly = false
	return caps
}

func (s *stuck) hang() {
	s.mu.Lock()
	s.hung = true
	s.mu.Unlock()
}

// hold blocks a request that was applied while the store hangs.
func (s *stuck) hold(name string) {
	s.mu.Lock()
	hung := s.hung
	s.mu.Unlock()
	if hung {
		s.entered <- name
		<-s.release
	}
}

func (s *stuck) check(name string, req driver.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.acquiring[req.Owner] {
		s.broken = append(s.broken, name+" "+req.Key)
	}
}

func (s *stuck) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	s.check("Acquire", req)
	s.mu.Lock()
	s.acquiring[req.Owner] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.acquiring, req.Owner)
		s.mu.Unlock()
	}()
	res, err := s.Driver.Acquire(context.WithoutCancel(ctx), req)
	s.hold("Acquire")
	return res, err
}

func (s *stuck) Refresh(ctx context.Context, req driver.Request) error {
	s.check("Refresh", req)
	err := s.Driver.Refresh(context.WithoutCancel(ctx), req)
	s.hold("Refresh")
	return err
}

func (s *stuck) Release(ctx context.Context, req driver.Request) error {
	s.check("Release", req)
	err := s.Driver.Release(context.WithoutCancel(ctx), req)
	s.hold("Release")
	return err
}

// A caller whose context ends while its request hangs gets its answer at
// once; the request completes later, and what it took is released only
// after it has returned.
func TestHungRequestsReturnPromptly(t *testing.T) {
	s := newStuck()
	c, err := dlock.New(s)
	if err != nil {
		t.Fatal(err)
	}
	other, err := dlock.New(memdlockView(s))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	held, err := c.TryLock(context.Background(), "held", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	s.hang()

	calls := map[string]func(context.Context) error{
		"TryLock": func(ctx context.Context) error { _, err := c.TryLock(ctx, "free"); return err },
		"Refresh": held.Refresh,
	}
	for name, call := range calls {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- call(ctx) }()
		<-s.entered // the request is on the (hung) wire
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("%s cancelled on a hung store = %v; want Canceled", name, err)
		}
	}
	// The abandoned TryLock took "free" on the store; it stays taken
	// while the request hangs, and is released once it returns.
	if _, err := other.TryLock(context.Background(), "free"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of the key a hung request took = %v; want ErrNotAcquired", err)
	}

	// Release with an ended context still reaches the store.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- held.Release(ctx) }()
	<-s.entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Release cancelled on a hung store = %v; want Canceled", err)
	}
	if !errors.Is(context.Cause(held.Context()), dlock.ErrNotHeld) {
		t.Errorf("lock context cause after an abandoned Release = %v; want ErrNotHeld", context.Cause(held.Context()))
	}

	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	close(s.release) // the store answers again
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
	for _, key := range []string{"free", "held"} {
		l, err := other.TryLock(context.Background(), key)
		if err != nil {
			t.Errorf("TryLock of %q after the hung requests completed: %v", key, err)
			continue
		}
		l.Release(context.Background())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.broken) > 0 {
		t.Errorf("calls for an owner while its Acquire ran: %v", s.broken)
	}
}

// Close ends a Lock waiting behind a hung request at once.
func TestCloseWhileRequestHangs(t *testing.T) {
	s := newStuck()
	c, err := dlock.New(s)
	if err != nil {
		t.Fatal(err)
	}
	s.hang()
	done := make(chan error, 1)
	go func() {
		_, err := c.Lock(context.Background(), "k")
		done <- err
	}()
	<-s.entered
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	if err := <-done; !errors.Is(err, dlock.ErrClosed) || !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("Lock ended by Close = %v; want ErrNotAcquired and ErrClosed", err)
	}
	close(s.release)
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
	other, err := dlock.New(memdlockView(s))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	l, err := other.TryLock(context.Background(), "k")
	if err != nil {
		t.Fatalf("TryLock after Close cleaned up: %v", err)
	}
	l.Release(context.Background())
}

// memdlockView is a second driver over the same in-process store.
func memdlockView(s *stuck) driver.Driver { return s.Driver.Share() }

// Do releases its lock when fn panics, and the panic goes on.
func TestDoPanicReleases(t *testing.T) {
	c, err := dlock.New(memdlock.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v; want fn's panic", r)
			}
		}()
		c.Do(context.Background(), "k", func(context.Context, *dlock.Lock) error { panic("boom") })
	}()
	l, err := c.TryLock(context.Background(), "k")
	if err != nil {
		t.Fatalf("TryLock after Do's fn panicked: %v", err)
	}
	l.Release(context.Background())
}

// A Refresh that a Release overtakes is no loss.
func TestRacingReleaseAndRefresh(t *testing.T) {
	var lost bool
	c, err := dlock.New(memdlock.New(), dlock.WithObserver(dlock.ObserverFunc(func(e dlock.Event) {
		if e.Kind == dlock.EventLost {
			lost = true
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 50 {
		l, err := c.TryLock(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() { l.Refresh(context.Background()) })
		wg.Go(func() { l.Release(context.Background()) })
		wg.Go(func() { l.Release(context.Background()) })
		wg.Wait()
		if errors.Is(context.Cause(l.Context()), dlock.ErrLost) {
			t.Fatalf("lock context cause = %v; want a release", context.Cause(l.Context()))
		}
	}
	if lost {
		t.Error("a loss was observed")
	}
}
