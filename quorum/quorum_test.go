package quorum_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/drivertest"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/memdlock"
	"github.com/dlockhq/dlock/quorum"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(contenderEnv); url != "" {
		os.Exit(contender(url))
	}
	testsrv.Main(m, testsrv.RedisQuorum)
}

// quietLog discards the warnings tests provoke on purpose.
var quietLog = slog.New(slog.DiscardHandler)

// memConfig is the conformance configuration over n memdlock nodes.
func memConfig(n int) drivertest.Config {
	nodes := make([]*memdlock.Driver, n)
	for i := range nodes {
		nodes[i] = memdlock.New()
	}
	return drivertest.Config{
		NewDriver: func(t testing.TB) driver.Driver {
			ds := make([]driver.Driver, n)
			for i, nd := range nodes {
				ds[i] = nd.Share()
			}
			q, err := quorum.New(ds, quorum.WithLogger(quietLog))
			if err != nil {
				t.Fatal(err)
			}
			return q
		},
		Residue: func(_ context.Context, prefix string) (int, error) {
			total := 0
			for _, nd := range nodes {
				total += nd.Count(prefix)
			}
			return total, nil
		},
	}
}

func TestConformanceMem3(t *testing.T) { drivertest.Run(t, memConfig(3)) }
func TestConformanceMem5(t *testing.T) { drivertest.Run(t, memConfig(5)) }

func BenchmarkDriver(b *testing.B) {
	b.Run("mem3", func(b *testing.B) { drivertest.RunBenchmarks(b, memConfig(3)) })
	b.Run("mem5", func(b *testing.B) { drivertest.RunBenchmarks(b, memConfig(5)) })
}

// ---- helpers ----

// Helpers shared with the other backends' tests.
var ctx, req = dlocktest.Ctx, dlocktest.Request

func key(t testing.TB) string { return dlocktest.Key(t, "q") }

// memNodes returns n fresh memdlock stores and quorum node drivers over
// them.
func memNodes(n int) ([]*memdlock.Driver, []driver.Driver) {
	stores := make([]*memdlock.Driver, n)
	ds := make([]driver.Driver, n)
	for i := range stores {
		stores[i] = memdlock.New()
		ds[i] = stores[i].Share()
	}
	return stores, ds
}

