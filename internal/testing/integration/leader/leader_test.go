package leader_test

import (
	"context"
	"crypto/rand"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	_ "github.com/dlockhq/dlock/etcddlock"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/leader"
	"github.com/dlockhq/dlock/memdlock"
	_ "github.com/dlockhq/dlock/redisdlock"
	_ "github.com/dlockhq/dlock/sqldlock/postgres"
	_ "github.com/dlockhq/dlock/sqldlock/sqlite"
	_ "github.com/dlockhq/dlock/zkdlock"
)

func TestMain(m *testing.M) {
	if runChild() {
		return
	}
	testsrv.Main(m, testsrv.Redis, testsrv.Postgres, testsrv.Etcd, testsrv.ZooKeeper, testsrv.Memcached)
}

// A backend names a store that several Clients (standing for several
// processes) can share.
type backend struct {
	name string
	// url returns the URL of a store for one test.
	url func(t *testing.T) string
	// ttl is a short lease for the tests that wait for one to end.
	ttl time.Duration
}

// Sessions on etcd and ZooKeeper are made as short as the servers allow,
// so that a paused leader's holds end soon.
var backends = []backend{
	{"mem", func(t *testing.T) string { return "mem://leader-" + rand.Text() }, 300 * time.Millisecond},
	{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "dlock.db") }, 500 * time.Millisecond},
	{"redis", func(t *testing.T) string { return testsrv.Get(t, testsrv.Redis).URL }, 300 * time.Millisecond},
	{"postgres", func(t *testing.T) string { return testsrv.Get(t, testsrv.Postgres).URL }, 500 * time.Millisecond},
	{"etcd", func(t *testing.T) string { return testsrv.Get(t, testsrv.Etcd).URL + "?session=2s" }, time.Second},
	{"zookeeper", func(t *testing.T) string { return testsrv.Get(t, testsrv.ZooKeeper).URL + "?session=1s" }, time.Second},
}

// open returns a Client of its own over url, closed when t ends.
func open(t *testing.T, url string) *dlock.Client {
	t.Helper()
	c, err := dlock.Open(dlocktest.Ctx(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// observe starts an observer of key that ends with the test.
func observe(t *testing.T, c *dlock.Client, key string) <-chan leader.Leader {
	t.Helper()
	ctx, cancel := context.WithCancel(dlocktest.Ctx(t))
	ch, err := leader.Observe(ctx, c, key, leader.WithPollInterval(50*time.Millisecond))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		for range ch { // wait for the observer to end
		}
	})
	return ch
}

// await reads ch until a leader satisfying ok arrives, and returns it.
func await(t *testing.T, ch <-chan leader.Leader, what string, ok func(leader.Leader) bool) leader.Leader {
	t.Helper()
	timeout := time.After(30 * time.Second) // a bound, not a measurement
	for {
		select {
		case l, open := <-ch:
			if !open {
				t.Fatalf("observer ended before it saw %s", what)
			}
			if ok(l) {
				return l
			}
		case <-timeout:
			t.Fatalf("observer did not see %s", what)
		}
	}
}

// ended waits for term to end.
func ended(t *testing.T, term *leader.Term) {
	t.Helper()
	select {
	case <-term.Done():
	case <-time.After(30 * time.Second): // a bound, not a measurement
		t.Fatal("the term did not end")
	}
}

func forEach(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b)
		})
	}
}

