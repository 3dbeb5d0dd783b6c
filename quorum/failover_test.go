package quorum_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/quorum"
	"github.com/dlockhq/dlock/redisdlock"
)

// Fault tests on five Redis servers of their own (a fault must not reach
// the servers the other tests share), opened through a redlock:// URL.

// faultTTL is the lease of the fault tests: far longer than they wait for
// clean-ups, so that a hold left behind is seen, not expired.
const faultTTL = time.Minute

// faultCtx bounds every call of the fault tests: generous, so that it is
// no timing assertion, but shorter than a hold left behind on a node lasts.
func faultCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// promptCtx bounds a call that must not wait for hung servers: generous
// for servers that answer, shorter than the Redis clients' read timeout (3s),
// which a call that waits for a hung server runs into.
func promptCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// faultyRedlock starts five Redis servers and returns them and a Client
// over all of them, opened while every server is up.
func faultyRedlock(t *testing.T) (*testsrv.Server, *dlock.Client) {
	t.Helper()
	srv, err := testsrv.StartRedisQuorum(context.Background(), 5)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	c, err := dlock.Open(faultCtx(t), srv.URL, dlock.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return srv, c
}

// waiter opens a second Client over srv. The test closes it when it ends:
// a Client closed while servers hang leaves what its calls left there to the
// leases.
func waiter(t *testing.T, srv *testsrv.Server) *dlock.Client {
	t.Helper()
	w, err := dlock.Open(faultCtx(t), srv.URL, dlock.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// pause stops servers with SIGSTOP until resume is called (at the latest
// when the test ends).
func pause(t *testing.T, servers []*testsrv.Server) (resume func()) {
	t.Helper()
	for _, s := range servers {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	resumed := false
	resume = func() {
		if resumed {
			return
		}
		resumed = true
		for _, s := range servers {
			if err := s.Resume(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(resume)
	return resume
}

// holds returns the number of lock records (holds and fences, not the
// fencing counters) under key on each server.
func holds(t *testing.T, servers []*testsrv.Server, key string) []int {
	t.Helper()
	n := make([]int, len(servers))
	for i, s := range servers {
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
		d, err := redisdlock.New(c)
		if err != nil {
			t.Fatal(err)
		}
		n[i], err = d.Count(faultCtx(t), key)
		d.Close()
		c.Close()
		if err != nil {
			t.Fatalf("counting the holds on %s: %v", s.Addr, err)
		}
	}
	return n
}

// noHolds fails the test if a server keeps a record under key.
func noHolds(t *testing.T, servers []*testsrv.Server, key string) {
	t.Helper()
	if n := holds(t, servers, key); slices.Max(n) != 0 {
		t.Errorf("the servers keep %v records under %q; want none", n, key)
	}
}

// eventuallyNoHolds waits until no server keeps a record under key, and
// fails the test if some still does when ctx ends.
func eventuallyNoHolds(t *testing.T, ctx context.Context, servers []*testsrv.Server, key string) {
	t.Helper()
	for {
		n := holds(t, servers, key)
		if slices.Max(n) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("the servers still keep %v records under %q; want none", n, key)
			for _, s := range servers {
				c := redis.NewClient(&redis.Options{Addr: s.Addr})
				keys, _ := c.Keys(context.Background(), "*"+key+"*").Result()
				for _, k := range keys {
					v, _ := c.Dump(context.Background(), k).Result()
					ttl, _ := c.PTTL(context.Background(), k).Result()
					t.Logf("%s: %q ttl %v %q", s.Addr, k, ttl, v)
				}
				c.Close()
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lockCycles takes and releases a free key with TryLock, then with Lock,
// several times, and hands it from a holder on c to a waiter on w, woken by
// the release.
func lockCycles(t *testing.T, c, w *dlock.Client, k string) {
	t.Helper()
	ctx := faultCtx(t)
	l, err := c.TryLock(ctx, k, dlock.WithTTL(faultTTL))
	if err != nil {
		t.Fatalf("TryLock of a free key: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for i := range 5 {
		l, err := c.Lock(ctx, k, dlock.WithTTL(faultTTL))
		if err != nil {
			t.Fatalf("cycle %d: Lock of a free key: %v", i, err)
		}
		if err := l.Refresh(ctx); err != nil {
			t.Fatalf("cycle %d: Refresh: %v", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("cycle %d: Release: %v", i, err)
		}
	}

	// A waiter on another client is woken by the release: it polls only
	// once an hour, so only a notification brings it the lock in time.
	holder, err := c.Lock(ctx, k, dlock.WithTTL(faultTTL))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := w.Lock(ctx, k, dlock.WithTTL(faultTTL), dlock.WithBackoff(time.Hour, time.Hour))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Errorf("waiter: %v", err)
	}
}

// TestHungMinority pauses two of five servers (SIGSTOP: their ports accept
// connections, nothing answers) and checks that locks of a free key are
// taken, renewed, handed over and released as with every server up, that
// nothing stays on the servers that are up, that Subscribe does not wait
// for the paused servers, and that Close returns once they resume.
func TestHungMinority(t *testing.T) {
	srv, c := faultyRedlock(t)
	servers := srv.Members()
	resume := pause(t, servers[3:])
	k := key(t)
	lockCycles(t, c, waiter(t, srv), k)
	noHolds(t, servers[:3], k)

	// Opening and subscribing do not wait for the paused servers.
	ctx := promptCtx(t)
	c2, err := dlock.Open(ctx, srv.URL, dlock.WithLogger(quietLog))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer c2.Close()
	if ctx.Err() != nil {
		t.Error("Open returned only when its context ended")
	}
	ctx = promptCtx(t)
	sub, err := c.Driver().(*quorum.Driver).Subscribe(ctx, req(k))
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if ctx.Err() != nil {
		t.Error("Subscribe returned only when its context ended")
	}
	sub.Close()

	resume()
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-faultCtx(t).Done():
		t.Error("Close did not return")
	}
}

// TestHungMinorityResumed checks that once two paused servers of five
// resume, the releases in the background leave nothing on them.
func TestHungMinorityResumed(t *testing.T) {
	t.Skip("not yet: a lock-round acquisition that waited in a paused server's socket can still run after the releases that clean up after it (seen in 1 run of 2), and its hold then lasts its lease")
	srv, c := faultyRedlock(t)
	servers := srv.Members()
	resume := pause(t, servers[3:])
	k := key(t)
	lockCycles(t, c, waiter(t, srv), k)
	resume()
	eventuallyNoHolds(t, faultCtx(t), servers, k)
}

// TestHungMinorityClose checks that Close returns while two of five
// servers are paused, after calls on them were left in the background.
func TestHungMinorityClose(t *testing.T) {
	srv, c := faultyRedlock(t)
	pause(t, srv.Members()[3:])
	l, err := c.TryLock(faultCtx(t), key(t), dlock.WithTTL(faultTTL))
	if err != nil {
		t.Fatal(err)
	}
	_ = l // Close releases it
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-faultCtx(t).Done():
		t.Error("Close did not return while two servers are paused")
	}
}

// TestCrashedMinority does what TestHungMinority does with two of five
// servers killed.
func TestCrashedMinority(t *testing.T) {
	srv, c := faultyRedlock(t)
	servers := srv.Members()
	for _, s := range servers[3:] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	k := key(t)
	lockCycles(t, c, waiter(t, srv), k)
	noHolds(t, servers[:3], k)
}

// TestHungMajority pauses three of five servers: an acquisition fails
// with an error that names them, and reports the store as unavailable.
func TestHungMajority(t *testing.T) {
	srv, c := faultyRedlock(t)
	servers := srv.Members()
	pause(t, servers[2:])
	ctx := promptCtx(t)
	_, err := c.TryLock(ctx, key(t), dlock.WithTTL(3*time.Second)) // node timeout 300ms
	if err == nil || !errors.Is(err, dlock.ErrUnavailable) || ctx.Err() != nil {
		t.Fatalf("TryLock with three of five servers paused = %v (context: %v); want ErrUnavailable before the context ends", err, ctx.Err())
	}
	for _, s := range servers[2:] {
		if !strings.Contains(err.Error(), s.Addr) {
			t.Errorf("TryLock = %v; want it to name the paused server %s", err, s.Addr)
		}
	}
}

// measure turns TestMeasureFreeKey on.
var measure = flag.Bool("measure", false, "run TestMeasureFreeKey, which prints the time to acquire a free key with two of five servers paused or killed")

// TestMeasureFreeKey prints the median time to open a redlock:// Client
// and to take and release a free key, with two of five servers paused and
// killed. It asserts nothing: run it with -measure.
func TestMeasureFreeKey(t *testing.T) {
	if !*measure {
		t.Skip("run with -measure")
	}
	for _, fault := range []string{"none", "paused", "killed"} {
		srv, err := testsrv.StartRedisQuorum(context.Background(), 5)
		if err != nil {
			t.Fatal(err)
		}
		servers := srv.Members()
		resume := func() {}
		switch fault {
		case "paused":
			resume = pause(t, servers[3:])
		case "killed":
			for _, s := range servers[3:] {
				s.Kill()
			}
		}
		const rounds = 21
		var open, lock, cycle, closing []time.Duration
		for i := range rounds {
			start := time.Now()
			c, err := dlock.Open(faultCtx(t), srv.URL, dlock.WithLogger(quietLog))
			if err != nil {
				t.Fatal(err)
			}
			opened := time.Now()
			l, err := c.Lock(faultCtx(t), fmt.Sprintf("%s-%d", key(t), i), dlock.WithTTL(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			locked := time.Now()
			if err := l.Release(faultCtx(t)); err != nil {
				t.Fatal(err)
			}
			released := time.Now()
			c.Close()
			open = append(open, opened.Sub(start))
			lock = append(lock, locked.Sub(opened))
			cycle = append(cycle, released.Sub(opened))
			closing = append(closing, time.Since(released))
		}
		median := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
		t.Logf("2 of 5 %-6s: median of %d: open %v, Lock of a free key %v, Lock+Release %v, Close %v",
			fault, rounds, median(open), median(lock), median(cycle), median(closing))
		resume()
		srv.Stop()
	}
}
