package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/memdlock"
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

// delayKeeper is an in-process store that declares it keeps a lock delay
// itself, as etcd does, and records the requests it gets.
type delayKeeper struct {
	*memdlock.Driver
	mu   sync.Mutex
	reqs []driver.Request
}

func (d *delayKeeper) Capabilities() driver.Capabilities {
	caps := d.Driver.Capabilities()
	caps.SessionLockDelay = true
	return caps
}

func (d *delayKeeper) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	d.record(req)
	return d.Driver.Acquire(ctx, req)
}

func (d *delayKeeper) Refresh(ctx context.Context, req driver.Request) error {
	d.record(req)
	return d.Driver.Refresh(ctx, req)
}

func (d *delayKeeper) record(req driver.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reqs = append(d.reqs, req)
}

// A driver that keeps the lock delay itself is asked for the holder's TTL
// and given the delay in Request.LockDelay, on acquisition and renewal;
// ReleaseAfter's refresh carries no delay.
func TestSessionLockDelayRequest(t *testing.T) {
	ctx := context.Background()
	d := &delayKeeper{Driver: memdlock.New()}
	c, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const ttl, delay = time.Minute, time.Hour
	l, err := c.Lock(ctx, "k", dlock.WithTTL(ttl), dlock.WithLockDelay(delay))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseAfter(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.reqs) != 3 {
		t.Fatalf("requests %+v; want an Acquire and two Refreshes", d.reqs)
	}
	for i, want := range [][2]time.Duration{{ttl, delay}, {ttl, delay}, {time.Second, 0}} {
		if r := d.reqs[i]; r.TTL != want[0] || r.LockDelay != want[1] {
			t.Errorf("request %d: TTL %v, LockDelay %v; want %v and %v", i, r.TTL, r.LockDelay, want[0], want[1])
		}
	}
}