func newQuorum(t testing.TB, nodes []driver.Driver, opts ...quorum.Option) *quorum.Driver {
	t.Helper()
	q, err := quorum.New(nodes, append([]quorum.Option{quorum.WithLogger(quietLog)}, opts...)...)
	if err != nil {
		t.Fatalf("quorum.New: %v", err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// node wraps a driver with fault hooks. A nil hook forwards the call.
type node struct {
	driver.Driver
	acquire func(ctx context.Context, r driver.Request) (driver.Result, error)
	refresh func(ctx context.Context, r driver.Request) error
	release func(ctx context.Context, r driver.Request) error
	closed  atomic.Int32
}

func (n *node) Acquire(ctx context.Context, r driver.Request) (driver.Result, error) {
	if n.acquire != nil {
		return n.acquire(ctx, r)
	}
	return n.Driver.Acquire(ctx, r)
}

func (n *node) Refresh(ctx context.Context, r driver.Request) error {
	if n.refresh != nil {
		return n.refresh(ctx, r)
	}
	return n.Driver.Refresh(ctx, r)
}

func (n *node) Release(ctx context.Context, r driver.Request) error {
	if n.release != nil {
		return n.release(ctx, r)
	}
	return n.Driver.Release(ctx, r)
}

func (n *node) Close() error {
	n.closed.Add(1)
	return n.Driver.Close()
}

var errDown = errors.New("node down")

// down returns a node that fails every call, as an unreachable server does.
func down() *node {
	return &node{
		Driver:  memdlock.New(),
		acquire: func(context.Context, driver.Request) (driver.Result, error) { return driver.Result{}, errDown },
		refresh: func(context.Context, driver.Request) error { return errDown },
		release: func(context.Context, driver.Request) error { return errDown },
	}
}

// lostReply returns a node that applies Acquire but loses the reply.
func lostReply(d driver.Driver) *node {
	n := &node{Driver: d}
	n.acquire = func(ctx context.Context, r driver.Request) (driver.Result, error) {
		if _, err := d.Acquire(ctx, r); err != nil {
			return driver.Result{}, err
		}
		return driver.Result{}, errors.New("connection reset after the request was sent")
	}
	return n
}

// ---- New ----

func TestNewRejects(t *testing.T) {
	a, b := memdlock.New(), memdlock.New()
	defer a.Close()
	defer b.Close()
	for _, tc := range []struct {
		name  string
		nodes []driver.Driver
		opts  []quorum.Option
		arg   string
	}{
		{"no nodes", nil, nil, "nodes"},
		{"empty", []driver.Driver{}, nil, "nodes"},
		{"nil node", []driver.Driver{a, nil, b}, nil, "nodes[1]"},
		{"duplicate", []driver.Driver{a, b, a}, nil, "nodes[2]"},
		{"drift factor", []driver.Driver{a}, []quorum.Option{quorum.WithDriftFactor(0.5)}, "drift factor"},
		{"negative drift factor", []driver.Driver{a}, []quorum.Option{quorum.WithDriftFactor(-0.1)}, "drift factor"},
		{"drift margin", []driver.Driver{a}, []quorum.Option{quorum.WithDriftMargin(-time.Millisecond)}, "drift margin"},
	} {
		q, err := quorum.New(tc.nodes, tc.opts...)
		var ae *dlock.ArgError
		if q != nil || !errors.As(err, &ae) || ae.Name != tc.arg || !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: New = %v, %v; want an *ArgError naming %q", tc.name, q, err, tc.arg)
		}
	}
	// The duplicate is named with the node it repeats.
	_, err := quorum.New([]driver.Driver{a, b, a})
	if err == nil || !strings.Contains(err.Error(), "nodes[0]") {
		t.Errorf("duplicate error %v does not name the first occurrence", err)
	}
	// Two drivers over one store are separate values: New cannot tell.
	if q, err := quorum.New([]driver.Driver{a.Share(), a.Share(), b}); err != nil {
		t.Errorf("New with distinct values = %v", err)
	} else {
		q.Close()
	}
}

func TestNewWarnsOnEvenN(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	_, nodes := memNodes(4)
	q, err := quorum.New(nodes, quorum.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if q.Quorum() != 3 || q.Nodes() != 4 {
		t.Errorf("Quorum, Nodes = %d, %d; want 3, 4", q.Quorum(), q.Nodes())
	}
	if !strings.Contains(buf.String(), "even number of nodes") {
		t.Errorf("no warning for 4 nodes; log: %q", buf.String())
	}
	buf.Reset()
	_, nodes = memNodes(3)
	q3, err := quorum.New(nodes, quorum.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	defer q3.Close()
	if buf.Len() != 0 {
		t.Errorf("warning for 3 nodes: %q", buf.String())
	}
}

func TestCapabilities(t *testing.T) {
	_, nodes := memNodes(3)
	slowMin := &capsNode{Driver: nodes[1], caps: driver.Capabilities{MinTTL: time.Second, MaxTTL: time.Hour, MaxKeyLen: 200, ServerClock: true}}
	q := newQuorum(t, []driver.Driver{nodes[0], slowMin, nodes[2]})
	caps := q.Capabilities()
	// The fence key takes a few bytes of the smallest MaxKeyLen. Every
	// call returns once its ctx ends.
	want := driver.Capabilities{Modes: driver.Modes(driver.Exclusive), ServerClock: true, MaxKeyLen: 200 - 13, MinTTL: time.Second, MaxTTL: time.Hour, CancelsPromptly: true}
	if caps != want {
		t.Errorf("Capabilities = %+v; want %+v", caps, want)
	}
	q = newQuorum(t, []driver.Driver{memdlock.New(), memdlock.New(), memdlock.New()}, quorum.WithoutFenceRound())
	if got := q.Capabilities().MaxKeyLen; got != 1024 {
		t.Errorf("MaxKeyLen without the fence round = %d; want 1024", got)
	}
	_, nodes = memNodes(3)
	nodes[2] = &capsNode{Driver: nodes[2], caps: driver.Capabilities{ServerClock: false}}
	if q := newQuorum(t, nodes); q.Capabilities().ServerClock || q.Capabilities().DurableTokens || q.Capabilities().Consensus {
		t.Errorf("Capabilities = %+v; want ServerClock, DurableTokens and Consensus false", q.Capabilities())
	}
	// A node that keeps a lock delay itself is not asked for a padded TTL:
	// the quorum offers no lock delay over it.
	_, nodes = memNodes(3)
	nodes[1] = &capsNode{Driver: nodes[1], caps: driver.Capabilities{LockDelay: true, SessionLockDelay: true}}
	if q := newQuorum(t, nodes); q.Capabilities().LockDelay || !newQuorum(t, []driver.Driver{memdlock.New(), memdlock.New(), memdlock.New()}).Capabilities().LockDelay {
		t.Errorf("LockDelay with a node that keeps it itself = %v; want false, and true over TTL nodes", q.Capabilities().LockDelay)
	}
}

type capsNode struct {
	driver.Driver
	caps driver.Capabilities
}

func (c *capsNode) Capabilities() driver.Capabilities { return c.caps }

func TestCloseClosesNodes(t *testing.T) {
	ns := []*node{{Driver: memdlock.New()}, {Driver: memdlock.New()}, {Driver: memdlock.New()}}
	q, err := quorum.New([]driver.Driver{ns[0], ns[1], ns[2]})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for i, n := range ns {
		if c := n.closed.Load(); c != 1 {
			t.Errorf("node %d closed %d times; want 1", i, c)
		}
	}
	if _, err := q.Acquire(ctx(t), req("k")); err == nil {
		t.Error("Acquire after Close succeeded")
	}
}

// ---- Acquire ----

// A minority acquisition is rolled back on every node, including the one
// whose reply was lost, and leaves nothing behind.
func TestMinorityRolledBack(t *testing.T) {
	stores, nodes := memNodes(3)
	k := key(t)
	foreign := req(k)
	if res, err := stores[2].Acquire(ctx(t), foreign); err != nil || !res.Acquired {
		t.Fatalf("foreign hold on node 2: %+v, %v", res, err)
	}
	nodes[1] = lostReply(nodes[1])
	q := newQuorum(t, nodes)
	r := req(k)
	res, err := q.Acquire(ctx(t), r)
	if err != nil || res.Acquired {
		t.Fatalf("Acquire with 1 granted, 1 lost reply, 1 refused = %+v, %v; want not acquired", res, err)
	}
	if res.RetryAfter <= 0 || res.RetryAfter > time.Minute {
		t.Errorf("RetryAfter = %v; want the foreign lease's remaining time", res.RetryAfter)
	}
	for i := range 2 {
		if n := stores[i].Count(k); n != 0 {
			t.Errorf("node %d keeps %d records after the rollback; want 0", i, n)
		}
	}
	if n := stores[2].Count(k); n != 1 {
		t.Errorf("node 2 keeps %d records; want the foreign hold alone", n)
	}
	if err := stores[2].Refresh(ctx(t), foreign); err != nil {
		t.Errorf("the foreign holder lost its hold: %v", err)
	}

	// Split vote over five nodes: two each for two foreign owners, the free
	// node for us. Nobody wins, and our share is rolled back.
	stores, nodes = memNodes(5)
	f1, f2 := req(k), req(k)
	for i, f := range []driver.Request{f1, f1, f2, f2} {
		if res, err := stores[i].Acquire(ctx(t), f); err != nil || !res.Acquired {
			t.Fatalf("foreign hold on node %d: %+v, %v", i, res, err)
		}
	}
	q = newQuorum(t, nodes)
	if res, err := q.Acquire(ctx(t), req(k)); err != nil || res.Acquired {
		t.Fatalf("Acquire in a split vote = %+v, %v; want not acquired", res, err)
	}
	if n := stores[4].Count(k); n != 0 {
		t.Errorf("the free node keeps %d records; want 0", n)
	}
}

// A down node does not keep the majority from working, through the
// portable API.
func TestNodeDown(t *testing.T) {
	for _, tc := range []struct{ n, down int }{{3, 1}, {5, 2}} {
		t.Run(fmt.Sprintf("%dof%d", tc.down, tc.n), func(t *testing.T) {
			stores, nodes := memNodes(tc.n)
			for i := range tc.down {
				nodes[i] = down()
			}
			c, err := dlock.New(newQuorum(t, nodes))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			k := key(t)
			l, err := c.Lock(ctx(t), k, dlock.WithTTL(time.Second))
			if err != nil {
				t.Fatalf("Lock with %d of %d nodes down: %v", tc.down, tc.n, err)
			}
			if _, err := c.TryLock(ctx(t), k); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("TryLock on the held key = %v; want ErrNotAcquired", err)
			}
			if err := l.Refresh(ctx(t)); err != nil {
				t.Errorf("Refresh: %v", err)
			}
			time.Sleep(time.Second) // renewal keeps it
			if err := l.Cause(); err != nil {
				t.Errorf("lock lost while a majority is up: %v", err)
			}
			if err := l.Release(ctx(t)); err != nil {
				t.Errorf("Release: %v", err)
			}
			for i := tc.down; i < tc.n; i++ {
				if n := stores[i].Count(k); n != 0 {
					t.Errorf("node %d keeps %d records after release", i, n)
				}
			}
		})
	}
}

// Without a majority of nodes answering, Acquire fails with the nodes'
// errors rather than reporting the lock as held by someone else.
func TestMajorityDown(t *testing.T) {
	_, nodes := memNodes(3)
	nodes[0], nodes[2] = down(), down()
	q := newQuorum(t, nodes)
	res, err := q.Acquire(ctx(t), req(key(t)))
	if !errors.Is(err, errDown) || res.Acquired {
		t.Errorf("Acquire with 2 of 3 nodes down = %+v, %v; want an error wrapping the nodes' errors", res, err)
	}
	c, err := dlock.New(newQuorum(t, []driver.Driver{down(), down(), memdlock.New()}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.TryLock(ctx(t), key(t)); err == nil || errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock with 2 of 3 nodes down = %v; want a store error", err)
	}
}

// The token is the largest fence token; without the fence round, the
// largest lock token.
func TestTokens(t *testing.T) {
	for _, fence := range []bool{true, false} {
		stores, nodes := memNodes(3)
		// Advance node 1's counter.
		for range 5 {
			r := req("other")
			stores[1].Acquire(ctx(t), r)
			stores[1].Release(ctx(t), r)
		}
		var opts []quorum.Option
		want := uint64(7) // node 1: lock token 6, fence token 7
		if !fence {
			opts = append(opts, quorum.WithoutFenceRound())
			want = 6
		}
		q := newQuorum(t, nodes, opts...)
		k := key(t)
		r := req(k)
		res, err := q.Acquire(ctx(t), r)
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire = %+v, %v", res, err)
		}
		if res.Token != want {
			t.Errorf("fence %v: token = %d; want %d (node 1's, the largest)", fence, res.Token, want)
		}
		again, err := q.Acquire(ctx(t), r)
		if err != nil || !again.Acquired || again.Token != res.Token {
			t.Errorf("fence %v: repeated Acquire = %+v, %v; want the same token", fence, again, err)
		}
		hs, err := q.List(ctx(t), k)
		if err != nil || len(hs) != 1 || hs[0].Token != res.Token {
			t.Errorf("fence %v: List = %+v, %v; want one holder with token %d", fence, hs, err, res.Token)
		}
		if err := q.Release(ctx(t), r); err != nil {
			t.Errorf("Release: %v", err)
		}
		for i, s := range stores {
			if n := s.Count(k); n != 0 {
				t.Errorf("fence %v: node %d keeps %d records after release", fence, i, n)
			}
		}
	}
}

// The fence of an earlier holder whose release has not reached a node yet
// is cleared by the next holder, so that node's counter keeps up.
func TestStaleFenceCleared(t *testing.T) {
	stores, nodes := memNodes(3)
	q := newQuorum(t, nodes)
	k := key(t)
	a := req(k)
	ra, err := q.Acquire(ctx(t), a)
	if err != nil || !ra.Acquired {
		t.Fatalf("Acquire = %+v, %v", ra, err)
	}
	// A's release of the lock reaches every node, but its fence release
	// reaches none of them yet.
	for _, s := range stores {
		if err := s.Release(ctx(t), a); err != nil {
			t.Fatal(err)
		}
	}
	b := req(k)
	rb, err := q.Acquire(ctx(t), b)
	if err != nil || !rb.Acquired {
		t.Fatalf("Acquire after A's release = %+v, %v", rb, err)
	}
	if rb.Token <= ra.Token {
		t.Errorf("token %d after %d", rb.Token, ra.Token)
	}
	hs, err := q.List(ctx(t), k)
	if err != nil || len(hs) != 1 || hs[0].Owner != b.Owner || hs[0].Token != rb.Token {
		t.Errorf("List = %+v, %v; want B with token %d", hs, err, rb.Token)
	}
	if err := q.Release(ctx(t), a); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("A's late Release = %v; want ErrNotOwner", err)
	}
	if err := q.Refresh(ctx(t), b); err != nil {
		t.Errorf("B's Refresh after A's late release: %v", err)
	}
	if err := q.Release(ctx(t), b); err != nil {
		t.Errorf("B's Release: %v", err)
	}
	for i, s := range stores {
		if n := s.Count(k); n != 0 {
			t.Errorf("node %d keeps %d records", i, n)
		}
	}
}

// ---- validity ----

func TestValidityArithmetic(t *testing.T) {
	portable := func(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }
	for _, tc := range []struct {
		factor float64
		margin time.Duration
		ttl    time.Duration
		nodeTT time.Duration // a node's granted lease, 0 = as asked
	}{
		{quorum.DefaultDriftFactor, quorum.DefaultDriftMargin, 10 * time.Second, 0},
		{0.05, quorum.DefaultDriftMargin, 10 * time.Second, 0},
		{0.01, 50 * time.Millisecond, 10 * time.Second, 0},
		{0.1, 100 * time.Millisecond, time.Second, 0},
		{0.01, 2 * time.Millisecond, 3 * time.Second, 2 * time.Second},
		{0.2, 2 * time.Millisecond, 3 * time.Second, 2 * time.Second},
	} {
		_, nodes := memNodes(3)
		if tc.nodeTT > 0 {
			inner := nodes[0]
			nodes[0] = &node{Driver: inner, acquire: func(ctx context.Context, r driver.Request) (driver.Result, error) {
				res, err := inner.Acquire(ctx, r)
				res.TTL = tc.nodeTT
				return res, err
			}}
		}
		q := newQuorum(t, nodes, quorum.WithDriftFactor(tc.factor), quorum.WithDriftMargin(tc.margin))
		r := req(key(t))
		r.TTL = tc.ttl
		res, err := q.Acquire(ctx(t), r)
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire = %+v, %v", res, err)
		}
		granted := res.TTL
		if granted == 0 {
			granted = r.TTL
		}
		base := r.TTL
		if tc.nodeTT > 0 {
			base = tc.nodeTT
		}
		// What Redlock allows and what package dlock will compute.
		redlock := base - time.Duration(float64(base)*tc.factor) - tc.margin
		dlockValidity := granted - portable(granted)
		switch {
		case granted > r.TTL || granted > base:
			t.Errorf("%+v: reported lease %v exceeds the request %v or the node's %v", tc, granted, r.TTL, base)
		case dlockValidity > redlock:
			t.Errorf("%+v: dlock's validity %v exceeds Redlock's %v", tc, dlockValidity, redlock)
		case redlock-dlockValidity > time.Millisecond && granted != base:
			t.Errorf("%+v: validity %v needlessly short of Redlock's %v", tc, dlockValidity, redlock)
		}
		if tc.factor == quorum.DefaultDriftFactor && tc.margin == quorum.DefaultDriftMargin && tc.nodeTT == 0 && res.TTL != 0 {
			t.Errorf("default drift: Result.TTL = %v; want 0 (the request's lease)", res.TTL)
		}
	}
}

// ---- Refresh ----

func TestRefreshMajorityLost(t *testing.T) {
	stores, nodes := memNodes(3)
	q := newQuorum(t, nodes)
	k := key(t)
	r := req(k)
	if res, err := q.Acquire(ctx(t), r); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	// One node loses the hold: the majority keeps it, and the node gets it
	// back.
	stores[0].ForceRelease(ctx(t), k)
	if err := q.Refresh(ctx(t), r); err != nil {
		t.Fatalf("Refresh with 2 of 3 holding = %v", err)
	}
	if err := stores[0].Refresh(ctx(t), r); err != nil {
		t.Errorf("node 0 did not get the hold back: %v", err)
	}
	// Two nodes lose it: the lock is lost, and the last hold is released.
	stores[0].ForceRelease(ctx(t), k)
	stores[1].ForceRelease(ctx(t), k)
	if err := q.Refresh(ctx(t), r); !errors.Is(err, driver.ErrNotOwner) {
		t.Fatalf("Refresh with 1 of 3 holding = %v; want ErrNotOwner", err)
	}
	for i, s := range stores {
		if n := s.Count(k); n != 0 {
			t.Errorf("node %d keeps %d records after the loss", i, n)
		}
	}
	// A node taken by someone else is not taken back.
	r = req(k)
	if res, err := q.Acquire(ctx(t), r); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	stores[2].ForceRelease(ctx(t), k)
	other := req(k)
	stores[2].Acquire(ctx(t), other)
	if err := q.Refresh(ctx(t), r); err != nil {
		t.Errorf("Refresh with 2 of 3 = %v", err)
	}
	if err := stores[2].Refresh(ctx(t), other); err != nil {
		t.Errorf("the other owner lost node 2: %v", err)
	}
}

// Node failures during a refresh are not a loss: package dlock keeps the
// lock until its validity ends and tries again.
func TestRefreshFailuresAreNotLoss(t *testing.T) {
	stores, nodes := memNodes(3)
	var failing atomic.Bool
	for i := range 2 {
		inner := nodes[i]
		nodes[i] = &node{Driver: inner, refresh: func(ctx context.Context, r driver.Request) error {
			if failing.Load() {
				return errDown
			}
			return inner.Refresh(ctx, r)
		}}
	}
	q := newQuorum(t, nodes)
	k := key(t)
	r := req(k)
	if res, err := q.Acquire(ctx(t), r); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	failing.Store(true)
	err := q.Refresh(ctx(t), r)
	if err == nil || errors.Is(err, driver.ErrNotOwner) || !errors.Is(err, errDown) {
		t.Errorf("Refresh with 2 of 3 nodes failing = %v; want their errors, not ErrNotOwner", err)
	}
	if err := stores[2].Refresh(ctx(t), r); err != nil {
		t.Errorf("node 2 lost the hold: %v", err)
	}
}

// Through the portable API: a lock whose majority is taken away is lost.
func TestLostThroughClient(t *testing.T) {
	stores, nodes := memNodes(5)
	c, err := dlock.New(newQuorum(t, nodes))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k := key(t)
	l, err := c.Lock(ctx(t), k, dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		stores[i].ForceRelease(ctx(t), k)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("lock not lost after 3 of 5 nodes dropped it")
	}
	if err := l.Cause(); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Err = %v; want ErrLost", err)
	}
	if err := l.Release(ctx(t)); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Release = %v; want ErrLost", err)
	}
	for i, s := range stores {
		if n := s.Count(k); n != 0 {
			t.Errorf("node %d keeps %d records", i, n)
		}
	}
}