// holders returns the holders of exactly key.
func holders(t *testing.T, c *dlock.Client, key string) []dlock.Holder {
	t.Helper()
	hs, err := c.List(dlocktest.Ctx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	var out []dlock.Holder
	for _, h := range hs {
		if h.Key == key {
			out = append(out, h)
		}
	}
	return out
}

// TestOneLeaderAtATime runs campaigners on Clients of their own, each
// taking the lead a few times: never two leaders at once, every term's
// number above the earlier ones', Current reporting the term while it
// lasts, and an observer that sees term numbers only grow.
func TestOneLeaderAtATime(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		url, key := b.url(t), dlocktest.Key(t, "leader")
		ch := observe(t, open(t, url), key)
		const campaigners, rounds = 3, 3
		var (
			leaders atomic.Int32
			mu      sync.Mutex
			last    uint64
			terms   = map[uint64]string{}
			wg      sync.WaitGroup
		)
		for i := range campaigners {
			c := open(t, url)
			name := "node-" + string(rune('a'+i))
			wg.Go(func() {
				ctx := dlocktest.Ctx(t)
				for range rounds {
					term, err := leader.Campaign(ctx, c, key, name)
					if err != nil {
						t.Error(err)
						return
					}
					if n := leaders.Add(1); n != 1 {
						t.Errorf("%s leads with %d leaders at once", name, n)
					}
					mu.Lock()
					if term.Number() <= last {
						t.Errorf("%s: term %d follows term %d", name, term.Number(), last)
					}
					last = term.Number()
					terms[term.Number()] = name
					mu.Unlock()
					cur, err := leader.Current(ctx, c, key)
					if err != nil {
						t.Error(err)
					} else if want := (leader.Leader{Value: name, Term: term.Number(), OwnerID: term.OwnerID()}); cur != want {
						t.Errorf("Current = %+v while %s leads; want %+v", cur, name, want)
					}
					leaders.Add(-1)
					if err := term.Resign(ctx); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()

		// Whatever the observer saw until nobody led, in order: real
		// terms (it may miss some), with numbers growing.
		var seen uint64
		await(t, ch, "nobody leading", func(l leader.Leader) bool {
			if !l.Elected() {
				return true
			}
			if l.Term < seen {
				t.Errorf("observer saw term %d after term %d", l.Term, seen)
			}
			mu.Lock()
			name, ok := terms[l.Term]
			mu.Unlock()
			if !ok || name != l.Value {
				t.Errorf("observer saw %+v, not a term that was held", l)
			}
			seen = l.Term
			return false
		})
	})
}

// TestResignHandsOver resigns a leader while another campaigns: the second
// leads with a greater term number, the observer sees it, and resigning
// again is harmless.
func TestResignHandsOver(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx, url, key := dlocktest.Ctx(t), b.url(t), dlocktest.Key(t, "leader")
		ca, cb := open(t, url), open(t, url)
		a, err := leader.Campaign(ctx, ca, key, "a")
		if err != nil {
			t.Fatal(err)
		}
		ch := observe(t, open(t, url), key)
		await(t, ch, "a leading", func(l leader.Leader) bool { return l.Value == "a" && l.Term == a.Number() })

		got := make(chan *leader.Term, 1)
		go func() {
			term, err := leader.Campaign(ctx, cb, key, "b")
			if err != nil {
				t.Error(err)
			}
			got <- term
		}()
		if err := a.Resign(ctx); err != nil {
			t.Fatalf("Resign: %v", err)
		}
		if err := a.Context().Err(); err == nil {
			t.Error("the term's context is live after Resign")
		}
		if cause := context.Cause(a.Context()); !errors.Is(cause, dlock.ErrNotHeld) {
			t.Errorf("cause after Resign = %v; want ErrNotHeld", cause)
		}
		if err := a.Resign(ctx); err != nil {
			t.Errorf("second Resign = %v; want nil", err)
		}
		bt := <-got
		if bt == nil {
			return
		}
		if bt.Number() <= a.Number() {
			t.Errorf("b's term %d is not after a's %d", bt.Number(), a.Number())
		}
		await(t, ch, "b leading", func(l leader.Leader) bool { return l.Value == "b" && l.Term == bt.Number() })
		// A holder of another key that starts with this one is no
		// leader of it.
		other, err := open(t, url).Lock(ctx, key+"x", dlock.WithInfo("other"))
		if err != nil {
			t.Fatal(err)
		}
		defer other.Release(ctx)
		if err := bt.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if l := await(t, ch, "a change", func(leader.Leader) bool { return true }); l.Elected() {
			t.Errorf("after b resigned, the observer saw %+v; want nobody leading", l)
		}
	})
}

// notifies reports whether c's driver notifies releases of key: it is a
// driver.Notifier whose Subscribe does not report ErrUnsupported.
func notifies(t *testing.T, c *dlock.Client, key string) bool {
	n, ok := c.Driver().(driver.Notifier)
	if !ok {
		return false
	}
	sub, err := n.Subscribe(dlocktest.Ctx(t), driver.Request{Key: key, Owner: "notifies", TTL: time.Minute, Mode: driver.Exclusive})
	if errors.Is(err, driver.ErrUnsupported) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	return true
}

// TestObserveByNotification resigns a leader whose lease is long, with an
// observer that polls once an hour: on the stores that notify releases the
// observer learns of the end of the term all the same.
func TestObserveByNotification(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx, url, key := dlocktest.Ctx(t), b.url(t), dlocktest.Key(t, "leader")
		c := open(t, url)
		if !notifies(t, c, key) {
			t.Skip("the backend does not notify releases")
		}
		a, err := leader.Campaign(ctx, c, key, "a", leader.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch, err := leader.Observe(octx, open(t, url), key, leader.WithPollInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if l := <-ch; l.Term != a.Number() {
			t.Fatalf("observer saw %+v first; want a's term %d", l, a.Number())
		}
		if err := a.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		await(t, ch, "nobody leading", func(l leader.Leader) bool { return !l.Elected() })
		cancel()
		for range ch {
		}
	})
}

// TestLossObserved removes a leader's hold behind its back (as an operator
// would): the leader's term ends with ErrLost, Resign reports the loss, and
// the observer sees a successor with a greater term number.
func TestLossObserved(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx, url, key := dlocktest.Ctx(t), b.url(t), dlocktest.Key(t, "leader")
		ca, cb := open(t, url), open(t, url)
		if _, ok := ca.Driver().(driver.ForceReleaser); !ok {
			t.Skip("the backend cannot remove a holder")
		}
		a, err := leader.Campaign(ctx, ca, key, "a", leader.WithTTL(b.ttl))
		if err != nil {
			t.Fatal(err)
		}
		ch := observe(t, open(t, url), key)
		await(t, ch, "a leading", func(l leader.Leader) bool { return l.Term == a.Number() })
		if n, err := cb.ForceRelease(ctx, key); err != nil || n != 1 {
			t.Fatalf("ForceRelease = %d, %v", n, err)
		}
		ended(t, a) // at a's next renewal
		if cause := context.Cause(a.Context()); !errors.Is(cause, dlock.ErrLost) {
			t.Errorf("cause = %v; want ErrLost", cause)
		}
		if err := a.Resign(ctx); !errors.Is(err, dlock.ErrLost) {
			t.Errorf("Resign after the loss = %v; want ErrLost", err)
		}
		bt, err := leader.Campaign(ctx, cb, key, "b")
		if err != nil {
			t.Fatal(err)
		}
		if bt.Number() <= a.Number() {
			t.Errorf("b's term %d is not after a's %d", bt.Number(), a.Number())
		}
		await(t, ch, "b leading", func(l leader.Leader) bool { return l.Value == "b" && l.Term == bt.Number() })
	})
}

