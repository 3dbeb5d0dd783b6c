package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memdlock"
)

// At its max hold the lock ends with ErrLost and ErrMaxHold as its cause and
// is released on the store at once, whether or not it was renewed meanwhile
// (a 150ms lease, renewed every 50ms, leaves a loaded machine room to renew
// it).
func TestMaxHold(t *testing.T) {
	for _, ttl := range []time.Duration{time.Minute, 150 * time.Millisecond} {
		t.Run(ttl.String(), func(t *testing.T) {
			store := memdlock.New()
			lost := make(chan struct{})
			ev := events{lost: lost}
			a := newClient(t, store.Share(), dlock.WithObserver(&ev))
			b := newClient(t, store.Share())
			l, err := a.Lock(context.Background(), "job", dlock.WithTTL(ttl), dlock.WithMaxHold(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			<-l.Done()
			cause := context.Cause(l.Context())
			if !errors.Is(cause, dlock.ErrLost) || !errors.Is(cause, dlock.ErrMaxHold) || !strings.Contains(cause.Error(), "max hold") {
				t.Fatalf("cause = %v; want ErrLost and ErrMaxHold", cause)
			}
			if err := l.Cause(); err != cause {
				t.Errorf("Cause() = %v; want the context's cause %v", err, cause)
			}
			// Release waits for the release at the max hold, which has
			// freed the lock on the store by then.
			if err := l.Release(context.Background()); !errors.Is(err, dlock.ErrMaxHold) {
				t.Errorf("Release after the max hold = %v; want ErrMaxHold", err)
			}
			l2, err := b.TryLock(context.Background(), "job")
			if err != nil {
				t.Fatalf("TryLock after the max hold: %v", err)
			}
			l2.Release(context.Background())
			<-lost
			if got := ev.kinds(); got[len(got)-1] != dlock.EventLost {
				t.Errorf("events = %v; want the loss last", got)
			}
		})
	}
}

// Do's function sees its context end at the max hold, and Do reports it.
func TestMaxHoldDo(t *testing.T) {
	c := newClient(t, memdlock.New())
	var cause error
	err := c.Do(context.Background(), "job", func(ctx context.Context, _ *dlock.Lock) error {
		<-ctx.Done()
		cause = context.Cause(ctx)
		return nil
	}, dlock.WithMaxHold(100*time.Millisecond))
	if !errors.Is(cause, dlock.ErrMaxHold) || !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrMaxHold) {
		t.Errorf("fn's cause %v, Do = %v; want ErrMaxHold and ErrLost", cause, err)
	}
}

// ReleaseAfter does not keep the lock past its max hold.
func TestMaxHoldBoundsReleaseAfter(t *testing.T) {
	store := memdlock.New()
	a, b := newClient(t, store.Share()), newClient(t, store.Share())
	l, err := a.Lock(context.Background(), "job", dlock.WithTTL(time.Minute), dlock.WithMaxHold(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseAfter(context.Background(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(context.Background(), "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock during the hold = %v; want ErrNotAcquired", err)
	}
	// Without the bound this would wait for an hour.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l2, err := b.Lock(ctx, "job")
	if err != nil {
		t.Fatalf("Lock after the max hold: %v", err)
	}
	l2.Release(context.Background())
}

// Released before its max hold, a lock is not lost at it.
func TestMaxHoldAfterRelease(t *testing.T) {
	lost := make(chan struct{})
	ev := events{lost: lost}
	c := newClient(t, memdlock.New(), dlock.WithObserver(&ev))
	l, err := c.Lock(context.Background(), "job", dlock.WithMaxHold(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A second lock whose max hold comes later: by then the first one's
	// would have fired long ago.
	l2, err := c.Lock(context.Background(), "job", dlock.WithMaxHold(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-lost
	if !errors.Is(l2.Cause(), dlock.ErrMaxHold) {
		t.Errorf("the second lock's Cause() = %v; want ErrMaxHold", l2.Cause())
	}
	want := []dlock.EventKind{dlock.EventAcquiring, dlock.EventAcquired, dlock.EventReleased, dlock.EventAcquiring, dlock.EventAcquired, dlock.EventLost}
	if got := ev.kinds(); !equal(got, want) {
		t.Errorf("events = %v; want %v", got, want)
	}
	if !errors.Is(l.Cause(), dlock.ErrNotHeld) {
		t.Errorf("the released lock's Cause() = %v; want ErrNotHeld", l.Cause())
	}
}

func TestMaxHoldBadValues(t *testing.T) {
	c := newClient(t, memdlock.New())
	for _, d := range []time.Duration{0, -time.Second, time.Microsecond} {
		_, err := c.TryLock(context.Background(), "job", dlock.WithMaxHold(d))
		var ae *dlock.ArgError
		if !errors.As(err, &ae) || ae.Name != "max hold" || ae.Value != d || !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("WithMaxHold(%v): %v; want an *ArgError named \"max hold\"", d, err)
			continue
		}
		if !strings.Contains(err.Error(), d.String()) {
			t.Errorf("WithMaxHold(%v): %q does not name the value", d, err)
		}
	}
	// A max hold shorter than a coarse store's unit is refused too.
	cc := newClient(t, &coarse{Driver: memdlock.New()})
	if _, err := cc.TryLock(context.Background(), "job", dlock.WithMaxHold(500*time.Millisecond)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("WithMaxHold below a coarse store's lease unit: %v; want ErrInvalidArgument", err)
	}
	l, err := cc.TryLock(context.Background(), "job", dlock.WithMaxHold(time.Second))
	if err != nil {
		t.Fatalf("WithMaxHold of one unit of a coarse store: %v", err)
	}
	l.Release(context.Background())
}
