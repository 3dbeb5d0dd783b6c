// Package dlocktest holds the small helpers that the backends' own tests
// share (the conformance suite itself is package drivertest).
package dlocktest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// Ctx returns a context that ends after a minute or when tb ends: a bound on
// every call of a test, never a timing measurement.
func Ctx(tb testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	tb.Cleanup(cancel)
	return c
}

// prefixRE matches the package prefix "dlock:" as a word ("redisdlock:"
// and "sqldlock:" are other packages' prefixes).
var prefixRE = regexp.MustCompile(`(^|[^a-z])dlock:`)

// ErrorNamesKeyOnce checks the error err of what, an operation on key: it
// names the key exactly once and carries the "dlock:" prefix at most once,
// however many layers wrapped it, and errors.Is finds each of targets.
func ErrorNamesKeyOnce(t *testing.T, what, key string, err error, targets ...error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	msg := err.Error()
	t.Logf("%s: %s", what, msg)
	if n := strings.Count(msg, strconv.Quote(key)); n != 1 {
		t.Errorf("%s: %q names the key %d times; want once", what, msg, n)
	}
	if n := len(prefixRE.FindAllString(msg, -1)); n > 1 {
		t.Errorf("%s: %q has the dlock: prefix %d times; want at most once", what, msg, n)
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Errorf("%s: %q does not wrap %v", what, msg, target)
		}
	}
}

// Request returns an exclusive request for key with a new owner and a
// one-minute lease.
func Request(key string) driver.Request {
	return driver.Request{Key: key, Owner: rand.Text(), TTL: time.Minute, Mode: driver.Exclusive}
}

// Key returns a key unique to this run of the test, starting with prefix.
func Key(tb testing.TB, prefix string) string {
	return prefix + ":" + tb.Name() + ":" + rand.Text()[:8]
}

// RejectURL checks that dlock.Open refuses url with an *ArgError for the
// argument arg ("url", "prefix", ...; empty for any) whose message contains
// mention (if not empty), and closes the client if Open succeeded anyway.
func RejectURL(t *testing.T, url, arg, mention string) {
	t.Helper()
	c, err := dlock.Open(Ctx(t), url)
	if c != nil {
		c.Close()
	}
	var ae *dlock.ArgError
	switch {
	case !errors.As(err, &ae):
		t.Errorf("Open(%q) = %v; want an *ArgError", url, err)
	case arg != "" && ae.Name != arg:
		t.Errorf("Open(%q) = %v; want an *ArgError for %s", url, err, arg)
	case !strings.Contains(err.Error(), mention):
		t.Errorf("Open(%q) = %v; want the error to name %q", url, err, mention)
	}
}

// HungCalls runs each call against a store that has stopped answering: first
// several times with a short deadline, each of which must end with an error
// wrapping context.DeadlineExceeded, then once with a context cancelled
// mid-call, which must end with an error wrapping context.Canceled within
// bound (the client's network timeout and a margin: a driver may run to its
// own timeout after cancellation, but no longer).
func HungCalls(t *testing.T, calls map[string]func(ctx context.Context) error, bound time.Duration) {
	t.Helper()
	for name, call := range calls {
		// Many short deadlines, since a client's socket deadline and the
		// context's timer race.
		for range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			err := call(ctx)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s past its deadline = %v; want an error wrapping context.DeadlineExceeded", name, err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		timer := time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		err := call(ctx)
		took := time.Since(start)
		timer.Stop()
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s cancelled = %v; want an error wrapping context.Canceled", name, err)
		}
		if took > bound {
			t.Errorf("%s cancelled returned after %v; want within %v", name, took, bound)
		}
	}
}

// releaseSpy forwards to a driver and sends the outcome of every Release on
// released.
type releaseSpy struct {
	driver.Driver
	released chan error

	mu       sync.Mutex
	acquired string // the outcome of the latest Acquire, for messages
	failed   bool   // the latest Acquire returned an error
}

func (s *releaseSpy) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	res, err := s.Driver.Acquire(ctx, req)
	s.mu.Lock()
	s.acquired, s.failed = fmt.Sprintf("%+v, %v", res, err), err != nil
	s.mu.Unlock()
	return res, err
}

func (s *releaseSpy) Release(ctx context.Context, req driver.Request) error {
	err := s.Driver.Release(ctx, req)
	s.released <- err
	return err
}

// AbandonedAcquire checks, on a driver d whose every reply is delayed by
// delay (a testsrv.StartDelayedProxy), that a TryLock whose context ends
// while its request is on the wire returns promptly through package dlock,
// and that the Release dlock makes once the driver's Acquire has returned
// finds and removes what the request took (it returns nil, not ErrNotOwner,
// unless the Acquire itself failed and so left nothing).
// The key is k; the Client, which owns d, is closed when t ends. Check the
// store for residue after it returns.
func AbandonedAcquire(t *testing.T, d driver.Driver, delay time.Duration, k string) {
	t.Helper()
	sp := &releaseSpy{Driver: d, released: make(chan error, 4)}
	c, err := dlock.New(sp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// Warm up: connections and sessions.
	l, err := c.TryLock(Ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(Ctx(t)); err != nil {
		t.Fatal(err)
	}
	<-sp.released

	actx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.TryLock(actx, k)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock with a short deadline = %v; want DeadlineExceeded", err)
	}
	if el := time.Since(start); el > delay*3/2 {
		t.Errorf("TryLock returned after %v; want promptly after its deadline, before the reply (%v)", el, 2*delay)
	}
	select {
	case err := <-sp.released:
		sp.mu.Lock()
		acquired, failed := sp.acquired, sp.failed
		sp.mu.Unlock()
		// An Acquire that returned an error has left nothing (the
		// contract): its Release may find nothing. One that returned a
		// result must have it found and removed.
		if err != nil && !(failed && errors.Is(err, driver.ErrNotOwner)) {
			t.Errorf("Release after the abandoned Acquire (which returned %s) = %v; want nil: what the request took, found and removed", acquired, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no Release after the abandoned Acquire within 30s")
	}
}

// CloseWhileHung checks that d.Close returns within bound while d's store
// hangs (the caller has hung it) and an Acquire of req is in flight.
func CloseWhileHung(t *testing.T, d driver.Driver, req driver.Request, bound time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { d.Acquire(Ctx(t), req) })
	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	select {
	case <-closed:
	case <-time.After(bound):
		t.Fatalf("Close still running after %v on a hung store", bound)
	}
}

// OpenHidesSecret checks that dlock.Open of each URL, which names servers
// that do not listen, fails with an error that does not show secret.
func OpenHidesSecret(t *testing.T, secret string, urls ...string) {
	t.Helper()
	for _, raw := range urls {
		c, err := dlock.Open(Ctx(t), raw)
		if err == nil {
			c.Close()
			t.Errorf("Open(%s) succeeded with nothing listening", redactAll(raw, secret))
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Open error shows the secret: %s", redactAll(err.Error(), secret))
		}
	}
}

func redactAll(s, secret string) string { return strings.ReplaceAll(s, secret, "***") }
