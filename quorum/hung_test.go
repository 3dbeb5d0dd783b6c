package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/quorum"
	"github.com/dlockhq/dlock/redisdlock"
)

// proxiedNodes returns n redisdlock nodes over the first n servers of
// redis-quorum, each dialled through a proxy of its own (closed when t
// ends), with clients set up as the redlock:// opener sets them up but with
// the read timeout given, and the proxies.
func proxiedNodes(t testing.TB, n int, readTimeout time.Duration, opts ...redisdlock.Option) ([]driver.Driver, []*testsrv.Proxy) {
	t.Helper()
	srv := testsrv.Get(t, testsrv.RedisQuorum)
	if len(srv.Addrs) < n {
		t.Fatalf("redis-quorum has %d servers; want %d", len(srv.Addrs), n)
	}
	nodes := make([]driver.Driver, n)
	proxies := make([]*testsrv.Proxy, n)
	for i, a := range srv.Addrs[:n] {
		p, err := testsrv.StartProxy(a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true, ReadTimeout: readTimeout, DialerRetries: 1})
		d, err := redisdlock.New(c, opts...)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i], proxies[i] = &redisNode{Driver: d, client: c}, p
	}
	return nodes, proxies
}

// hungReadTimeout is the node clients' read timeout in the tests where
// every node hangs: a cancelled call returns when it ends.
const hungReadTimeout = time.Second

// hungMargin is what a call may take beyond its bound on a loaded machine.
const hungMargin = 4 * time.Second

