package redisdlock_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/redisdlock"
)

// countingDriver counts the Acquire calls made through it; Subscribe and
// the rest are the Driver's own.
type countingDriver struct {
	*redisdlock.Driver
	n *atomic.Int64
}

func (c countingDriver) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	c.n.Add(1)
	return c.Driver.Acquire(ctx, req)
}

// waitFor polls cond until it holds or d has passed.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// queueLen returns the number of waiters queued for key.
func queueLen(t *testing.T, d *redisdlock.Driver, prefix, key string) int64 {
	t.Helper()
	n, err := d.Client().ZCard(testCtx(t), "{"+prefix+key+"}:queue").Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWakeNextInLine checks that a release wakes the waiter next in line
// and not every waiter: n waiters, each with a Driver and a Client of its
// own (processes of a fleet), queue for one key and take it in turn, in
// the order they queued, with about one attempt each. Their backoff and
// lease are long, so only notifications can make them take the key in
// time.
func TestWakeNextInLine(t *testing.T) {
	for _, name := range modeServers {
		t.Run(name, func(t *testing.T) {
			srv := testsrv.Get(t, name)
			ctx := testCtx(t)
			prefix := testPrefix(t)
			raw := withParams(srv.URL, "prefix", prefix)
			holder, err := dlock.New(openURL(t, raw))
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			probe := openURL(t, raw)
			defer probe.Close()
			held, err := holder.Lock(ctx, "k", dlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}

			const n = 16
			var (
				attempts atomic.Int64
				mu       sync.Mutex
				order    []int
				wg       sync.WaitGroup
			)
			for i := range n {
				c, err := dlock.New(countingDriver{openURL(t, raw), &attempts})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				wg.Go(func() {
					l, err := c.Lock(ctx, "k", dlock.WithTTL(time.Minute), dlock.WithBackoff(time.Hour, time.Hour))
					if err != nil {
						t.Errorf("waiter %d: %v", i, err)
						return
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					if err := l.Release(ctx); err != nil {
						t.Errorf("waiter %d release: %v", i, err)
					}
				})
				// Queued, subscribed and tried again: then the next.
				waitFor(t, 10*time.Second, "waiter "+strconv.Itoa(i)+" queued", func() bool {
					return queueLen(t, probe, prefix, "k") == int64(i+1) && attempts.Load() == int64(2*(i+1))
				})
			}
			before := attempts.Load()
			start := time.Now()
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			after := attempts.Load() - before
			t.Logf("%d waiters took the key in %v with %d attempts", n, time.Since(start), after)
			for i, w := range order {
				if w != i {
					t.Fatalf("waiters took the key in the order %v; want the order they queued in", order)
				}
			}
			if len(order) != n {
				t.Fatalf("%d of %d waiters took the key", len(order), n)
			}
			// One attempt each; a broadcast makes it n(n+1)/2.
			if after > n+4 {
				t.Fatalf("%d attempts for %d handoffs; want at most %d", after, n, n+4)
			}
		})
	}
}

// TestWakeReadersAndPermits checks that a release wakes every reader that
// may enter (the readers before the first queued writer), and as many
// waiters for permits as it frees.
func TestWakeReadersAndPermits(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	for _, tc := range []struct {
		name    string
		opts    []dlock.LockOption
		holders int
	}{
		{"readers", []dlock.LockOption{dlock.Shared()}, 1},
		{"permits", []dlock.LockOption{dlock.WithLimit(3)}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			prefix := testPrefix(t)
			raw := withParams(srv.URL, "prefix", prefix)
			holder, err := dlock.New(openURL(t, raw))
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			probe := openURL(t, raw)
			defer probe.Close()
			long := []dlock.LockOption{dlock.WithTTL(time.Minute), dlock.WithBackoff(time.Hour, time.Hour)}
			var held []*dlock.Lock
			for range tc.holders {
				hopts := append([]dlock.LockOption{dlock.WithTTL(time.Minute)}, tc.opts...)
				if tc.name == "readers" {
					hopts = []dlock.LockOption{dlock.WithTTL(time.Minute)} // a writer
				}
				l, err := holder.Lock(ctx, "k", hopts...)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, l)
			}
			const n = 3
			var attempts atomic.Int64
			got := make(chan *dlock.Lock, n)
			for i := range n {
				c, err := dlock.New(countingDriver{openURL(t, raw), &attempts})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				go func() {
					l, err := c.Lock(ctx, "k", append(long, tc.opts...)...)
					if err != nil {
						t.Errorf("waiter %d: %v", i, err)
					}
					got <- l
				}()
				waitFor(t, 10*time.Second, "waiter "+strconv.Itoa(i)+" queued", func() bool {
					return queueLen(t, probe, prefix, "k") == int64(i+1) && attempts.Load() == int64(2*(i+1))
				})
			}
			for _, l := range held {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			timeout := time.After(10 * time.Second)
			for range n {
				select {
				case l := <-got:
					if l != nil {
						defer l.Release(ctx)
					}
				case <-timeout:
					t.Fatal("the waiters were not all let in within 10s")
				}
			}
		})
	}
}

// TestWakeAfterDeadHead checks that a waiter whose predecessor at the head
// of the queue died is still let in: by its own poll once the dead entry
// has expired, and at once when another script removes the expired entry.
func TestWakeAfterDeadHead(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	for _, tc := range []struct {
		name   string
		ttl    time.Duration // the live waiter's lease: it polls at a third of it
		prune  bool          // a TryLock removes the expired entry
		within time.Duration
	}{
		{"poll", 3 * time.Second, false, 4 * time.Second},
		{"pruned", time.Minute, true, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			prefix := testPrefix(t)
			raw := withParams(srv.URL, "prefix", prefix)
			d := openURL(t, raw)
			defer d.Close()
			holder := request("k", time.Minute)
			mustAcquire(t, d, holder, true)
			// The head of the queue queues once and is never heard of
			// again.
			dead := queued(request("k", 300*time.Millisecond), driver.Exclusive, 0)
			mustAcquire(t, d, dead, false)

			var attempts atomic.Int64
			c, err := dlock.New(countingDriver{openURL(t, raw), &attempts})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got := make(chan error, 1)
			go func() {
				l, err := c.Lock(ctx, "k", dlock.WithTTL(tc.ttl), dlock.WithBackoff(time.Hour, time.Hour))
				if err == nil {
					err = l.Release(ctx)
				}
				got <- err
			}()
			waitFor(t, 10*time.Second, "waiter queued", func() bool {
				return queueLen(t, d, prefix, "k") == 2 && attempts.Load() == 2
			})
			// The release signals the dead head only.
			if err := d.Release(ctx, holder); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if tc.prune {
				time.Sleep(400 * time.Millisecond) // the dead entry expires
				mustAcquire(t, d, request("k", time.Minute), false)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("let in after %v", time.Since(start))
			case <-time.After(tc.within):
				t.Fatalf("the waiter behind a dead head was not let in within %v", tc.within)
			}
		})
	}
}