// ---- Release ----

func TestReleaseNeedsMajority(t *testing.T) {
	stores, nodes := memNodes(3)
	q := newQuorum(t, nodes)
	k := key(t)
	r := req(k)
	if res, err := q.Acquire(ctx(t), r); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	stores[0].ForceRelease(ctx(t), k)
	if err := q.Release(ctx(t), r); err != nil {
		t.Errorf("Release with 2 of 3 holding = %v; want nil", err)
	}
	if res, err := q.Acquire(ctx(t), r); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	stores[0].ForceRelease(ctx(t), k)
	stores[1].ForceRelease(ctx(t), k)
	if err := q.Release(ctx(t), r); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("Release with 1 of 3 holding = %v; want ErrNotOwner", err)
	}
	for i, s := range stores {
		if n := s.Count(k); n != 0 {
			t.Errorf("node %d keeps %d records", i, n)
		}
	}
}

// ---- parallel fan-out ----

// rendezvous makes every node call wait until all n nodes are inside a call
// at once. A sequential fan-out would never get there: the first call would
// wait for the others forever (here: until the test's deadline).
type rendezvous struct {
	n       int32
	in      atomic.Int32
	maxIn   atomic.Int32
	mu      sync.Mutex
	all     chan struct{}
	entered int32
}

func newRendezvous(n int) *rendezvous { return &rendezvous{n: int32(n), all: make(chan struct{})} }

