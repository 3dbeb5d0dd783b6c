package ratelimit_test

import (
	"context"
	"errors"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	_ "github.com/dlockhq/dlock/memcachedlock"
	"github.com/dlockhq/dlock/memdlock"
	"github.com/dlockhq/dlock/ratelimit"
	_ "github.com/dlockhq/dlock/redisdlock"
	_ "github.com/dlockhq/dlock/sqldlock/postgres"
	_ "github.com/dlockhq/dlock/sqldlock/sqlite"
)

func TestMain(m *testing.M) { testsrv.Main(m, testsrv.Redis, testsrv.Postgres, testsrv.Memcached) }

var stores = []dlocktest.Store{
	{Name: "mem", URL: func(t *testing.T) string { return "mem://" + testsrv.DatabaseName(t.Name()) }},
	{Name: "redis", URL: func(t *testing.T) string {
		return testsrv.Get(t, testsrv.Redis).URL + "?prefix=" + testsrv.DatabaseName(t.Name()) + ":"
	}},
	{Name: "sqlite", URL: func(t *testing.T) string {
		return (&url.URL{Scheme: "sqlite", Path: filepath.Join(t.TempDir(), "locks.db")}).String()
	}},
	{Name: "postgres", URL: func(t *testing.T) string {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		url, _, err := testsrv.Get(t, testsrv.Postgres).NewDatabase(ctx, t.Name())
		if err != nil {
			t.Fatal(err)
		}
		return url
	}},
}

// eachStore runs test on every store.
func eachStore(t *testing.T, test func(t *testing.T, url string)) {
	dlocktest.EachStore(t, stores, test)
}

// open returns a Client of its own on url, as another process would have.
func open(t *testing.T, url string) *dlock.Client { return dlocktest.Open(t, url) }

func newLimiter(t *testing.T, c *dlock.Client, key string, n int, window time.Duration) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(c, key, n, window)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testCtx bounds a test's waits, so that a bug fails it instead of hanging.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func allow(t *testing.T, ctx context.Context, l *ratelimit.Limiter) bool {
	t.Helper()
	ok, err := l.Allow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// N calls are admitted within a window, from any Client; the next one is
// refused, by every Client, and nothing is taken by the refusal.
func TestAdmitsN(t *testing.T) {
	const n = 3
	eachStore(t, func(t *testing.T, url string) {
		ctx := testCtx(t)
		a, b := open(t, url), open(t, url)
		la, lb := newLimiter(t, a, "api", n, time.Hour), newLimiter(t, b, "api", n, time.Hour)
		for i := range n {
			l := la
			if i%2 == 1 {
				l = lb
			}
			if !allow(t, ctx, l) {
				t.Fatalf("call %d of %d refused", i+1, n)
			}
		}
		for _, l := range []*ratelimit.Limiter{la, lb, newLimiter(t, open(t, url), "api", n, time.Hour)} {
			if allow(t, ctx, l) {
				t.Fatalf("call %d admitted within the window", n+1)
			}
		}
		// Each admitted call holds one slot; the refusals hold none.
		hs, err := a.List(ctx, "api")
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) != n {
			t.Errorf("%d slots taken, want %d: %v", len(hs), n, hs)
		}
		// Another key has slots of its own.
		if !allow(t, ctx, newLimiter(t, a, "other", n, time.Hour)) {
			t.Error("another key's first call refused")
		}
	})
}