// TestCancelledCampaign cancels a campaign that waits: it fails with both
// ErrNotAcquired and the context's error, and leaves nothing on the store:
// once the leader resigns, the key is free at once.
func TestCancelledCampaign(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx, url, key := dlocktest.Ctx(t), b.url(t), dlocktest.Key(t, "leader")
		ca, cb := open(t, url), open(t, url)
		a, err := leader.Campaign(ctx, ca, key, "a")
		if err != nil {
			t.Fatal(err)
		}
		// A wait bound, not a synchronisation: the campaign fails
		// whether or not it reached the store in time.
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if _, err := leader.Campaign(wctx, cb, key, "b", leader.WithTTL(time.Minute)); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("cancelled Campaign = %v; want ErrNotAcquired and DeadlineExceeded", err)
		}
		if hs := holders(t, cb, key); len(hs) != 1 || hs[0].Info != "a" {
			t.Errorf("holders = %+v; want a's alone", hs)
		}
		if err := a.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if hs := holders(t, cb, key); len(hs) != 0 {
			t.Errorf("holders after Resign = %+v; want none", hs)
		}
		// A queue entry left by the cancelled campaign would hold a
		// fresh campaign back on the stores that queue, until the
		// entry's lease of a minute ran out. (The clean-up may land
		// after the cancelled Campaign returned, on a slow store.)
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		l, err := open(t, url).Lock(fctx, key)
		if err != nil {
			t.Fatalf("the key is not free after the cancelled campaign: %v", err)
		}
		l.Release(ctx)
	})
}