func (r *rendezvous) enter(ctx context.Context) error {
	in := r.in.Add(1)
	for {
		m := r.maxIn.Load()
		if in <= m || r.maxIn.CompareAndSwap(m, in) {
			break
		}
	}
	r.mu.Lock()
	if r.entered++; r.entered == r.n {
		close(r.all)
	}
	r.mu.Unlock()
	select {
	case <-r.all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *rendezvous) leave() { r.in.Add(-1) }

func TestParallelFanout(t *testing.T) {
	const n = 5
	_, nodes := memNodes(n)
	var phase atomic.Pointer[rendezvous]
	wrap := func(inner driver.Driver) *node {
		wait := func(ctx context.Context) error {
			rv := phase.Load()
			defer rv.leave()
			return rv.enter(ctx)
		}
		return &node{
			Driver: inner,
			acquire: func(ctx context.Context, r driver.Request) (driver.Result, error) {
				if err := wait(ctx); err != nil {
					return driver.Result{}, err
				}
				return inner.Acquire(ctx, r)
			},
			refresh: func(ctx context.Context, r driver.Request) error {
				if err := wait(ctx); err != nil {
					return err
				}
				return inner.Refresh(ctx, r)
			},
			release: func(ctx context.Context, r driver.Request) error {
				if err := wait(ctx); err != nil {
					return err
				}
				return inner.Release(ctx, r)
			},
		}
	}
	for i := range nodes {
		nodes[i] = wrap(nodes[i])
	}
	// Without the fence round: its calls on the last nodes, which the
	// round does not wait for once a majority has answered, could reach
	// the next operation's rendezvous.
	q := newQuorum(t, nodes, quorum.WithoutFenceRound())
	r := req(key(t))
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, op := range []struct {
		name string
		call func() error
	}{
		{"Acquire", func() error {
			res, err := q.Acquire(wctx, r)
			if err == nil && !res.Acquired {
				err = errors.New("not acquired")
			}
			return err
		}},
		{"Refresh", func() error { return q.Refresh(wctx, r) }},
		{"Release", func() error { return q.Release(wctx, r) }},
	} {
		rv := newRendezvous(n)
		phase.Store(rv)
		if err := op.call(); err != nil {
			t.Fatalf("%s: %v (the nodes were not called in parallel)", op.name, err)
		}
		if m := rv.maxIn.Load(); m != n {
			t.Errorf("%s: at most %d node calls in flight at once; want %d", op.name, m, n)
		}
	}
}

// A hung node does not hold up an acquisition: once the majority has
// answered, the straggler runs on to its node timeout in the background.
func TestHungNodeDoesNotBlock(t *testing.T) {
	stores, nodes := memNodes(3)
	release := make(chan struct{})
	defer close(release)
	cancelled := make(chan struct{})
	var once sync.Once
	nodes[2] = &node{Driver: nodes[2], acquire: func(ctx context.Context, r driver.Request) (driver.Result, error) {
		select {
		case <-ctx.Done():
			once.Do(func() { close(cancelled) }) // the lock's and the fence's
			return driver.Result{}, ctx.Err()
		case <-release:
			return driver.Result{}, errors.New("released by the test")
		}
	}}
	q := newQuorum(t, nodes)
	k := key(t)
	r := req(k)
	res, err := q.Acquire(ctx(t), r)
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire with a hung node = %+v, %v", res, err)
	}
	// Acquire does not wait for the straggler, which ends at its node
	// timeout.
	select {
	case <-cancelled:
	case <-time.After(time.Minute):
		t.Error("the hung node's call did not reach its node timeout")
	}
	if err := q.Release(ctx(t), r); err != nil {
		t.Errorf("Release: %v", err)
	}
	for i := range 2 {
		if n := stores[i].Count(k); n != 0 {
			t.Errorf("node %d keeps %d records", i, n)
		}
	}
}