// Closing the Client, or the process ending, does not free the slots: the
// window holds for the next process.
func TestCloseKeepsSlots(t *testing.T) {
	const n = 2
	eachStore(t, func(t *testing.T, url string) {
		ctx := testCtx(t)
		a := open(t, url)
		la := newLimiter(t, a, "api", n, time.Hour)
		for range n {
			if !allow(t, ctx, la) {
				t.Fatal("call refused")
			}
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if allow(t, ctx, newLimiter(t, open(t, url), "api", n, time.Hour)) {
			t.Fatal("a call was admitted after the admitting Client closed: Close freed its slots")
		}
	})
}

// A slot frees once its window has passed, and not before: a waiting caller
// then takes it. (Users of a key may give different windows: each slot lasts
// its taker's.)
func TestSlotFreesAfterWindow(t *testing.T) {
	const n, window = 2, 300 * time.Millisecond
	eachStore(t, func(t *testing.T, url string) {
		ctx := testCtx(t)
		c := open(t, url)
		long, short := newLimiter(t, c, "api", n, time.Hour), newLimiter(t, c, "api", n, window)
		if !allow(t, ctx, long) {
			t.Fatal("call refused")
		}
		before := time.Now() // before the short slot was granted
		if !allow(t, ctx, short) {
			t.Fatal("call refused")
		}
		if allow(t, ctx, short) {
			t.Fatal("call admitted within the window")
		}
		// Another process waits for the short slot to free.
		if err := newLimiter(t, open(t, url), "api", n, time.Hour).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(before); d < window {
			t.Errorf("a slot freed %v after it was taken, before its window of %v", d, window)
		}
		// The waiter took the freed slot: again every slot is taken.
		if allow(t, ctx, short) {
			t.Error("call admitted while the waiter holds the freed slot")
		}
	})
}

// Wait returns when its context ends, takes nothing, and says why.
func TestWaitHonoursContext(t *testing.T) {
	eachStore(t, func(t *testing.T, url string) {
		ctx := testCtx(t)
		c := open(t, url)
		l := newLimiter(t, c, "api", 2, time.Hour)
		for range 2 {
			if !allow(t, ctx, l) {
				t.Fatal("call refused")
			}
		}
		other := newLimiter(t, open(t, url), "api", 2, time.Hour)
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- other.Wait(wctx) }()
		cancel()
		var err error
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("Wait did not return after its context was cancelled")
		}
		if !errors.Is(err, context.Canceled) || !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("Wait after cancel: %v; want context.Canceled and dlock.ErrNotAcquired", err)
		}
		dctx, dcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer dcancel()
		if err := other.Wait(dctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait past its deadline: %v; want context.DeadlineExceeded", err)
		}
		if hs, err := c.List(ctx, "api"); err != nil || len(hs) != 2 {
			t.Errorf("slots after the abandoned waits: %v, %v; want the 2 admitted", hs, err)
		}
	})
}

// Many goroutines over several Clients asking at once: exactly N are
// admitted in the window.
func TestConcurrentCallersNeverExceedN(t *testing.T) {
	const n, clients, perClient = 5, 4, 6
	eachStore(t, func(t *testing.T, url string) {
		ctx := testCtx(t)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, clients*perClient)
		for range clients {
			l := newLimiter(t, open(t, url), "api", n, time.Hour)
			for range perClient {
				wg.Go(func() {
					<-start
					ok, err := l.Allow(ctx)
					if err != nil {
						errs <- err
					}
					if ok {
						admitted.Add(1)
					}
				})
			}
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if got := admitted.Load(); got != n {
			t.Errorf("%d of %d concurrent calls admitted, want exactly %d", got, clients*perClient, n)
		}
	})
}

// Waiters across goroutines and Clients take freed slots one by one: at no
// moment are more than N slots taken, and every waiter is admitted in the
// end.
func TestConcurrentWaiters(t *testing.T) {
	const n, waiters, window = 2, 6, 200 * time.Millisecond
	eachStore(t, func(t *testing.T, url string) {
		ctx := testCtx(t)
		watcher := open(t, url)
		var wg sync.WaitGroup
		var admitted atomic.Int64
		for i := range waiters {
			l := newLimiter(t, open(t, url), "api", n, window)
			wg.Go(func() {
				if err := l.Wait(ctx); err != nil {
					t.Errorf("waiter %d: %v", i, err)
					return
				}
				admitted.Add(1)
				// No more than N slots are taken while this call is
				// in its window.
				if hs, err := watcher.List(ctx, "api"); err != nil {
					t.Error(err)
				} else if len(hs) > n {
					t.Errorf("%d slots taken, more than %d", len(hs), n)
				}
			})
		}
		wg.Wait()
		if got := admitted.Load(); got != waiters {
			t.Errorf("%d of %d waiters admitted", got, waiters)
		}
	})
}