// TestWakeFromOtherSteps checks that a Script-mode waiter at the head of
// the queue is signalled by a Transaction-mode release, and every queued
// waiter by a forced release (Script and Transaction mode).
func TestWakeFromOtherSteps(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	for _, tc := range []struct {
		name, mode string
		force      bool
		waiters    int
	}{
		{"tx-release", "tx", false, 1},
		{"tx-force", "tx", true, 3},
		{"script-force", "script", true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			prefix := testPrefix(t)
			raw := withParams(srv.URL, "prefix", prefix)
			d := openURL(t, withParams(srv.URL, "prefix", prefix, "mode", tc.mode))
			defer d.Close()
			h := request("k", time.Minute)
			mustAcquire(t, d, h, true)
			var attempts atomic.Int64
			got := make(chan error, tc.waiters)
			for i := range tc.waiters {
				c, err := dlock.New(countingDriver{openURL(t, raw), &attempts})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				go func() {
					// Shared: after a forced release the waiters get
					// in together.
					l, err := c.Lock(ctx, "k", dlock.Shared(), dlock.WithTTL(time.Minute), dlock.WithBackoff(time.Hour, time.Hour))
					if err == nil {
						defer l.Release(ctx)
					}
					got <- err
				}()
				waitFor(t, 10*time.Second, "waiter "+strconv.Itoa(i)+" queued", func() bool {
					return queueLen(t, d, prefix, "k") == int64(i+1) && attempts.Load() == int64(2*(i+1))
				})
			}
			if tc.force {
				if _, err := d.ForceRelease(ctx, "k"); err != nil {
					t.Fatal(err)
				}
			} else if err := d.Release(ctx, h); err != nil {
				t.Fatal(err)
			}
			timeout := time.After(10 * time.Second)
			for range tc.waiters {
				select {
				case err := <-got:
					if err != nil {
						t.Fatal(err)
					}
				case <-timeout:
					t.Fatal("the waiters were not all let in within 10s")
				}
			}
		})
	}
}
