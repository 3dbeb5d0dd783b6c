package etcddlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/drivertest"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

func TestMain(m *testing.M) { testsrv.Main(m, testsrv.Etcd) }

// newClient returns an etcd client of its own over addr.
func newClient(t testing.TB, addr string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// newTestDriver returns a driver that owns a client of its own over addr.
// The test closes it.
func newTestDriver(t testing.TB, addr string, opts ...Option) *Driver {
	t.Helper()
	d, err := newDriver(newClient(t, addr), true, opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// admin returns a client for inspecting the store, closed when t ends.
func admin(t testing.TB) *clientv3.Client {
	t.Helper()
	cli := newClient(t, testsrv.Get(t, testsrv.Etcd).Addr)
	t.Cleanup(func() { cli.Close() })
	return cli
}

// count counts the etcd keys under the driver's default prefix followed by
// prefix.
func count(ctx context.Context, cli *clientv3.Client, prefix string) (int, error) {
	resp, err := cli.Get(ctx, DefaultPrefix+prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return int(resp.Count), nil
}

func suiteConfig(t testing.TB) drivertest.Config {
	srv := testsrv.Get(t, testsrv.Etcd)
	cli := admin(t)
	return drivertest.Config{
		NewDriver:     func(t testing.TB) driver.Driver { return newTestDriver(t, srv.Addr) },
		NewHungDriver: func(t testing.TB) (driver.Driver, func()) { return newHungDriver(t, srv.Addr) },
		Residue: func(ctx context.Context, prefix string) (int, error) {
			return count(ctx, cli, prefix)
		},
	}
}

func TestConformance(t *testing.T) { drivertest.Run(t, suiteConfig(t)) }

func BenchmarkDriver(b *testing.B) { drivertest.RunBenchmarks(b, suiteConfig(b)) }

// Helpers shared with the other backends' tests.
var ctx, req = dlocktest.Ctx, dlocktest.Request

func key(t testing.TB) string { return dlocktest.Key(t, "etcd") }

// assertEmpty checks that no etcd key is left under the key prefix p.
func assertEmpty(t *testing.T, cli *clientv3.Client, p string) {
	t.Helper()
	if n, err := count(ctx(t), cli, p); err != nil || n != 0 {
		t.Errorf("%d keys left under %q (%v); want none", n, p, err)
	}
}

// queueSpy forwards to a driver and closes queued once an Acquire with
// Request.Queue set has found the key held after a subscription was made: the
// owner then waits in the queue, asleep on its subscription.
type queueSpy struct {
	*Driver
	queued     chan struct{}
	once       sync.Once
	subscribed atomic.Bool
}

func spy(d *Driver) *queueSpy { return &queueSpy{Driver: d, queued: make(chan struct{})} }

func (s *queueSpy) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	res, err := s.Driver.Acquire(ctx, req)
	if err == nil && !res.Acquired && req.Queue && s.subscribed.Load() {
		s.once.Do(func() { close(s.queued) })
	}
	return res, err
}

func (s *queueSpy) Subscribe(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	sub, err := s.Driver.Subscribe(ctx, req)
	if err == nil {
		s.subscribed.Store(true)
	}
	return sub, err
}

type lockResult struct {
	l   *dlock.Lock
	err error
}

// lockAsync starts c.Lock(key) and returns the channel of its result.
func lockAsync(ctx context.Context, c *dlock.Client, key string, opts ...dlock.LockOption) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		l, err := c.Lock(ctx, key, opts...)
		ch <- lockResult{l, err}
	}()
	return ch
}

func newLockClient(t *testing.T, d driver.Driver) *dlock.Client {
	t.Helper()
	c, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestNewRejects(t *testing.T) {
	cli := admin(t)
	for _, tc := range []struct {
		name string
		cli  *clientv3.Client
		opts []Option
		arg  string
	}{
		{"nil client", nil, nil, "client"},
		{"empty prefix", cli, []Option{WithPrefix("")}, "prefix"},
		{"zero session", cli, []Option{WithSessionTTL(0)}, "session"},
		{"negative session", cli, []Option{WithSessionTTL(-time.Second)}, "session"},
		{"huge session", cli, []Option{WithSessionTTL(maxSessionTTL + time.Second)}, "session"},
	} {
		d, err := New(tc.cli, tc.opts...)
		var ae *dlock.ArgError
		if d != nil || !errors.As(err, &ae) || ae.Name != tc.arg {
			t.Errorf("%s: New = %v, %v; want an *ArgError naming %q", tc.name, d, err, tc.arg)
		}
	}
	d, err := New(cli, WithPrefix("/app/"), WithSessionTTL(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if d.prefix != "/app/" || d.sessionTTL != 2 {
		t.Errorf("driver = prefix %q, session %ds; want /app/ and 2s (rounded up)", d.prefix, d.sessionTTL)
	}
	if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	// The caller's client stays open.
	if _, err := cli.Get(ctx(t), "x"); err != nil {
		t.Errorf("client after the driver's Close: %v", err)
	}
}

// The granted validity is the request's TTL, but no more than the session
// lease is known to last: the server raises the lease to its minimum, and
// an acquisition renews the session alongside its transaction when the last
// renewal it knows of leaves too little.
func TestValidityIsCappedBySession(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	d := newTestDriver(t, srv.Addr, WithSessionTTL(time.Second))
	defer d.Close()
	first, short, stale := req(key(t)), req(key(t)), req(key(t))
	short.TTL = 500 * time.Millisecond
	start := time.Now()
	res, err := d.Acquire(ctx(t), first)
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	s := d.sess
	if s.ttl < time.Second || res.TTL > s.ttl || res.TTL < s.ttl-time.Since(start) {
		t.Errorf("Result.TTL = %v, session lease %v; want the session lease less the time since the grant", res.TTL, s.ttl)
	}
	res, err = d.Acquire(ctx(t), short)
	if err != nil || !res.Acquired || res.TTL != short.TTL {
		t.Errorf("Acquire with a TTL under the session's = %+v, %v; want TTL %v", res, err, short.TTL)
	}
	// The last known renewal is long past: the acquisition renews.
	s.proof.Store(-int64(time.Hour))
	start = time.Now()
	res, err = d.Acquire(ctx(t), stale)
	if err != nil || !res.Acquired || res.TTL != s.ttl {
		t.Errorf("Acquire with a stale renewal = %+v, %v; want TTL %v", res, err, s.ttl)
	}
	if left := s.left(start); left < s.ttl {
		t.Errorf("after the renewal the lease is known to last %v from the call; want at least %v", left, s.ttl)
	}
	for _, r := range []driver.Request{first, short, stale} {
		if err := d.Release(ctx(t), r); err != nil && !errors.Is(err, driver.ErrNotOwner) {
			t.Errorf("Release: %v", err)
		}
	}
}

// Keys that share a beginning ("a", "a/b", "a\x01") are distinct locks, and
// List and ForceRelease of one do not touch the others.
func TestKeysAreDistinct(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	c := newLockClient(t, newTestDriver(t, srv.Addr))
	base := key(t) + "/"
	// "a/b" is held first: its entry (under "a/") comes ahead of a's.
	keys := []string{base + "a/b", base + "a", base + "a\x01", base + "ab", base + "a b", base + "ключ"}
	var held []*dlock.Lock
	for _, k := range keys {
		l, err := c.TryLock(ctx(t), k)
		if err != nil {
			t.Fatalf("TryLock(%q): %v", k, err)
		}
		held = append(held, l)
	}
	hs, err := c.List(ctx(t), base+"a")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != len(keys)-1 {
		t.Errorf("List(%q) = %+v; want %d holders", base+"a", hs, len(keys)-1)
	}
	for i, h := range hs {
		if i > 0 && hs[i-1].Key >= h.Key {
			t.Errorf("List not sorted by key: %q before %q", hs[i-1].Key, h.Key)
		}
	}
	if n, err := c.ForceRelease(ctx(t), base+"a"); err != nil || n != 1 {
		t.Errorf("ForceRelease(a) = %d, %v; want 1", n, err)
	}
	for i, l := range held {
		err := l.Release(ctx(t))
		if i == 1 {
			if !errors.Is(err, dlock.ErrLost) {
				t.Errorf("Release of the force-released key = %v; want ErrLost", err)
			}
		} else if err != nil {
			t.Errorf("Release(%q) = %v; ForceRelease of another key touched it", keys[i], err)
		}
	}
	assertEmpty(t, admin(t), base)
}

// A TryLock of a held key writes nothing on the key's queue: the first event
// a watch of the queue sees after it is a marker written afterwards.
func TestTryLockOfHeldKeyWritesNothing(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	cli := admin(t)
	c := newLockClient(t, newTestDriver(t, srv.Addr))
	k := key(t)
	l, err := c.TryLock(ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx(t))
	other := newLockClient(t, newTestDriver(t, srv.Addr))
	start, err := cli.Get(ctx(t), DefaultPrefix+k+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryLock(ctx(t), k); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of a held key = %v; want ErrNotAcquired", err)
	}
	marker := DefaultPrefix + k + "/nested/marker" // an entry of another key
	if _, err := cli.Put(ctx(t), marker, ""); err != nil {
		t.Fatal(err)
	}
	defer cli.Delete(ctx(t), marker)
	wr := <-cli.Watch(ctx(t), DefaultPrefix+k+"/", clientv3.WithPrefix(), clientv3.WithRev(start.Header.Revision+1))
	if len(wr.Events) == 0 || string(wr.Events[0].Kv.Key) != marker {
		t.Errorf("writes on the queue after a TryLock of a held key: %v (%v); want the marker's only", wr.Events, wr.Err())
	}
}

// A stale Release of an old incarnation never deletes a newer entry of the
// same owner, nor another owner's hold.
func TestReleaseChecksIncarnation(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	a, b := newTestDriver(t, srv.Addr), newTestDriver(t, srv.Addr)
	defer a.Close()
	defer b.Close()
	k := key(t)
	r := req(k)
	first, err := a.Acquire(ctx(t), r)
	if err != nil || !first.Acquired {
		t.Fatalf("Acquire = %+v, %v", first, err)
	}
	if n, err := b.ForceRelease(ctx(t), k); err != nil || n != 1 {
		t.Fatalf("ForceRelease = %d, %v", n, err)
	}
	// The same owner name, acquired again through another driver: a new
	// incarnation of the entry.
	second, err := b.Acquire(ctx(t), r)
	if err != nil || !second.Acquired || second.Token <= first.Token {
		t.Fatalf("new incarnation = %+v, %v; want acquired with a token above %d", second, err, first.Token)
	}
	if err := a.Refresh(ctx(t), r); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("Refresh of the old incarnation = %v; want ErrNotOwner", err)
	}
	if res, err := a.Acquire(ctx(t), r); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("Acquire of the lost incarnation = %+v, %v; want ErrNotOwner", res, err)
	}
	if err := a.Release(ctx(t), r); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("Release of the old incarnation = %v; want ErrNotOwner", err)
	}
	if err := b.Refresh(ctx(t), r); err != nil {
		t.Errorf("new incarnation after the stale Release: %v", err)
	}

	// Expiry and takeover: the expired holder's Release leaves the new
	// holder alone.
	k2 := key(t)
	old, next := req(k2), req(k2)
	old.TTL = 100 * time.Millisecond
	if res, err := a.Acquire(ctx(t), old); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	c := newLockClient(t, b)
	l, err := c.Lock(ctx(t), k2) // waits for the local deadline of old
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx(t), old); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("Release by the expired holder = %v; want ErrNotOwner", err)
	}
	if err := a.Release(ctx(t), next); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("foreign Release = %v; want ErrNotOwner", err)
	}
	if err := l.Refresh(ctx(t)); err != nil {
		t.Errorf("new holder after the stale Release: %v", err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Errorf("Release: %v", err)
	}
	if err := b.Release(ctx(t), r); err != nil {
		t.Errorf("Release: %v", err)
	}
	assertEmpty(t, admin(t), "etcd:"+t.Name())
}

