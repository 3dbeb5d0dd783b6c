package dlock_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/memdlock"
)

// errRefused stands for a store's permanent refusal (WRONGPASS).
var errRefused = errors.New("WRONGPASS invalid username-password pair")

// refusing wraps a real in-process store whose Acquire and Refresh a test
// makes fail with a given error, as a store whose password was changed
// would; its classifier calls errRefused permanent.
type refusing struct {
	*memdlock.Driver
	mu         sync.Mutex
	acquireErr error // returned by Acquire from attempt from on
	from       int
	refreshErr error // returned by Refresh
	attempts   int
}

func (r *refusing) Permanent(err error) bool { return errors.Is(err, errRefused) }

func (r *refusing) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	r.mu.Lock()
	r.attempts++
	fail := r.acquireErr != nil && r.attempts >= r.from
	err := r.acquireErr
	r.mu.Unlock()
	if fail {
		return driver.Result{}, fmt.Errorf("refusing: acquire %q: %w", req.Key, err)
	}
	return r.Driver.Acquire(ctx, req)
}

func (r *refusing) Refresh(ctx context.Context, req driver.Request) error {
	r.mu.Lock()
	err := r.refreshErr
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("refusing: refresh %q: %w", req.Key, err)
	}
	return r.Driver.Refresh(ctx, req)
}

func (r *refusing) tries() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts
}

// wantPermanent checks that err is the permanent failure of an acquisition
// whose context (ctx) is still live: it did not wait for ctx to end.
func wantPermanent(t *testing.T, ctx context.Context, err, cause error) {
	t.Helper()
	if ctx.Err() != nil {
		t.Fatalf("the wait ran until its context ended (%v): %v", ctx.Err(), err)
	}
	for _, target := range []error{dlock.ErrPermanent, dlock.ErrUnavailable, cause} {
		if !errors.Is(err, target) {
			t.Errorf("err = %v; want it to wrap %v", err, target)
		}
	}
	if errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("err = %v; want no ErrNotAcquired: the lock was not found held", err)
	}
}

// TestPermanentFailureEndsWait checks that a store's permanent failure
// ends a Lock, a Do, a LockAll and a TryLock at once, where a transient
// one is ridden out: on the first attempt, and on a later one, after the
// store has answered that the key is held.
func TestPermanentFailureEndsWait(t *testing.T) {
	fast := dlock.WithBackoff(time.Millisecond, 5*time.Millisecond)
	for _, from := range []int{1, 2} {
		t.Run(fmt.Sprintf("from attempt %d", from), func(t *testing.T) {
			store := memdlock.New()
			holdForever(t, store, "k")
			r := &refusing{Driver: store.Share(), acquireErr: errRefused, from: from}
			ev := &events{}
			c := newClient(t, r, dlock.WithObserver(ev))
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()

			_, err := c.Lock(ctx, "k", fast)
			wantPermanent(t, ctx, err, errRefused)
			if n := r.tries(); n != from {
				t.Errorf("Lock made %d attempts; want %d (no retry after a permanent failure)", n, from)
			}
			ev.mu.Lock()
			last := ev.ev[len(ev.ev)-1]
			ev.mu.Unlock()
			if last.Kind != dlock.EventNotAcquired || last.Reason() != "permanent" || !errors.Is(last.Err, dlock.ErrPermanent) {
				t.Errorf("last event = %v (reason %q, err %v); want EventNotAcquired, reason permanent", last.Kind, last.Reason(), last.Err)
			}

			err = c.Do(ctx, "k", func(context.Context, *dlock.Lock) error { return nil }, fast)
			wantPermanent(t, ctx, err, errRefused)
			_, err = c.LockAll(ctx, []string{"j", "k"}, fast)
			wantPermanent(t, ctx, err, errRefused)
			_, err = c.TryLock(ctx, "k")
			wantPermanent(t, ctx, err, errRefused)
		})
	}

	t.Run("generic", func(t *testing.T) {
		// A driver without a classifier: an untrusted certificate is
		// permanent all the same.
		store := memdlock.New()
		holdForever(t, store, "k")
		var untrusted x509.UnknownAuthorityError
		c := newClient(t, &faultyErr{Driver: store.Share(), err: fmt.Errorf("tls: failed to verify certificate: %w", untrusted), from: 2})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		_, err := c.Lock(ctx, "k", fast)
		wantPermanent(t, ctx, err, untrusted)
	})

	t.Run("transient", func(t *testing.T) {
		// The same failure, not classified permanent, is ridden out
		// until the wait's context ends.
		store := memdlock.New()
		holdForever(t, store, "k")
		c := newClient(t, &faultyErr{Driver: store.Share(), err: errRefused, from: 2})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := c.Lock(ctx, "k", fast)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlock.ErrPermanent) {
			t.Errorf("Lock = %v; want the wait to end at its deadline, not as permanent", err)
		}
	})
}

// faultyErr is a real in-process store, without a classifier, whose
// Acquire fails with err from attempt from on.
type faultyErr struct {
	*memdlock.Driver
	mu       sync.Mutex
	err      error
	from     int
	attempts int
}

func (f *faultyErr) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	f.mu.Lock()
	f.attempts++
	fail := f.attempts >= f.from
	f.mu.Unlock()
	if fail {
		return driver.Result{}, fmt.Errorf("faulty: acquire %q: %w", req.Key, f.err)
	}
	return f.Driver.Acquire(ctx, req)
}

// TestPermanentRefreshFailureKeepsLock checks that a permanent failure of
// a renewal is reported (Refresh's error, EventRenewFailed) but does not
// end the lock before its validity does, and that the loss at the end of
// the validity names it.
func TestPermanentRefreshFailureKeepsLock(t *testing.T) {
	r := &refusing{Driver: memdlock.New()}
	lost := make(chan struct{})
	ev := &events{lost: lost}
	c := newClient(t, r, dlock.WithObserver(ev))
	l, err := c.Lock(context.Background(), "k", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.refreshErr = errRefused
	r.mu.Unlock()
	err = l.Refresh(context.Background())
	if !errors.Is(err, dlock.ErrPermanent) || !errors.Is(err, errRefused) || errors.Is(err, dlock.ErrUnavailable) {
		t.Errorf("Refresh = %v; want ErrPermanent and the store's error (not ErrUnavailable, which is for acquisitions)", err)
	}
	if l.Cause() != nil && time.Now().Before(l.ValidUntil()) {
		t.Errorf("the lock ended on a permanent refresh failure before its validity: %v", l.Cause())
	}
	<-lost
	cause := l.Cause()
	if !errors.Is(cause, dlock.ErrLost) || !errors.Is(cause, dlock.ErrPermanent) || !errors.Is(cause, errRefused) {
		t.Errorf("Cause() = %v; want ErrLost naming the last renewal's permanent failure", cause)
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	renewFailed := false
	for _, e := range ev.ev {
		if e.Kind == dlock.EventRenewFailed {
			renewFailed = true
			if !errors.Is(e.Err, dlock.ErrPermanent) {
				t.Errorf("EventRenewFailed.Err = %v; want ErrPermanent", e.Err)
			}
		}
	}
	if !renewFailed {
		t.Error("no EventRenewFailed")
	}
}
