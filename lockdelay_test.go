package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	_ "github.com/dlockhq/dlock/memdlock"
)

// The URL parameter lock_delay sets the Client's default lock delay, on
// every scheme: a holder that stops renewing keeps the key for it.
func TestOpenLockDelay(t *testing.T) {
	ctx := context.Background()
	a, err := dlock.Open(ctx, "mem://lockdelay?lock_delay=1h")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer a.Close()
	b, err := dlock.Open(ctx, "mem://lockdelay")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b.Close()
	opts := []dlock.LockOption{dlock.WithTTL(50 * time.Millisecond), dlock.WithoutRenewal()}
	if _, err := a.Lock(ctx, "k", opts...); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	// A lock without delay, taken after k: once b takes it over, k's
	// lease has ended too.
	if _, err := a.Lock(ctx, "ref", append(opts, dlock.WithLockDelay(0))...); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	ref, err := b.Lock(ctx, "ref")
	if err != nil {
		t.Fatalf("Lock waiting for an expired lease: %v", err)
	}
	defer ref.Release(ctx)
	if l, err := b.TryLock(ctx, "k"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock of a key whose holder's lease ended = %v; want ErrNotAcquired during the URL's lock delay", err)
		if err == nil {
			l.Release(ctx)
		}
	}
	if n, err := b.ForceRelease(ctx, "k"); err != nil || n != 1 {
		t.Errorf("ForceRelease = %d, %v; want the delayed hold removed", n, err)
	}

	for _, v := range []string{"-1s", "soon"} {
		_, err := dlock.Open(ctx, "mem://lockdelay?lock_delay="+v)
		if ae := (*dlock.ArgError)(nil); !errors.As(err, &ae) || ae.Name != "url" || !strings.Contains(err.Error(), "lock_delay=\""+v+"\"") {
			t.Errorf("Open with lock_delay=%s = %v; want an *ArgError naming the url and the value", v, err)
		}
	}
}