// newHungQuorum returns a quorum over n Redis nodes behind proxies, and the
// function that blackholes them all: with every node silent the quorum can
// decide nothing, and only its handling of ctx makes it return. (With only
// a majority hung the others' answers would end calls early.)
func newHungQuorum(t testing.TB, n int, opts ...quorum.Option) (driver.Driver, func()) {
	nodes, proxies := proxiedNodes(t, n, hungReadTimeout)
	q, err := quorum.New(nodes, append([]quorum.Option{quorum.WithLogger(quietLog)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return q, func() {
		for _, p := range proxies {
			p.Block()
		}
	}
}

// TestHungNodesContextErrors checks that, with every node hung, calls fail
// with an error wrapping context.DeadlineExceeded past their deadline and
// context.Canceled when cancelled, within the nodes' read timeout.
func TestHungNodesContextErrors(t *testing.T) {
	q, hang := newHungQuorum(t, 3)
	defer q.Close()
	held := req(key(t))
	if res, err := q.Acquire(ctx(t), held); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	hang()
	calls := map[string]func(ctx context.Context) error{
		"Acquire": func(ctx context.Context) error {
			_, err := q.Acquire(ctx, req(key(t)))
			return err
		},
		"Refresh": func(ctx context.Context) error { return q.Refresh(ctx, held) },
		"Release": func(ctx context.Context) error { return q.Release(ctx, held) },
	}
	dlocktest.HungCalls(t, calls, hungReadTimeout+hungMargin)
}

// TestOneHungRedisNode checks that a real Redis node that hangs (whose
// driver, like go-redis, does not return when cancelled but only at its
// read timeout) does not hold up a quorum's calls once the majority has
// answered.
func TestOneHungRedisNode(t *testing.T) {
	const readTimeout = 5 * time.Second // go-redis's default
	nodes, proxies := proxiedNodes(t, 3, readTimeout)
	q := newQuorum(t, nodes)
	r := req(key(t))
	if res, err := q.Acquire(ctx(t), r); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	proxies[2].Block()
	const prompt = 2 * time.Second // far below the read timeout
	for _, step := range []struct {
		name string
		call func() error
	}{
		{"Refresh", func() error { return q.Refresh(ctx(t), r) }},
		{"Release", func() error { return q.Release(ctx(t), r) }},
		{"Acquire", func() error {
			res, err := q.Acquire(ctx(t), r)
			if err == nil && !res.Acquired {
				err = errors.New("not acquired")
			}
			return err
		}},
		{"Release", func() error { return q.Release(ctx(t), r) }},
	} {
		start := time.Now()
		err := step.call()
		if took := time.Since(start); took > prompt {
			t.Errorf("%s with one hung node took %v; want well within the node's read timeout of %v", step.name, took, readTimeout)
		}
		if err != nil {
			t.Errorf("%s with one hung node = %v", step.name, err)
		}
	}
}

// TestCloseHungNodes checks that Close returns while every node hangs,
// with a call in flight.
func TestCloseHungNodes(t *testing.T) {
	q, hang := newHungQuorum(t, 3)
	hang()
	dlocktest.CloseWhileHung(t, q, req(key(t)), hungReadTimeout+hungMargin)
}

// TestRacingReleasesRedis checks over Redis nodes in every mode that a
// Release of an owner just released fails with ErrNotOwner only, and that
// of two concurrent Releases of one hold one succeeds and the other fails
// with ErrNotOwner only.
func TestRacingReleasesRedis(t *testing.T) {
	for _, mode := range []redisdlock.Protocol{redisdlock.Script, redisdlock.Transaction, redisdlock.Legacy} {
		t.Run(mode.String(), func(t *testing.T) {
			nodes, _ := proxiedNodes(t, 3, 0, redisdlock.WithProtocol(mode))
			q := newQuorum(t, nodes)
			r := req(key(t))
			if res, err := q.Acquire(ctx(t), r); err != nil || !res.Acquired {
				t.Fatalf("Acquire = %+v, %v", res, err)
			}
			if err := q.Release(ctx(t), r); err != nil {
				t.Fatal(err)
			}
			if err := q.Release(ctx(t), r); !errors.Is(err, driver.ErrNotOwner) || errors.Is(err, context.Canceled) {
				t.Fatalf("second Release = %v; want an error wrapping ErrNotOwner only", err)
			}
			for round := range 30 {
				r := req(key(t))
				if res, err := q.Acquire(ctx(t), r); err != nil || !res.Acquired {
					t.Fatalf("Acquire = %+v, %v", res, err)
				}
				start := make(chan struct{})
				errs := make([]error, 2)
				var wg sync.WaitGroup
				for i := range errs {
					wg.Go(func() {
						<-start
						errs[i] = q.Release(ctx(t), r)
					})
				}
				close(start)
				wg.Wait()
				ok := 0
				for _, err := range errs {
					switch {
					case err == nil:
						ok++
					case !errors.Is(err, driver.ErrNotOwner) || strings.Contains(err.Error(), "node "):
						// "node N: ..." marks a node that failed rather
						// than one that did not hold the lock.
						t.Fatalf("round %d: racing Release = %v; want nil or ErrNotOwner only", round, err)
					}
				}
				if ok != 1 {
					t.Fatalf("round %d: racing Releases = %v; want exactly one success", round, errs)
				}
			}
		})
	}
}

// TestLongestLeaseRedis takes and releases a hold of dlock.DefaultMaxTTL
// (7 days) over Redis nodes in every mode.
func TestLongestLeaseRedis(t *testing.T) {
	for _, mode := range []redisdlock.Protocol{redisdlock.Script, redisdlock.Transaction, redisdlock.Legacy} {
		t.Run(mode.String(), func(t *testing.T) {
			nodes, _ := proxiedNodes(t, 3, 0, redisdlock.WithProtocol(mode))
			q := newQuorum(t, nodes)
			c, err := dlock.New(q)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			k := key(t)
			l, err := c.TryLock(ctx(t), k, dlock.WithTTL(dlock.DefaultMaxTTL))
			if err != nil {
				t.Fatalf("TryLock for %v: %v", dlock.DefaultMaxTTL, err)
			}
			hs, err := c.List(ctx(t), k)
			if err != nil || len(hs) != 1 || hs[0].TTL < dlock.DefaultMaxTTL-time.Minute {
				t.Errorf("List = %+v, %v; want one holder with about %v left", hs, err, dlock.DefaultMaxTTL)
			}
			if err := l.Release(ctx(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMaxLimit checks that the quorum declares the smallest of its nodes'
// MaxLimit, zero counting as math.MaxInt32.
func TestMaxLimit(t *testing.T) {
	for _, tc := range []struct {
		limits []int
		want   int
	}{
		{[]int{0, 0, 0}, 0},
		{[]int{0, 100, 0}, 100},
		{[]int{500, 100, 0}, 100},
	} {
		_, nodes := memNodes(3)
		for i, l := range tc.limits {
			caps := nodes[i].Capabilities()
			caps.MaxLimit = l
			nodes[i] = &capsNode{Driver: nodes[i], caps: caps}
		}
		got := newQuorum(t, nodes).Capabilities().MaxLimit
		if got != tc.want && !(tc.want == 0 && got == math.MaxInt32) {
			t.Errorf("nodes' MaxLimit %v: quorum's = %d; want %d", tc.limits, got, tc.want)
		}
	}
}

// TestRedlockURLHidesSecrets checks that the redlock:// opener's error on
// servers that cannot be reached does not show the password, and that it
// refuses URLs that turn the network timeouts off.
func TestRedlockURLHidesSecrets(t *testing.T) {
	dlocktest.OpenHidesSecret(t, "s3cret",
		"redlock://:s3cret@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/?dial_timeout=200ms",
		"redlock://user:s3cret@127.0.0.1:1/0?dial_timeout=200ms&mode=tx",
		"redlock://127.0.0.1:1/?password=s3cret&dial_timeout=200ms",
	)
	srv := testsrv.Get(t, testsrv.RedisQuorum)
	for _, p := range []string{"read_timeout=-1", "write_timeout=0"} {
		dlocktest.RejectURL(t, fmt.Sprintf("redlock://%s?%s", strings.Join(srv.Addrs[:3], ","), p), "url", strings.Split(p, "=")[0])
	}
}

// TestHungNodesPrompt checks that every call returns soon after its context
// is cancelled even when the nodes' clients would wait far longer for the
// hung nodes (a read timeout of 8s): the quorum declares
// CancelsPromptly, so package dlock calls it on the caller's goroutine.
func TestHungNodesPrompt(t *testing.T) {
	nodes, proxies := proxiedNodes(t, 3, 8*time.Second)
	q, err := quorum.New(nodes, quorum.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	if !q.Capabilities().CancelsPromptly {
		t.Fatal("CancelsPromptly is false")
	}
	k := key(t)
	held := req(k)
	if res, err := q.Acquire(ctx(t), held); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	for _, p := range proxies {
		p.Block()
	}
	calls := map[string]func(ctx context.Context) error{
		"Acquire":      func(ctx context.Context) error { _, err := q.Acquire(ctx, req(k+"2")); return err },
		"Refresh":      func(ctx context.Context) error { return q.Refresh(ctx, held) },
		"Release":      func(ctx context.Context) error { return q.Release(ctx, held) },
		"List":         func(ctx context.Context) error { _, err := q.List(ctx, k); return err },
		"ForceRelease": func(ctx context.Context) error { _, err := q.ForceRelease(ctx, k+"3"); return err },
		"Subscribe": func(ctx context.Context) error {
			s, err := q.Subscribe(ctx, req(k))
			if err == nil {
				s.Close()
			}
			return err
		},
	}
	for name, call := range calls {
		cctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- call(cctx) }()
		time.Sleep(50 * time.Millisecond) // on the wire by now, most likely
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s on hung nodes, cancelled = %v; want context.Canceled", name, err)
			}
		case <-time.After(hungMargin):
			t.Errorf("%s on hung nodes still running %v after its context was cancelled", name, hungMargin)
			<-done
		}
	}
	// Close waits for the calls on the hung nodes to time out.
	if err := q.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
}
