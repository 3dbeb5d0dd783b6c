package redisdlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/redisdlock"
)

// TestHandoffGrant checks that a release hands the lock to the waiter at
// the head of the queue, which takes it without another acquire: two
// Clients (processes) take a key in turn, and each time the waiter holds
// the lock after two acquire calls (queueing, and once more after it
// subscribed), with a fencing token above the last one, and its first
// renewal extends the short lease of the handed hold to its own.
func TestHandoffGrant(t *testing.T) {
	for _, name := range modeServers {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			probe, prefix, cs, calls := handoffClients(t, name)
			opts := []dlock.LockOption{dlock.WithTTL(time.Minute), dlock.WithBackoff(time.Hour, time.Hour)}
			held, err := cs[0].Lock(ctx, "k", opts...)
			if err != nil {
				t.Fatal(err)
			}
			for round := range 6 {
				w := (round + 1) % 2
				before := calls[w].Load()
				got := make(chan *dlock.Lock, 1)
				go func() {
					l, err := cs[w].Lock(ctx, "k", opts...)
					if err != nil {
						t.Errorf("round %d: %v", round, err)
					}
					got <- l
				}()
				waitFor(t, 10*time.Second, "waiter queued", func() bool {
					return queueLen(t, probe, prefix, "k") == 1 && calls[w].Load() == before+2
				})
				if err := held.Release(ctx); err != nil {
					t.Fatal(err)
				}
				l := <-got
				if l == nil {
					t.FailNow()
				}
				if n := calls[w].Load() - before; n != 2 {
					t.Fatalf("round %d: the waiter made %d acquire calls; want 2 (queueing, after subscribing)", round, n)
				}
				if l.Token() <= held.Token() {
					t.Fatalf("round %d: token %d after %d", round, l.Token(), held.Token())
				}
				waitFor(t, 10*time.Second, "the handed hold renewed", func() bool {
					hs, err := probe.List(ctx, "k")
					if err != nil {
						t.Fatal(err)
					}
					return len(hs) == 1 && hs[0].Token == l.Token() && hs[0].TTL > 2*time.Second
				})
				held = l
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// handoffClients returns, on the server name, a driver to look at the
// store with, the prefix of the test's keys, and two Clients of their own
// whose acquire calls are counted in calls, all closed when the test ends.
func handoffClients(t *testing.T, name string) (probe *redisdlock.Driver, prefix string, cs [2]*dlock.Client, calls *[2]atomic.Int64) {
	srv := testsrv.Get(t, name)
	prefix = testPrefix(t)
	raw := withParams(srv.URL, "prefix", prefix)
	probe = openURL(t, raw)
	t.Cleanup(func() { probe.Close() })
	calls = new([2]atomic.Int64)
	for i := range cs {
		c, err := dlock.New(countingDriver{openURL(t, raw), &calls[i]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return probe, prefix, cs, calls
}

// TestHandoffWithoutRenewal checks that a waiter that does not renew its
// lock does not take the short lease of a handed hold as its own: it
// confirms the hold, which extends it to the lease it asked for.
func TestHandoffWithoutRenewal(t *testing.T) {
	ctx := testCtx(t)
	probe, prefix, cs, calls := handoffClients(t, testsrv.Redis)
	opts := []dlock.LockOption{dlock.WithTTL(time.Minute), dlock.WithBackoff(time.Hour, time.Hour), dlock.WithoutRenewal()}
	held, err := cs[0].Lock(ctx, "k", opts...)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := cs[1].Lock(ctx, "k", opts...)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 10*time.Second, "waiter queued", func() bool {
		return queueLen(t, probe, prefix, "k") == 1 && calls[1].Load() == 2
	})
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	defer l.Release(ctx)
	hs, err := probe.List(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].Token != l.Token() || hs[0].TTL < 30*time.Second {
		t.Fatalf("holders once the waiter holds the lock without renewal: %+v; want its token with a lease near a minute", hs)
	}
	if until := time.Until(l.ValidUntil()); until < 30*time.Second {
		t.Fatalf("validity %v; want near a minute", until)
	}
}

// TestHandoffLongWait checks that a waiter whose latest acquire was sent
// longer ago than the handed hold's lease lasts confirms the hold with one
// more acquire, rather than take a hold it cannot be sure of, or give it
// back: it holds the lock with the handed token.
func TestHandoffLongWait(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	ctx := testCtx(t)
	prefix := testPrefix(t)
	raw := withParams(srv.URL, "prefix", prefix)
	d := openURL(t, raw)
	defer d.Close()
	holder := request("k", time.Minute)
	mustAcquire(t, d, holder, true)
	var attempts atomic.Int64
	c, err := dlock.New(countingDriver{openURL(t, raw), &attempts})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := c.Lock(ctx, "k", dlock.WithTTL(time.Minute), dlock.WithBackoff(time.Hour, time.Hour))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 10*time.Second, "waiter queued", func() bool {
		return queueLen(t, d, prefix, "k") == 1 && attempts.Load() == 2
	})
	// Not synchronisation: the waiter's latest acquire ages past the
	// three seconds that a handed hold lasts.
	time.Sleep(3100 * time.Millisecond)
	if err := d.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	hs, err := d.List(ctx, "k")
	if err != nil || len(hs) != 1 {
		t.Fatalf("holders after the release: %+v, %v; want the waiter", hs, err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		defer l.Release(ctx)
		if l.Token() != hs[0].Token || attempts.Load() != 3 {
			t.Fatalf("the waiter holds token %d after %d acquire calls; want the handed token %d after 3", l.Token(), attempts.Load(), hs[0].Token)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not take the handed lock within 10s")
	}
}

// TestHandoffDeadHead checks that a waiter at the head of the queue that
// died keeps the lock the release hands it only for the grace: the waiter
// behind it, polling, takes the key once the grace has run out, although
// the dead waiter's queue entry would have lasted a minute.
func TestHandoffDeadHead(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	ctx := testCtx(t)
	prefix := testPrefix(t)
	raw := withParams(srv.URL, "prefix", prefix)
	d := openURL(t, raw)
	defer d.Close()
	holder := request("k", time.Minute)
	first := mustAcquire(t, d, holder, true)
	dead := queued(request("k", time.Minute), driver.Exclusive, 0)
	mustAcquire(t, d, dead, false)

	var attempts atomic.Int64
	c, err := dlock.New(countingDriver{openURL(t, raw), &attempts})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make(chan *dlock.Lock, 1)
	go func() {
		// A lease of 3s: it polls every second.
		l, err := c.Lock(ctx, "k", dlock.WithTTL(3*time.Second), dlock.WithBackoff(time.Hour, time.Hour))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 10*time.Second, "waiter queued", func() bool {
		return queueLen(t, d, prefix, "k") == 2 && attempts.Load() == 2
	})
	if err := d.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	hs, err := d.List(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].Owner != dead.Owner || hs[0].Token <= first.Token || hs[0].TTL > 3*time.Second {
		t.Fatalf("holders after the release %+v; want the dead head %q, with a token above %d and at most three seconds' grace", hs, dead.Owner, first.Token)
	}
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		defer l.Release(ctx)
		if l.Token() <= hs[0].Token {
			t.Fatalf("the live waiter got token %d; want one above the dead head's %d", l.Token(), hs[0].Token)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter behind a dead head was not let in within 10s")
	}
}

// deafDriver is a countingDriver whose subscriptions never signal: its
// waiters wait for their polls.
type deafDriver struct{ countingDriver }

func (d deafDriver) Subscribe(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	s, err := d.countingDriver.Subscribe(ctx, req)
	if err != nil {
		return nil, err
	}
	return deafSub{s}, nil
}

type deafSub struct{ driver.Subscription }

func (deafSub) C() <-chan struct{} { return nil }

// TestHandoffGaveUp checks that a waiter that gives up after the lock was
// handed to it, unheard, leaves it to the next in line at once: the
// release that ends its wait frees the hold, which hands the lock on. The
// next waiter's lease and backoff are long, so only that handoff can let
// it in within the test's time.
func TestHandoffGaveUp(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	ctx := testCtx(t)
	prefix := testPrefix(t)
	raw := withParams(srv.URL, "prefix", prefix)
	d := openURL(t, raw)
	defer d.Close()
	holder := request("k", time.Minute)
	first := mustAcquire(t, d, holder, true)
	opts := []dlock.LockOption{dlock.WithTTL(time.Minute), dlock.WithBackoff(time.Hour, time.Hour)}

	var attempts, quitterAttempts atomic.Int64
	qc, err := dlock.New(deafDriver{countingDriver{openURL(t, raw), &quitterAttempts}})
	if err != nil {
		t.Fatal(err)
	}
	defer qc.Close()
	qctx, quit := context.WithCancel(ctx)
	defer quit()
	gaveUp := make(chan error, 1)
	go func() {
		l, err := qc.Lock(qctx, "k", opts...)
		if err == nil {
			l.Release(ctx)
		}
		gaveUp <- err
	}()
	waitFor(t, 10*time.Second, "first waiter queued", func() bool {
		return queueLen(t, d, prefix, "k") == 1 && quitterAttempts.Load() == 2
	})
	nc, err := dlock.New(countingDriver{openURL(t, raw), &attempts})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := nc.Lock(ctx, "k", opts...)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 10*time.Second, "second waiter queued", func() bool {
		return queueLen(t, d, prefix, "k") == 2 && attempts.Load() == 2
	})

	if err := d.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	hs, err := d.List(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].Token <= first.Token || hs[0].TTL > 3*time.Second {
		t.Fatalf("holders after the release %+v; want the first waiter, with a token above %d and at most three seconds' grace", hs, first.Token)
	}
	quit()
	if err := <-gaveUp; !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("the first waiter's Lock = %v; want ErrNotAcquired", err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		defer l.Release(ctx)
		if l.Token() <= hs[0].Token {
			t.Fatalf("the second waiter got token %d; want one above the first waiter's %d", l.Token(), hs[0].Token)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter behind one that gave up was not let in within 10s")
	}
}