// ---- Notifier, Lister, ForceReleaser ----

func TestSubscribe(t *testing.T) {
	stores, nodes := memNodes(3)
	q := newQuorum(t, nodes)
	k := key(t)
	sub, err := q.Subscribe(ctx(t), req(k))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// A release seen by a single node is signalled.
	r := req(k)
	stores[1].Acquire(ctx(t), r)
	stores[1].Release(ctx(t), r)
	select {
	case <-sub.C():
	case <-time.After(10 * time.Second):
		t.Fatal("no signal after a release on node 1")
	}
	if err := sub.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := sub.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	// Nodes that do not notify: ErrUnsupported, and package dlock polls.
	plain := []driver.Driver{&node{Driver: memdlock.New()}, &node{Driver: memdlock.New()}, &node{Driver: memdlock.New()}}
	if _, err := newQuorum(t, plain).Subscribe(ctx(t), req(k)); !errors.Is(err, driver.ErrUnsupported) {
		t.Errorf("Subscribe over nodes without Notifier = %v; want ErrUnsupported", err)
	}
	if _, err := newQuorum(t, plain[:1]).List(ctx(t), ""); !errors.Is(err, driver.ErrUnsupported) {
		t.Errorf("List over nodes without Lister = %v; want ErrUnsupported", err)
	}
}

