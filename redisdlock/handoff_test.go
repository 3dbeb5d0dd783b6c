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

// gatedDriver counts the Acquire calls made through it, and, once armed,
// holds the next one back: it sends the request on entered and waits for a
// token on open (which has room for one) before it runs it.
type gatedDriver struct {
	*redisdlock.Driver
	calls   atomic.Int64
	armed   atomic.Bool
	entered chan driver.Request
	open    chan struct{}
}

func newGated(d *redisdlock.Driver) *gatedDriver {
	return &gatedDriver{Driver: d, entered: make(chan driver.Request, 1), open: make(chan struct{}, 1)}
}

func (g *gatedDriver) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	g.calls.Add(1)
	if g.armed.CompareAndSwap(true, false) {
		g.entered <- req
		<-g.open
	}
	return g.Driver.Acquire(ctx, req)
}

// TestHandoffGrant checks that a release hands the lock to the waiter at
// the head of the queue: two Clients (processes) take a key in turn, and
// each time, before the woken waiter's acquire runs, the release has made
// it the holder with a fencing token above the last one; the acquire then
// only confirms that hold (same token, one call after the wake-up).
func TestHandoffGrant(t *testing.T) {
	for _, name := range modeServers {
		t.Run(name, func(t *testing.T) {
			srv := testsrv.Get(t, name)
			ctx := testCtx(t)
			prefix := testPrefix(t)
			raw := withParams(srv.URL, "prefix", prefix)
			probe := openURL(t, raw)
			defer probe.Close()
			var ds [2]*gatedDriver
			var cs [2]*dlock.Client
			for i := range ds {
				ds[i] = newGated(openURL(t, raw))
				c, err := dlock.New(ds[i])
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				defer func() { // lets a held call go after a failure
					select {
					case ds[i].open <- struct{}{}:
					default:
					}
				}()
				cs[i] = c
			}
			opts := []dlock.LockOption{dlock.WithTTL(time.Minute), dlock.WithBackoff(time.Hour, time.Hour)}
			held, err := cs[0].Lock(ctx, "k", opts...)
			if err != nil {
				t.Fatal(err)
			}
			for round := range 6 {
				w := ds[(round+1)%2]
				before := w.calls.Load()
				got := make(chan *dlock.Lock, 1)
				go func() {
					l, err := cs[(round+1)%2].Lock(ctx, "k", opts...)
					if err != nil {
						t.Errorf("round %d: %v", round, err)
					}
					got <- l
				}()
				// Queued, subscribed and tried again: the next call is
				// the one the release's signal starts.
				waitFor(t, 10*time.Second, "waiter queued", func() bool {
					return queueLen(t, probe, prefix, "k") == 1 && w.calls.Load() == before+2
				})
				w.armed.Store(true)
				if err := held.Release(ctx); err != nil {
					t.Fatal(err)
				}
				req := <-w.entered
				hs, err := probe.List(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if len(hs) != 1 || hs[0].Owner != req.Owner || hs[0].Token <= held.Token() || hs[0].TTL > time.Second {
					t.Fatalf("round %d: holders after the release %+v; want the waiter %q alone, with a token above %d and at most a second's grace", round, hs, req.Owner, held.Token())
				}
				w.open <- struct{}{}
				l := <-got
				if l == nil {
					t.FailNow()
				}
				if l.Token() != hs[0].Token {
					t.Fatalf("round %d: the waiter holds token %d; want the one the release handed it, %d", round, l.Token(), hs[0].Token)
				}
				if n := w.calls.Load() - before; n != 3 {
					t.Fatalf("round %d: the waiter made %d acquire calls; want 3 (queue, after subscribing, confirm)", round, n)
				}
				held = l
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
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
	if len(hs) != 1 || hs[0].Owner != dead.Owner || hs[0].Token <= first.Token || hs[0].TTL > time.Second {
		t.Fatalf("holders after the release %+v; want the dead head %q, with a token above %d and at most a second's grace", hs, dead.Owner, first.Token)
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

// TestHandoffGaveUp checks that a waiter that gives up while the lock is
// being handed to it leaves it to the next in line at once: its confirming
// acquire lands after its wait ended, and the hold is released when it
// does, which hands the lock on. The next waiter's lease and backoff are
// long, so only that handoff can let it in within the test's time.
func TestHandoffGaveUp(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	ctx := testCtx(t)
	prefix := testPrefix(t)
	raw := withParams(srv.URL, "prefix", prefix)
	d := openURL(t, raw)
	defer d.Close()
	holder := request("k", time.Minute)
	mustAcquire(t, d, holder, true)
	opts := []dlock.LockOption{dlock.WithTTL(time.Minute), dlock.WithBackoff(time.Hour, time.Hour)}

	quitter := newGated(openURL(t, raw))
	qc, err := dlock.New(quitter)
	if err != nil {
		t.Fatal(err)
	}
	defer qc.Close()
	defer func() { // lets a held call go after a failure
		select {
		case quitter.open <- struct{}{}:
		default:
		}
	}()
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
		return queueLen(t, d, prefix, "k") == 1 && quitter.calls.Load() == 2
	})
	var attempts atomic.Int64
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

	quitter.armed.Store(true)
	if err := d.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	req := <-quitter.entered
	hs, err := d.List(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].Owner != req.Owner {
		t.Fatalf("holders after the release %+v; want the first waiter %q", hs, req.Owner)
	}
	quit()
	if err := <-gaveUp; !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("the first waiter's Lock = %v; want ErrNotAcquired", err)
	}
	quitter.open <- struct{}{}
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