// memcached counts leases in whole seconds and has plain locks only: one
// call per window works, and a slot still lasts its whole window.
func TestCoarseStore(t *testing.T) {
	ctx := testCtx(t)
	url := testsrv.Get(t, testsrv.Memcached).URL + "?prefix=" + testsrv.DatabaseName(t.Name()) + ":"
	const window = 2 * time.Second
	c := open(t, url)
	if _, err := ratelimit.New(c, "api", 2, window); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("2 per window on memcached: %v; want dlock.ErrUnsupported", err)
	}
	l := newLimiter(t, c, "api", 1, window)
	before := time.Now()
	if !allow(t, ctx, l) {
		t.Fatal("first call refused")
	}
	other := newLimiter(t, open(t, url), "api", 1, window)
	if allow(t, ctx, other) {
		t.Fatal("second call admitted within the window")
	}
	if err := other.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(before); d < window {
		t.Errorf("the slot freed %v after it was taken, before its window of %v", d, window)
	}
}

func TestNewRejects(t *testing.T) {
	c, err := dlock.New(memdlock.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tt := range []struct {
		name   string
		client *dlock.Client
		key    string
		n      int
		window time.Duration
		arg    string
	}{
		{"nil client", nil, "k", 1, time.Second, "client"},
		{"empty key", c, "", 1, time.Second, "key"},
		{"NUL in key", c, "a\x00b", 1, time.Second, "key"},
		{"zero n", c, "k", 0, time.Second, "n"},
		{"negative n", c, "k", -2, time.Second, "n"},
		{"zero window", c, "k", 1, 0, "window"},
		{"negative window", c, "k", 1, -time.Second, "window"},
		{"window below the minimum lease", c, "k", 1, time.Microsecond, "window"},
		{"window within the drift margin", c, "k", 1, 2 * time.Millisecond, "window"},
		{"window above the maximum lease", c, "k", 1, dlock.DefaultMaxTTL + time.Second, "window"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ratelimit.New(tt.client, tt.key, tt.n, tt.window)
			var ae *dlock.ArgError
			if !errors.As(err, &ae) || ae.Name != tt.arg || !errors.Is(err, dlock.ErrInvalidArgument) {
				t.Fatalf("New: %v; want an *dlock.ArgError naming %q", err, tt.arg)
			}
		})
	}
	// A store without semaphores takes one call per window only.
	p, err := dlock.New(plainDriver{memdlock.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := ratelimit.New(p, "k", 2, time.Second); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("2 per window without semaphores: %v; want dlock.ErrUnsupported", err)
	}
	if _, err := ratelimit.New(p, "k", 1, time.Second); err != nil {
		t.Errorf("1 per window without semaphores: %v", err)
	}
}

// Every user of a key must give the same N.
func TestDifferentN(t *testing.T) {
	ctx := testCtx(t)
	c, err := dlock.New(memdlock.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !allow(t, ctx, newLimiter(t, c, "api", 2, time.Hour)) {
		t.Fatal("call refused")
	}
	if _, err := newLimiter(t, c, "api", 3, time.Hour).Allow(ctx); !errors.Is(err, dlock.ErrModeMismatch) {
		t.Errorf("Allow with another N: %v; want dlock.ErrModeMismatch", err)
	}
}

// plainDriver is a store with exclusive locks only.
type plainDriver struct{ *memdlock.Driver }

func (d plainDriver) Capabilities() driver.Capabilities {
	caps := d.Driver.Capabilities()
	caps.Modes = driver.Modes(driver.Exclusive)
	return caps
}

// WithInfo names the taker of each slot in listings.
func TestWithInfo(t *testing.T) {
	ctx := testCtx(t)
	c, err := dlock.New(memdlock.New(), dlock.WithOwnerInfo("client-info"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := ratelimit.New(c, "api", 2, time.Hour, ratelimit.WithInfo("billing-sync"))
	if err != nil {
		t.Fatal(err)
	}
	if !allow(t, ctx, l) || !allow(t, ctx, newLimiter(t, c, "api", 2, time.Hour)) {
		t.Fatal("call refused")
	}
	hs, err := c.List(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	infos := map[string]bool{}
	for _, h := range hs {
		infos[h.Info] = true
	}
	if len(hs) != 2 || !infos["billing-sync"] || !infos["client-info"] {
		t.Errorf("holders %+v: want one slot with the Limiter's info and one with the Client's", hs)
	}
}