func TestListMajority(t *testing.T) {
	stores, nodes := memNodes(3)
	q := newQuorum(t, nodes)
	p := key(t)
	maj, min := req(p+":maj"), req(p+":min")
	maj.Info = "majority holder"
	for i := range 2 {
		stores[i].Acquire(ctx(t), maj)
	}
	stores[2].Acquire(ctx(t), min)
	hs, err := q.List(ctx(t), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].Key != maj.Key || hs[0].Owner != maj.Owner || hs[0].Info != "majority holder" {
		t.Fatalf("List = %+v; want the majority holder alone", hs)
	}
	if hs[0].TTL <= 0 || hs[0].TTL > maj.TTL {
		t.Errorf("listed TTL = %v", hs[0].TTL)
	}
	n, err := q.ForceRelease(ctx(t), maj.Key)
	if err != nil || n != 1 {
		t.Errorf("ForceRelease = %d, %v; want 1", n, err)
	}
	if n, err := q.ForceRelease(ctx(t), maj.Key); err != nil || n != 0 {
		t.Errorf("ForceRelease of a free key = %d, %v; want 0", n, err)
	}
}

// A release does not overtake an acquisition still in flight on a node: a
// node's acquisition that lands after its round was decided without it is
// undone by the release that follows, which waits for it there.
func TestReleaseWaitsForAcquisitionInFlight(t *testing.T) {
	stores, nodes := memNodes(3)
	gate := make(chan struct{})
	var calls atomic.Int32
	hung := make(chan int, 1)
	landed := make(chan struct{})              // the hung acquisition reached its node
	released := make(chan error, len(nodes)*4) // releases on the hung node
	for i, inner := range nodes {
		var isHung atomic.Bool
		nodes[i] = &node{Driver: inner, acquire: func(ctx context.Context, r driver.Request) (driver.Result, error) {
			// The lead answers first, alone; of the other two, the
			// later one hangs on the wire, and lands when the node
			// resumes, whatever its context says.
			if calls.Add(1) != 3 {
				return inner.Acquire(ctx, r)
			}
			isHung.Store(true)
			hung <- i
			<-gate
			defer close(landed)
			return inner.Acquire(context.WithoutCancel(ctx), r)
		}, release: func(ctx context.Context, r driver.Request) error {
			err := inner.Release(ctx, r)
			if isHung.Load() {
				released <- err
			}
			return err
		}}
	}
	q := newQuorum(t, nodes, quorum.WithoutFenceRound())
	var once sync.Once
	resume := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(resume) // before q.Close
	r := req(key(t))
	if res, err := q.Acquire(ctx(t), r); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v; want acquired by the majority that answered", res, err)
	}
	if err := q.Release(ctx(t), r); err != nil {
		t.Fatalf("Release: %v", err)
	}
	i := <-hung
	resume()
	// The release on the hung node is sent once its acquisition has
	// ended; had it overtaken it, it would have found nothing to release
	// and the late grant would stay.
	<-landed
	<-released
	if hs, err := stores[i].List(ctx(t), r.Key); err != nil || len(hs) > 0 {
		t.Errorf("node %d after the release: holders %+v, %v; want none (the release overtook the acquisition)", i, hs, err)
	}
}