// TestCloseEndsTerms closes a Client that leads and campaigns: the term
// ends with ErrClosed, the campaign fails with ErrClosed, and the key is
// free.
func TestCloseEndsTerms(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		ctx, url, key := dlocktest.Ctx(t), b.url(t), dlocktest.Key(t, "leader")
		c, other := open(t, url), open(t, url)
		a, err := leader.Campaign(ctx, c, key, "a")
		if err != nil {
			t.Fatal(err)
		}
		ch := observe(t, other, key)
		await(t, ch, "a leading", func(l leader.Leader) bool { return l.Term == a.Number() })
		waiting := make(chan error, 1)
		go func() {
			_, err := leader.Campaign(ctx, c, key, "b") // waits for a
			waiting <- err
		}()
		// Whether the campaign is waiting yet or not, Close ends it.
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		ended(t, a)
		if cause := context.Cause(a.Context()); !errors.Is(cause, dlock.ErrClosed) {
			t.Errorf("cause = %v; want ErrClosed", cause)
		}
		if err := <-waiting; !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("campaign on a closing Client = %v; want ErrClosed", err)
		}
		if err := a.Resign(ctx); !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("Resign after Close = %v; want ErrClosed", err)
		}
		await(t, ch, "nobody leading", func(l leader.Leader) bool { return !l.Elected() })
		if hs := holders(t, other, key); len(hs) != 0 {
			t.Errorf("holders after Close = %+v; want none", hs)
		}
	})
}

// listless hides every optional interface of a driver, listing included.
type listless struct{ driver.Driver }

func TestUnsupported(t *testing.T) {
	ctx := dlocktest.Ctx(t)
	c, err := dlock.New(listless{memdlock.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := leader.Campaign(ctx, c, "k", "v"); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("Campaign = %v; want ErrUnsupported", err)
	}
	if _, err := leader.Current(ctx, c, "k"); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("Current = %v; want ErrUnsupported", err)
	}
	if _, err := leader.Observe(ctx, c, "k"); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("Observe = %v; want ErrUnsupported", err)
	}
}

func TestBadInput(t *testing.T) {
	ctx := dlocktest.Ctx(t)
	c, err := dlock.New(memdlock.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		name, arg string
		call      func() error
	}{
		{"long value", "value", func() error {
			_, err := leader.Campaign(ctx, c, "k", strings.Repeat("v", dlock.MaxInfoLen+1))
			return err
		}},
		{"value not UTF-8", "value", func() error { _, err := leader.Campaign(ctx, c, "k", "\xff"); return err }},
		{"value with NUL", "value", func() error { _, err := leader.Campaign(ctx, c, "k", "a\x00b"); return err }},
		{"empty key", "key", func() error { _, err := leader.Campaign(ctx, c, "", "v"); return err }},
		{"bad TTL", "ttl", func() error { _, err := leader.Campaign(ctx, c, "k", "v", leader.WithTTL(-time.Second)); return err }},
		{"Current empty key", "key", func() error { _, err := leader.Current(ctx, c, ""); return err }},
		{"Observe key with NUL", "key", func() error { _, err := leader.Observe(ctx, c, "a\x00"); return err }},
		{"poll interval", "poll interval", func() error {
			_, err := leader.Observe(ctx, c, "k", leader.WithPollInterval(0))
			return err
		}},
		{"nil client", "client", func() error { _, err := leader.Current(ctx, nil, "k"); return err }},
	} {
		var ae *dlock.ArgError
		if err := tc.call(); !errors.As(err, &ae) || ae.Name != tc.arg {
			t.Errorf("%s: %v; want an *ArgError for %s", tc.name, err, tc.arg)
		}
	}
	if hs, err := c.List(ctx, ""); err != nil || len(hs) != 0 {
		t.Errorf("holders after bad input = %+v, %v; want none", hs, err)
	}
	// The longest value is stored whole.
	long := strings.Repeat("é", dlock.MaxInfoLen/2)
	term, err := leader.Campaign(ctx, c, "k", long)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Resign(ctx)
	if l, err := leader.Current(ctx, c, "k"); err != nil || l.Value != long {
		t.Errorf("Current = %q, %v; want the value stored whole", l.Value, err)
	}
}

// TestObserveEndsWithClient closes the Client an observer reads through:
// the channel is closed at the observer's next read.
func TestObserveEndsWithClient(t *testing.T) {
	c, err := dlock.New(memdlock.New())
	if err != nil {
		t.Fatal(err)
	}
	ch, err := leader.Observe(dlocktest.Ctx(t), c, "k", leader.WithPollInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if l := <-ch; l.Elected() {
		t.Fatalf("observer saw %+v; want nobody leading", l)
	}
	c.Close()
	timeout := time.After(30 * time.Second) // a bound, not a measurement
	for {
		select {
		case l, open := <-ch:
			if !open {
				return
			}
			t.Errorf("observer of a closed Client saw %+v", l)
		case <-timeout:
			t.Fatal("the observer did not end with its Client")
		}
	}
}