// Close revokes the session: every entry of the driver goes at once, even
// those that were never released.
func TestCloseRevokesSession(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	d := newTestDriver(t, srv.Addr)
	k := key(t)
	holder, waiter := req(k), req(k)
	waiter.Queue = true
	if res, err := d.Acquire(ctx(t), holder); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	if res, err := d.Acquire(ctx(t), waiter); err != nil || res.Acquired {
		t.Fatalf("queued Acquire = %+v, %v; want queued", res, err)
	}
	cli := admin(t)
	if n, err := count(ctx(t), cli, k); err != nil || n != 2 {
		t.Fatalf("%d entries (%v); want 2", n, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, cli, k)
	if _, err := d.Acquire(ctx(t), req(k)); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Acquire after Close = %v; want ErrClosed", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// Waiters acquire in the order they queued, each woken by its predecessor's
// release only.
func TestQueueOrderAndPredecessorWatch(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	d := newTestDriver(t, srv.Addr)
	defer d.Close()
	k := key(t)
	h, w1, w2 := req(k), req(k), req(k)
	w1.Queue, w2.Queue = true, true
	if res, err := d.Acquire(ctx(t), h); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	for _, w := range []driver.Request{w1, w2} {
		if res, err := d.Acquire(ctx(t), w); err != nil || res.Acquired {
			t.Fatalf("queued Acquire = %+v, %v", res, err)
		}
	}
	// A non-queued owner cannot jump the queue.
	if res, err := d.Acquire(ctx(t), req(k)); err != nil || res.Acquired {
		t.Fatalf("Acquire without Queue on a held key = %+v, %v", res, err)
	}
	s1, err := d.Subscribe(ctx(t), w1)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := d.Subscribe(ctx(t), w2)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := d.Release(ctx(t), h); err != nil {
		t.Fatal(err)
	}
	<-s1.C()
	select {
	case <-s2.C():
		t.Error("the second waiter was woken by the holder's release; it watches only its predecessor")
	default:
	}
	res, err := d.Acquire(ctx(t), w1)
	if err != nil || !res.Acquired {
		t.Fatalf("first waiter's Acquire = %+v, %v", res, err)
	}
	if res, err := d.Acquire(ctx(t), w2); err != nil || res.Acquired {
		t.Fatalf("second waiter's Acquire = %+v, %v; want still queued", res, err)
	}
	if err := d.Release(ctx(t), w1); err != nil {
		t.Fatal(err)
	}
	<-s2.C()
	res2, err := d.Acquire(ctx(t), w2)
	if err != nil || !res2.Acquired || res2.Token <= res.Token {
		t.Fatalf("second waiter's Acquire = %+v, %v; want acquired with a token above %d", res2, err, res.Token)
	}
	if err := d.Release(ctx(t), w2); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, admin(t), k)
}

// A TryLock whose context ends while its request is on the wire returns at
// once through package dlock; the transaction still lands on the server,
// and the driver learns its outcome, so that the Release dlock makes after
// it removes the entry it created, as an entry of its records.
func TestAbandonedAcquireLeavesNothing(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	const delay = 500 * time.Millisecond // each way
	proxy, err := testsrv.StartDelayedProxy(srv.Addr, delay)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	k := key(t)
	dlocktest.AbandonedAcquire(t, newTestDriver(t, proxy.Addr()), delay, k)
	assertEmpty(t, admin(t), k)
	other := newTestDriver(t, srv.Addr)
	defer other.Close()
	if res, err := other.Acquire(ctx(t), req(k)); err != nil || !res.Acquired {
		t.Errorf("Acquire by another owner = %+v, %v; want acquired", res, err)
	}
}

func TestListReportsHolder(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	d := newTestDriver(t, srv.Addr, WithSessionTTL(30*time.Second))
	defer d.Close()
	k := key(t)
	h, w := req(k), req(k)
	h.Info, w.Info, w.Queue = "holder-info", "waiter-info", true
	res, err := d.Acquire(ctx(t), h)
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	if res, err := d.Acquire(ctx(t), w); err != nil || res.Acquired {
		t.Fatalf("queued Acquire = %+v, %v", res, err)
	}
	hs, err := d.List(ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 {
		t.Fatalf("List = %+v; want the holder only", hs)
	}
	if got := hs[0]; got.Key != k || got.Owner != h.Owner || got.Info != "holder-info" || got.Token != res.Token || got.TTL <= 0 || got.TTL > 30*time.Second {
		t.Errorf("List = %+v; want key %q, owner %q, token %d, a TTL within the 30s session", got, k, h.Owner, res.Token)
	}
	if n, err := d.ForceRelease(ctx(t), k); err != nil || n != 1 {
		t.Errorf("ForceRelease = %d, %v; want 1 (the holder; waiters are not counted)", n, err)
	}
	assertEmpty(t, admin(t), k)
	if _, err := d.Acquire(ctx(t), w); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("re-Acquire of a force-released queue entry = %v; want ErrNotOwner", err)
	}
	if err := d.Release(ctx(t), w); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("Release of a force-released queue entry = %v; want ErrNotOwner", err)
	}
	if n, _ := count(ctx(t), admin(t), k); n != 0 {
		t.Errorf("the lost waiter was queued again")
	}
}

func TestUnknownOwnerRelease(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	d := newTestDriver(t, srv.Addr)
	defer d.Close()
	if err := d.Release(ctx(t), req(key(t))); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("Release of an unknown owner = %v; want ErrNotOwner", err)
	}
	if err := d.Refresh(ctx(t), req(key(t))); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("Refresh of an unknown owner = %v; want ErrNotOwner", err)
	}
}

// entries returns the etcd keys of key's queue, in creation order, with
// their CreateRevisions.
func entries(t *testing.T, cli *clientv3.Client, key string) (names []string, revs []int64) {
	t.Helper()
	resp, err := cli.Get(ctx(t), DefaultPrefix+key+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		names = append(names, string(kv.Key))
		revs = append(revs, kv.CreateRevision)
	}
	return names, revs
}

// One driver re-creates the same entry name for each acquisition of a key,
// so etcd's index holds one key per session and lock; owners of one driver
// that overlap on a key get names of their own, and the queue stays in the
// order of creation whatever the names.
func TestEntryNamesAreReused(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	cli := admin(t)
	d := newTestDriver(t, srv.Addr)
	c := newLockClient(t, d)
	k := key(t)
	var last uint64
	for i := range 5 {
		l, err := c.Lock(ctx(t), k)
		if err != nil {
			t.Fatal(err)
		}
		names, _ := entries(t, cli, k)
		d.mu.Lock()
		want := d.entryName(k, d.sess.id, 0)
		d.mu.Unlock()
		if len(names) != 1 || names[0] != want {
			t.Errorf("acquisition %d: entries %q; want only %q", i, names, want)
		}
		if l.Token() <= last {
			t.Errorf("acquisition %d: token %d after %d", i, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}

	// Overlapping owners of one driver: each has a name of its own.
	k2 := key(t)
	h, w1, w2, w3 := req(k2), req(k2), req(k2), req(k2)
	w1.Queue, w2.Queue, w3.Queue = true, true, true
	if res, err := d.Acquire(ctx(t), h); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	for _, w := range []driver.Request{w1, w2} {
		if res, err := d.Acquire(ctx(t), w); err != nil || res.Acquired {
			t.Fatalf("queued Acquire = %+v, %v; want queued", res, err)
		}
	}
	names, _ := entries(t, cli, k2)
	if len(names) != 3 || names[0] == names[1] || names[1] == names[2] || names[0] == names[2] {
		t.Fatalf("entries of a holder and two waiters of one driver = %q; want three names", names)
	}
	if err := d.Release(ctx(t), h); err != nil {
		t.Fatal(err)
	}
	// The holder's name is free again: the next waiter takes it, and
	// queues behind the earlier waiters all the same.
	if res, err := d.Acquire(ctx(t), w3); err != nil || res.Acquired {
		t.Fatalf("queued Acquire = %+v, %v; want queued", res, err)
	}
	if got, _ := entries(t, cli, k2); len(got) != 3 || got[2] != names[0] {
		t.Errorf("entries after the holder's release and a new waiter = %q; want the new waiter last under the name %q", got, names[0])
	}
	for i, w := range []driver.Request{w1, w2, w3} {
		res, err := d.Acquire(ctx(t), w)
		if err != nil || !res.Acquired {
			t.Fatalf("waiter %d: Acquire = %+v, %v; want acquired", i+1, res, err)
		}
		for _, later := range []driver.Request{w1, w2, w3}[i+1:] {
			if res, err := d.Acquire(ctx(t), later); err != nil || res.Acquired {
				t.Fatalf("a later waiter's Acquire while waiter %d holds = %+v, %v; want queued", i+1, res, err)
			}
		}
		if err := d.Release(ctx(t), w); err != nil {
			t.Fatal(err)
		}
	}
	assertEmpty(t, cli, "etcd:"+t.Name())
}

// Late calls for an earlier owner of a reused name (a stale record: same
// name, another owner's newer incarnation) touch nothing; a Release without a
// record removes the owner's entry only.
func TestStaleCallsOnReusedName(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	cli := admin(t)
	d := newTestDriver(t, srv.Addr)
	defer d.Close()
	k := key(t)
	a, b := req(k), req(k)
	if res, err := d.Acquire(ctx(t), a); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	stale, _ := d.table.Get(reqID(a))
	if err := d.Release(ctx(t), a); err != nil {
		t.Fatal(err)
	}
	res, err := d.Acquire(ctx(t), b)
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	if names, revs := entries(t, cli, k); len(names) != 1 || names[0] != stale.name || revs[0] != int64(res.Token) {
		t.Fatalf("entries = %q at %v; want the name %q again at revision %d", names, revs, stale.name, res.Token)
	}
	intact := func(how string) {
		t.Helper()
		if names, revs := entries(t, cli, k); len(names) != 1 || revs[0] != int64(res.Token) {
			t.Errorf("after %s: entries %q at %v; want the new owner's only", how, names, revs)
		}
	}
	d.table.Put(reqID(a), stale, time.Minute)
	if err := d.Refresh(ctx(t), a); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("stale Refresh = %v; want ErrNotOwner", err)
	}
	intact("a stale Refresh")
	d.table.Put(reqID(a), stale, time.Minute)
	if err := d.Release(ctx(t), a); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("stale Release = %v; want ErrNotOwner", err)
	}
	intact("a stale Release")
	d.expire(reqID(a), stale)
	intact("a stale expiry")
	d.table.Take(reqID(a))
	if err := d.Release(ctx(t), a); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("Release without a record = %v; want ErrNotOwner", err)
	}
	intact("a Release without a record")

	// A Release without a record (as after an Acquire whose reply was
	// lost) finds the owner's entry by its value, and leaves the other
	// owner's queue entry alone.
	w := req(k)
	w.Queue = true
	if res, err := d.Acquire(ctx(t), w); err != nil || res.Acquired {
		t.Fatalf("queued Acquire = %+v, %v; want queued", res, err)
	}
	d.table.Take(reqID(b))
	if err := d.Release(ctx(t), b); err != nil && !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("Release without a record = %v", err)
	}
	if names, _ := entries(t, cli, k); len(names) != 1 {
		t.Errorf("entries after the Release without a record = %q; want the waiter's only", names)
	}
	if res, err := d.Acquire(ctx(t), w); err != nil || !res.Acquired {
		t.Errorf("waiter's Acquire = %+v, %v; want acquired", res, err)
	}
	if err := d.Release(ctx(t), w); err != nil {
		t.Error(err)
	}
	assertEmpty(t, cli, k)
}

// TestListReportsLockTTL checks that a hold whose lease is shorter than the
// session's is listed with no more than its own lease left, not the
// session's.
func TestListReportsLockTTL(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	d := newTestDriver(t, srv.Addr, WithSessionTTL(30*time.Second))
	defer d.Close()
	r := req(key(t))
	r.TTL = 3 * time.Second
	if res, err := d.Acquire(ctx(t), r); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	defer d.Release(ctx(t), r)
	hs, err := d.List(ctx(t), r.Key)
	if err != nil || len(hs) != 1 {
		t.Fatalf("List = %+v, %v", hs, err)
	}
	if hs[0].TTL <= 0 || hs[0].TTL > r.TTL {
		t.Errorf("listed TTL %v; want at most the hold's lease of %v (the session lasts 30s)", hs[0].TTL, r.TTL)
	}
}
