package redisdlock_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/redisdlock"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func request(key string, ttl time.Duration) driver.Request {
	return driver.Request{Key: key, Owner: rand.Text(), TTL: ttl, Mode: driver.Exclusive, Info: "test"}
}

// TestNoScriptFallback checks that the scripts still run after the server
// forgot them (SCRIPT FLUSH, as after a restart or a failover).
func TestNoScriptFallback(t *testing.T) {
	for _, name := range []string{testsrv.Redis, testsrv.RedisCluster} {
		t.Run(name, func(t *testing.T) {
			srv := testsrv.Get(t, name)
			ctx := testCtx(t)
			d := openURL(t, withParams(srv.URL, "prefix", testPrefix(t)))
			defer d.Close()
			flush := func() {
				t.Helper()
				for _, addr := range srv.Addrs {
					c := newClient(addr)
					err := c.ScriptFlush(ctx).Err()
					c.Close()
					if err != nil {
						t.Fatalf("SCRIPT FLUSH on %s: %v", addr, err)
					}
				}
			}
			req := request("k", time.Minute)
			flush()
			res, err := d.Acquire(ctx, req)
			if err != nil || !res.Acquired {
				t.Fatalf("Acquire after SCRIPT FLUSH = %+v, %v", res, err)
			}
			flush()
			if err := d.Refresh(ctx, req); err != nil {
				t.Errorf("Refresh after SCRIPT FLUSH: %v", err)
			}
			flush()
			other := request("k", time.Minute)
			if res, err := d.Acquire(ctx, other); err != nil || res.Acquired {
				t.Errorf("foreign Acquire after SCRIPT FLUSH = %+v, %v; want not acquired", res, err)
			}
			flush()
			if err := d.Release(ctx, req); err != nil {
				t.Errorf("Release after SCRIPT FLUSH: %v", err)
			}
			flush()
			if n, err := d.ForceRelease(ctx, "k"); err != nil || n != 0 {
				t.Errorf("ForceRelease after SCRIPT FLUSH = %d, %v", n, err)
			}
		})
	}
}

// pubsubConns returns the pub/sub connections named name, with their
// CLIENT LIST fields.
func pubsubConns(ctx context.Context, t testing.TB, addrs []string, name string) []map[string]string {
	t.Helper()
	var conns []map[string]string
	for _, addr := range addrs {
		c := newClient(addr)
		list, err := c.ClientList(ctx).Result()
		c.Close()
		if err != nil {
			t.Fatalf("CLIENT LIST: %v", err)
		}
		for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
			f := map[string]string{}
			for _, kv := range strings.Fields(line) {
				k, v, _ := strings.Cut(kv, "=")
				f[k] = v
			}
			if f["name"] == name && (f["sub"] != "0" || strings.Contains(f["flags"], "P")) {
				conns = append(conns, f)
			}
		}
	}
	return conns
}

// TestOnePubSubConnection checks that all the waiters of a driver share one
// pub/sub connection, that every waiter is woken by its release, and that
// the channels are unsubscribed once nobody waits.
func TestOnePubSubConnection(t *testing.T) {
	for _, name := range []string{testsrv.Redis, testsrv.RedisCluster} {
		t.Run(name, func(t *testing.T) {
			srv := testsrv.Get(t, name)
			ctx := testCtx(t)
			prefix := testPrefix(t)
			clientName := "pubsub-test-" + strings.ToLower(rand.Text()[:10])
			holder, err := dlock.New(openURL(t, withParams(srv.URL, "prefix", prefix)))
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			waiter, err := dlock.New(openURL(t, withParams(srv.URL, "prefix", prefix, "client_name", clientName)))
			if err != nil {
				t.Fatal(err)
			}
			defer waiter.Close()

			const n = 40
			held := make([]*dlock.Lock, n)
			for i := range held {
				if held[i], err = holder.Lock(ctx, "k"+strconv.Itoa(i), dlock.WithTTL(time.Minute)); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			var woken atomic.Int32
			for i := range n {
				wg.Go(func() {
					// Backoff of an hour: only a notification can wake
					// the waiter in time.
					l, err := waiter.Lock(ctx, "k"+strconv.Itoa(i), dlock.WithTTL(time.Minute), dlock.WithBackoff(time.Hour, time.Hour))
					if err != nil {
						t.Errorf("waiter %d: %v", i, err)
						return
					}
					woken.Add(1)
					if err := l.Release(ctx); err != nil {
						t.Errorf("waiter %d release: %v", i, err)
					}
				})
			}
			// Wait until every waiter is subscribed.
			deadline := time.Now().Add(20 * time.Second)
			for {
				conns := pubsubConns(ctx, t, srv.Addrs, clientName)
				subs := 0
				for _, c := range conns {
					subs += atoi(c["sub"])
				}
				if len(conns) > 1 {
					t.Fatalf("%d pub/sub connections for one driver; want 1: %v", len(conns), conns)
				}
				if subs == n {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d channel subscriptions after 20s; want %d", subs, n)
				}
				time.Sleep(20 * time.Millisecond)
			}
			start := time.Now()
			for _, l := range held {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			wg.Wait()
			t.Logf("%d waiters woken in %v", woken.Load(), time.Since(start))
			if woken.Load() != n {
				t.Fatalf("%d of %d waiters woken", woken.Load(), n)
			}
			// Nobody waits any more: the channels are unsubscribed, the
			// connection stays for the next waiter.
			deadline = time.Now().Add(10 * time.Second)
			for {
				conns := pubsubConns(ctx, t, srv.Addrs, clientName)
				if len(conns) == 0 || (len(conns) == 1 && conns[0]["sub"] == "0") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("still subscribed after the waits ended: %v", conns)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// TestResubscribeAfterReconnect kills the driver's pub/sub connection: the
// waiters must be signalled once the driver has subscribed again (a release
// may have been missed), and later releases must be signalled as before.
func TestResubscribeAfterReconnect(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	ctx := testCtx(t)
	prefix := testPrefix(t)
	clientName := "reconnect-test-" + strings.ToLower(rand.Text()[:10])
	d := openURL(t, withParams(srv.URL, "prefix", prefix, "client_name", clientName))
	defer d.Close()
	other := openURL(t, withParams(srv.URL, "prefix", prefix))
	defer other.Close()

	req := request("k", time.Minute)
	sub, err := d.Subscribe(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	conns := pubsubConns(ctx, t, srv.Addrs, clientName)
	if len(conns) != 1 {
		t.Fatalf("pub/sub connections: %v; want 1", conns)
	}
	select {
	case <-sub.C():
		t.Fatal("signal before anything happened")
	case <-time.After(100 * time.Millisecond):
	}
	admin := newClient(srv.Addr)
	defer admin.Close()
	if err := admin.Do(ctx, "CLIENT", "KILL", "ID", conns[0]["id"]).Err(); err != nil {
		t.Fatalf("CLIENT KILL: %v", err)
	}
	select {
	case <-sub.C():
	case <-time.After(15 * time.Second):
		t.Fatal("no signal after the pub/sub connection was killed and re-established")
	}
	if after := pubsubConns(ctx, t, srv.Addrs, clientName); len(after) != 1 || after[0]["sub"] != "1" || after[0]["id"] == conns[0]["id"] {
		t.Fatalf("after reconnect: %v; want one new connection subscribed to one channel", after)
	}
	// A release after the reconnect is signalled.
	holder := request("k", time.Minute)
	if res, err := other.Acquire(ctx, holder); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	// The waiter finds the lock held, which asks its release to publish.
	if res, err := d.Acquire(ctx, req); err != nil || res.Acquired {
		t.Fatalf("the waiter's Acquire = %+v, %v; want not acquired", res, err)
	}
	select {
	case <-sub.C(): // a stray signal is allowed; drain it
	default:
	}
	if err := other.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.C():
	case <-time.After(10 * time.Second):
		t.Fatal("release after the reconnect not signalled")
	}
}

// TestReplicaAckFailure asks for more replicas than exist: Acquire must fail
// with ErrReplicaAck and leave nothing behind.
func TestReplicaAckFailure(t *testing.T) {
	cases := []struct{ server, mode, replicas string }{
		{testsrv.Redis, "script", "1"},
		{testsrv.Redis, "tx", "1"},
		{testsrv.Redis, "legacy", "1"},
		{testsrv.RedisCluster, "script", "2"},  // each master has one replica
		{testsrv.RedisSentinel, "script", "2"}, // it has one replica
		{testsrv.RedisSentinel, "tx", "2"},
	}
	for _, tc := range cases {
		t.Run(tc.server+"/"+tc.mode, func(t *testing.T) {
			srv := testsrv.Get(t, tc.server)
			ctx := testCtx(t)
			d := openURL(t, withParams(srv.URL, "prefix", testPrefix(t), "mode", tc.mode, "wait_replicas", tc.replicas, "wait_timeout", "100ms"))
			defer d.Close()
			start := time.Now()
			res, err := d.Acquire(ctx, request("k", time.Minute))
			if !errors.Is(err, redisdlock.ErrReplicaAck) {
				t.Fatalf("Acquire = %+v, %v; want ErrReplicaAck", res, err)
			}
			if el := time.Since(start); el < 100*time.Millisecond || el > 5*time.Second {
				t.Errorf("Acquire took %v; want about the WAIT timeout of 100ms", el)
			}
			if n, err := d.Count(ctx, ""); err != nil || n != 0 {
				t.Errorf("Count after the failed acquire = %d, %v; want 0", n, err)
			}
			// Through the portable API the failure is an error, not a lock.
			c, err := dlock.New(d)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.TryLock(ctx, "k2"); !errors.Is(err, redisdlock.ErrReplicaAck) {
				t.Errorf("TryLock = %v; want ErrReplicaAck", err)
			}
			if n, err := d.Count(ctx, ""); err != nil || n != 0 {
				t.Errorf("Count after the failed TryLock = %d, %v; want 0", n, err)
			}
		})
	}
}

// TestModesShareLocks checks that Script and Transaction drivers exclude
// each other and wake each other's waiters: they store locks alike.
func TestModesShareLocks(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	ctx := testCtx(t)
	prefix := testPrefix(t)
	script, err := dlock.New(openURL(t, withParams(srv.URL, "prefix", prefix)))
	if err != nil {
		t.Fatal(err)
	}
	defer script.Close()
	tx, err := dlock.New(openURL(t, withParams(srv.URL, "prefix", prefix, "mode", "tx")))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	admin := newClient(srv.Addr)
	defer admin.Close()
	for _, pair := range [][2]*dlock.Client{{script, tx}, {tx, script}} {
		a, b := pair[0], pair[1]
		l, err := a.Lock(ctx, "k", dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.TryLock(ctx, "k"); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryLock across modes = %v; want ErrNotAcquired", err)
		}
		got := make(chan *dlock.Lock, 1)
		go func() {
			lb, err := b.Lock(ctx, "k", dlock.WithTTL(time.Minute), dlock.WithBackoff(time.Hour, time.Hour))
			if err != nil {
				t.Error(err)
			}
			got <- lb
		}()
		waitingOn(t, admin, "{"+prefix+"k}*") // the release must wake it
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case lb := <-got:
			if lb == nil {
				t.FailNow()
			}
			if lb.Token() <= l.Token() {
				t.Errorf("token %d after %d", lb.Token(), l.Token())
			}
			if err := lb.Release(ctx); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("waiter of the other mode not woken by the release")
		}
	}
}

// fleet is a client of the SETNX/GET/GETSET timestamp protocol written as
// the source article describes it, the way an existing service would:
// value = expiry time in Unix milliseconds.
type fleet struct {
	c   *redis.Client
	ttl time.Duration
}

// tryLock makes one attempt and returns the timestamp it wrote.
func (f fleet) tryLock(ctx context.Context, key string) (int64, bool, error) {
	now := time.Now().UnixMilli()
	stamp := now + f.ttl.Milliseconds() + 1
	ok, err := f.c.SetNX(ctx, key, stamp, 0).Result()
	if err != nil || ok {
		return stamp, ok, err
	}
	cur, err := f.c.Get(ctx, key).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil // released meanwhile; try again later
	}
	if err != nil {
		return 0, false, err
	}
	if cur >= now {
		return 0, false, nil // held
	}
	//lint:ignore SA1019 the legacy fleets this stands for use GETSET
	old, err := f.c.GetSet(ctx, key, stamp).Int64()
	if errors.Is(err, redis.Nil) || err == nil && old == cur {
		return stamp, true, nil
	}
	return 0, false, err
}

// unlock deletes the key if it still holds our timestamp (check, then
// delete: the protocol's own race, kept as fleets have it).
func (f fleet) unlock(ctx context.Context, key string, stamp int64) error {
	cur, err := f.c.Get(ctx, key).Int64()
	if err != nil || cur != stamp {
		return err
	}
	return f.c.Del(ctx, key).Err()
}

// TestLegacyInterop checks that Legacy mode and a hand-written client of
// the timestamp protocol exclude each other, take over each other's expired
// locks, and that dlock writes what such clients expect.
func TestLegacyInterop(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	ctx := testCtx(t)
	prefix := testPrefix(t)
	raw := newClient(srv.Addr)
	defer raw.Close()
	f := fleet{c: raw, ttl: time.Minute}
	d := openURL(t, withParams(srv.URL, "prefix", prefix, "mode", "legacy"))
	c, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := prefix + "job"

	// dlock holds: the value is an expiry timestamp; the fleet is kept out.
	before := time.Now().UnixMilli()
	l, err := c.Lock(ctx, "job", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	v, err := raw.Get(ctx, key).Int64()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	if lo, hi := before+time.Minute.Milliseconds(), time.Now().UnixMilli()+time.Minute.Milliseconds()+1; v < lo || v > hi {
		t.Errorf("dlock wrote %d; want a Unix ms timestamp in [%d, %d]", v, lo, hi)
	}
	if _, ok, err := f.tryLock(ctx, key); ok || err != nil {
		t.Fatalf("fleet tryLock while dlock holds = %v, %v; want false", ok, err)
	}
	// The fleet's failed GETSET-free attempt changed nothing: dlock still
	// holds and can refresh.
	if err := l.Refresh(ctx); err != nil {
		t.Errorf("Refresh: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The fleet holds: dlock is kept out until the fleet unlocks.
	stamp, ok, err := f.tryLock(ctx, key)
	if !ok || err != nil {
		t.Fatalf("fleet tryLock on a free key = %v, %v", ok, err)
	}
	if _, err := c.TryLock(ctx, "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock while the fleet holds = %v; want ErrNotAcquired", err)
	}
	if err := f.unlock(ctx, key, stamp); err != nil {
		t.Fatal(err)
	}
	l, err = c.TryLock(ctx, "job", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("TryLock after the fleet unlocked: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A crashed fleet client (its timestamp has passed): dlock takes over.
	if err := raw.Set(ctx, key, time.Now().UnixMilli()-5000, 0).Err(); err != nil {
		t.Fatal(err)
	}
	l, err = c.TryLock(ctx, "job", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("TryLock over an expired fleet timestamp: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// dlock's lease runs out: the fleet takes over with GETSET, and the old
	// dlock holder can neither refresh nor release the fleet's lock.
	short := 200 * time.Millisecond
	l, err = c.TryLock(ctx, "job", dlock.WithTTL(short), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	// Keep the key past its server-side lifetime so that the fleet must
	// take it over by GETSET, as it would from another fleet client.
	if err := raw.Persist(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	time.Sleep(50 * time.Millisecond) // past the timestamp, with the "+1"
	stamp, ok, err = f.tryLock(ctx, key)
	if !ok || err != nil {
		t.Fatalf("fleet tryLock over dlock's expired timestamp = %v, %v", ok, err)
	}
	if err := l.Release(ctx); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Release by the expired dlock holder = %v; want ErrLost", err)
	}
	if got, err := raw.Get(ctx, key).Int64(); err != nil || got != stamp {
		t.Fatalf("after the expired holder's release the key holds %d, %v; want the fleet's %d", got, err, stamp)
	}
	if hs, err := c.List(ctx, ""); err != nil || len(hs) != 0 {
		t.Errorf("List = %v, %v; want no dlock holders (the fleet's lock carries no owner)", hs, err)
	}
	if err := f.unlock(ctx, key, stamp); err != nil {
		t.Fatal(err)
	}
	if n, err := d.Count(ctx, ""); err != nil || n != 0 {
		t.Errorf("Count = %d, %v; want 0", n, err)
	}
}

// TestLegacyInteropExclusion runs dlock clients and fleet clients against
// one key at once: no two may ever hold it together.
func TestLegacyInteropExclusion(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	ctx := testCtx(t)
	prefix := testPrefix(t)
	key := prefix + "shared"
	var inside, maxInside, dlockRuns, fleetRuns atomic.Int32
	enter := func() {
		n := inside.Add(1)
		for {
			m := maxInside.Load()
			if n <= m || maxInside.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(time.Millisecond)
		inside.Add(-1)
	}
	const rounds = 25
	var wg sync.WaitGroup
	for range 2 {
		c, err := dlock.New(openURL(t, withParams(srv.URL, "prefix", prefix, "mode", "legacy")))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for range 2 {
			wg.Go(func() {
				for range rounds {
					l, err := c.Lock(ctx, "shared", dlock.WithTTL(10*time.Second), dlock.WithBackoff(time.Millisecond, 5*time.Millisecond))
					if err != nil {
						t.Error(err)
						return
					}
					enter()
					dlockRuns.Add(1)
					if err := l.Release(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	for range 3 {
		f := fleet{c: newClient(srv.Addr), ttl: 10 * time.Second}
		defer f.c.Close()
		wg.Go(func() {
			for done := 0; done < rounds; {
				stamp, ok, err := f.tryLock(ctx, key)
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					time.Sleep(time.Millisecond)
					continue
				}
				enter()
				fleetRuns.Add(1)
				done++
				if err := f.unlock(ctx, key, stamp); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if m := maxInside.Load(); m != 1 {
		t.Errorf("%d holders at once; want 1", m)
	}
	t.Logf("%d dlock and %d fleet critical sections", dlockRuns.Load(), fleetRuns.Load())
}

// TestOpenURL checks the URL forms and their parameters.
func TestOpenURL(t *testing.T) {
	redisSrv := testsrv.Get(t, testsrv.Redis)
	cluster := testsrv.Get(t, testsrv.RedisCluster)
	sentinel := testsrv.Get(t, testsrv.RedisSentinel)
	ctx := testCtx(t)
	host := redisSrv.Addr
	sentinelAddr := sentinel.Addrs[2] // master, replica, sentinel
	prefix := testPrefix(t)

	good := []struct {
		url  string
		mode redisdlock.Protocol
		key  string // the Redis key of lock "k", to check the prefix
		db   int
	}{
		{"redis://" + host, redisdlock.Script, "{dlock:k}", 0},
		{"redis://" + host + "/3?prefix=" + prefix, redisdlock.Script, "{" + prefix + "k}", 3},
		{"redis://" + host + "/2?mode=tx&prefix=" + prefix + "&client_name=x&read_timeout=2s&pool_size=4", redisdlock.Transaction, "{" + prefix + "k}", 2},
		{"redis://" + host + "?mode=transaction&prefix=" + prefix, redisdlock.Transaction, "{" + prefix + "k}", 0},
		{"redis://" + host + "?mode=legacy&prefix=" + prefix + "&legacy_unit=s", redisdlock.Legacy, prefix + "k", 0},
		{"redis://" + host + "?mode=legacy&prefix=", redisdlock.Legacy, "k" + prefix, 0},
		{"redis://" + host + "?mode=script&prefix=" + prefix + "&max_retries=2", redisdlock.Script, "{" + prefix + "k}", 0},
		{"redis://" + host + "?client=go-redis&prefix=" + prefix, redisdlock.Script, "{" + prefix + "k}", 0},
		{cluster.URL + "?client=goredis&prefix=" + prefix, redisdlock.Script, "{" + prefix + "k}", 0},
		{cluster.URL + "?prefix=" + prefix, redisdlock.Script, "{" + prefix + "k}", 0},
		{"redis+cluster://" + cluster.Addrs[1] + "?prefix=" + prefix + "&mode=legacy", redisdlock.Legacy, prefix + "k", 0},
		{"redis+cluster://" + cluster.Addrs[0] + "," + cluster.Addrs[2] + "?prefix=" + prefix + "&read_timeout=1s", redisdlock.Script, "{" + prefix + "k}", 0},
		{sentinel.URL + "?prefix=" + prefix, redisdlock.Script, "{" + prefix + "k}", 0},
		{"redis+sentinel://" + sentinelAddr + "/" + testsrv.SentinelMaster + "/4?prefix=" + prefix + "&mode=tx&wait_replicas=1&wait_timeout=2000", redisdlock.Transaction, "{" + prefix + "k}", 4},
	}
	for _, tc := range good {
		t.Run("good", func(t *testing.T) {
			c, err := dlock.Open(ctx, tc.url)
			if err != nil {
				t.Fatalf("Open(%s): %v", tc.url, err)
			}
			defer c.Close()
			d := c.Driver().(*redisdlock.Driver)
			if d.Protocol() != tc.mode {
				t.Errorf("Open(%s): mode %v; want %v", tc.url, d.Protocol(), tc.mode)
			}
			lockKey := "k"
			if tc.key == "k"+prefix {
				lockKey = "k" + prefix // empty prefix: keep the key unique
				tc.key = lockKey
			}
			l, err := c.TryLock(ctx, lockKey, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatalf("Open(%s): TryLock: %v", tc.url, err)
			}
			var exists int64
			switch cl := d.Client().(type) {
			case *redis.Client:
				if cl.Options().DB != tc.db {
					t.Errorf("Open(%s): database %d; want %d", tc.url, cl.Options().DB, tc.db)
				}
				exists, err = cl.Exists(ctx, tc.key).Result()
			case *redis.ClusterClient:
				exists, err = cl.Exists(ctx, tc.key).Result()
			}
			if err != nil || exists != 1 {
				t.Errorf("Open(%s): key %q exists = %d, %v; want 1", tc.url, tc.key, exists, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		})
	}

	bad := []struct{ url, arg, reason string }{
		{"redis://" + host + "?bogus=1", "url", "bogus"},
		{"redis://" + host + "?bogus=1&other=2&prefix=x", "url", "bogus, other"},
		{"redis://" + host + "/notadb", "url", "database"},
		{"redis://" + host + "?mode=bogus", "url", "bogus"},
		{"redis://" + host + "?mode=legacy&legacy_unit=min", "url", "legacy_unit"},
		{"redis://" + host + "?client=rueidis", "url", `client="rueidis": dlock runs on go-redis`},
		{"redis://" + host + "?client=Go-Redis", "url", `client="Go-Redis"`},
		{"redis+cluster://" + cluster.Addr + "?client=rueidis", "url", `client="rueidis"`},
		{sentinel.URL + "?client=rueidis", "url", `client="rueidis"`},
		{"redis://" + host + "?autopipeline=maybe", "url", "autopipeline"},
		{"redis://" + host + "?wait_timeout=1s", "url", "wait_replicas"},
		{"redis://" + host + "?wait_replicas=x", "url", "wait_replicas"},
		{"redis://" + host + "?wait_replicas=-1", "url", "wait_replicas"},
		{"redis://" + host + "?wait_replicas=1&wait_timeout=soon", "url", "wait_timeout"},
		{"redis://" + host + "?wait_replicas=1&wait_timeout=0", "replica timeout", "positive"},
		{"redis://" + host + "?prefix=%7Bx%7D", "prefix", "hash tag"},
		{"redis+cluster://" + cluster.Addr + "/3", "url", "database 0"},
		{"redis+cluster://" + cluster.Addr + "?bogus=1", "url", "bogus"},
		{"redis+cluster://" + cluster.Addr + "?mode=tx&prefix=a}", "prefix", "hash tag"},
		{"redis+sentinel://" + sentinelAddr, "url", "mastername"},
		{"redis+sentinel://" + sentinelAddr + "/m/0/extra", "url", "mastername"},
		{"redis+sentinel://" + sentinelAddr + "/m?master_name=x", "url", "path"},
		{"redis+sentinel://" + sentinelAddr + "/m?bogus=1", "url", "bogus"},
		{"redis+sentinel://u:p@" + sentinelAddr + "/m?password=x", "url", "credentials"},
		{"redis+cluster://,", "url", "no host"},
	}
	for _, tc := range bad {
		_, err := dlock.Open(ctx, tc.url)
		var ae *dlock.ArgError
		switch {
		case !errors.As(err, &ae):
			t.Errorf("Open(%s) = %v; want an *ArgError", tc.url, err)
		case ae.Name != tc.arg || !strings.Contains(ae.Error(), tc.reason):
			t.Errorf("Open(%s) = %v; want an *ArgError naming %q that mentions %q", tc.url, err, tc.arg, tc.reason)
		}
	}

	// A URL that parses but names no reachable server fails at once with
	// a connection error, not an argument error.
	for _, raw := range []string{"redis://127.0.0.1:1", "rediss://" + host} {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := dlock.Open(octx, raw+"?dial_timeout=1s")
		cancel()
		var ae *dlock.ArgError
		if err == nil || errors.As(err, &ae) {
			t.Errorf("Open(%s) = %v; want a connection error", raw, err)
		}
	}
}

// TestNewValidation checks New's argument errors.
func TestNewValidation(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	c := newClient(srv.Addr)
	defer c.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}})
	defer ring.Close()
	cases := []struct {
		name   string
		client redis.UniversalClient
		opts   []redisdlock.Option
		arg    string
	}{
		{"nil client", nil, nil, "client"},
		{"nil *Client", (*redis.Client)(nil), nil, "client"},
		{"ring", ring, nil, "client"},
		{"bad mode", c, []redisdlock.Option{redisdlock.WithProtocol(7)}, "mode"},
		{"brace prefix", c, []redisdlock.Option{redisdlock.WithPrefix("a{b")}, "prefix"},
		{"negative replicas", c, []redisdlock.Option{redisdlock.WithReplicaAck(-1, time.Second)}, "replicas"},
		{"zero timeout", c, []redisdlock.Option{redisdlock.WithReplicaAck(1, 0)}, "replica timeout"},
		{"bad unit", c, []redisdlock.Option{redisdlock.WithProtocol(redisdlock.Legacy), redisdlock.WithLegacyUnit(time.Minute)}, "legacy unit"},
	}
	for _, tc := range cases {
		_, err := redisdlock.New(tc.client, tc.opts...)
		var ae *dlock.ArgError
		if !errors.As(err, &ae) || ae.Name != tc.arg || !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: New = %v; want an *ArgError naming %q", tc.name, err, tc.arg)
		}
	}
	// A brace in the prefix is fine in Legacy mode: the key is the
	// existing services' own.
	d, err := redisdlock.New(c, redisdlock.WithProtocol(redisdlock.Legacy), redisdlock.WithPrefix("{app}:"))
	if err != nil {
		t.Fatalf("New in Legacy mode with a braced prefix: %v", err)
	}
	d.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Errorf("the caller's client was closed by Driver.Close: %v", err)
	}
}

// TestCapabilities checks the flags each mode declares.
func TestCapabilities(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	all := driver.Modes(driver.Exclusive, driver.Shared, driver.Semaphore)
	exclusive := driver.Modes(driver.Exclusive)
	for _, tc := range []struct {
		params      []string
		serverClock bool
		minTTL      time.Duration
		modes       driver.ModeSet
		fifo        bool
	}{
		{nil, true, time.Millisecond, all, true},
		{[]string{"mode", "tx"}, true, time.Millisecond, exclusive, false},
		{[]string{"mode", "legacy"}, false, 10 * time.Millisecond, exclusive, false},
		{[]string{"mode", "legacy", "legacy_unit", "s"}, false, time.Second, exclusive, false},
	} {
		d := openURL(t, withParams(srv.URL, tc.params...))
		caps := d.Capabilities()
		d.Close()
		if caps.ServerClock != tc.serverClock || caps.MinTTL != tc.minTTL || caps.DurableTokens || caps.Consensus ||
			caps.MaxKeyLen != 1024 || caps.Modes != tc.modes || caps.FIFO != tc.fifo {
			t.Errorf("%v: capabilities %+v", tc.params, caps)
		}
	}
}

// TestGrantedTTL checks that leases are rounded down to the store's unit
// and reported.
func TestGrantedTTL(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	ctx := testCtx(t)
	for _, tc := range []struct {
		params   []string
		ttl, got time.Duration
	}{
		{nil, 1500 * time.Microsecond, time.Millisecond},
		{nil, 2 * time.Second, 0},
		{[]string{"mode", "legacy", "legacy_unit", "s"}, 2500 * time.Millisecond, 2 * time.Second},
	} {
		d := openURL(t, withParams(srv.URL, append(tc.params, "prefix", testPrefix(t))...))
		req := request("k", tc.ttl)
		res, err := d.Acquire(ctx, req)
		if err != nil || !res.Acquired || res.TTL != tc.got {
			t.Errorf("%v: Acquire with TTL %v = %+v, %v; want granted TTL %v", tc.params, tc.ttl, res, err, tc.got)
		}
		d.Release(ctx, req)
		d.Close()
	}
}

var holderLine = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestListShowsToken checks List through the portable API: owner IDs, not
// owner tokens, and the holder's token.
func TestListShowsToken(t *testing.T) {
	srv := testsrv.Get(t, testsrv.RedisCluster)
	ctx := testCtx(t)
	prefix := testPrefix(t)
	c, err := dlock.New(openURL(t, withParams(srv.URL, "prefix", prefix)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var locks []*dlock.Lock
	for i := range 20 {
		l, err := c.Lock(ctx, fmt.Sprintf("job:%02d", i), dlock.WithTTL(time.Minute), dlock.WithInfo(fmt.Sprint("host", i)))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	hs, err := c.List(ctx, "job:")
	if err != nil || len(hs) != len(locks) {
		t.Fatalf("List = %d holders, %v; want %d", len(hs), err, len(locks))
	}
	for i, h := range hs {
		l := locks[i]
		if h.Key != l.Key() || h.Token != l.Token() || h.Owner != l.OwnerID() || !holderLine.MatchString(h.Owner) || h.Info != fmt.Sprint("host", i) {
			t.Errorf("holder %d = %+v; want key %s token %d owner %s", i, h, l.Key(), l.Token(), l.OwnerID())
		}
	}
	if hs, err := c.List(ctx, "job:1"); err != nil || len(hs) != 10 {
		t.Errorf("List(job:1) = %d holders, %v; want 10", len(hs), err)
	}
	for _, l := range locks {
		l.Release(ctx)
	}
}

// TestSentinelFailover fails the Sentinel-managed master over to its
// replica (SENTINEL FAILOVER, so both processes keep running). A lock
// acquired with replica acknowledgement survives the failover with its
// token, a waiter is still woken by its release, and the fencing counter
// goes on from where it was.
func TestSentinelFailover(t *testing.T) {
	srv := testsrv.Get(t, testsrv.RedisSentinel)
	ctx := testCtx(t)
	prefix := testPrefix(t)
	raw := withParams(srv.URL, "prefix", prefix, "wait_replicas", "1", "wait_timeout", "5s")
	a, err := dlock.New(openURL(t, raw))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := dlock.New(openURL(t, raw))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	l, err := a.Lock(ctx, "k", dlock.WithTTL(time.Minute), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lock, 1)
	go func() {
		lb, err := b.Lock(ctx, "k", dlock.WithTTL(time.Minute), dlock.WithBackoff(time.Hour, time.Hour))
		if err != nil {
			t.Error(err)
		}
		got <- lb
	}()
	time.Sleep(100 * time.Millisecond) // let the waiter subscribe

	sentinel := redis.NewSentinelClient(&redis.Options{Addr: srv.Addrs[2]})
	defer sentinel.Close()
	before, err := sentinel.GetMasterAddrByName(ctx, testsrv.SentinelMaster).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := sentinel.Failover(ctx, testsrv.SentinelMaster).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	// Wait for the new master, and for the old one to follow it (later
	// tests ask for a replica's acknowledgement).
	deadline := time.Now().Add(30 * time.Second)
	var newMaster string
	for {
		addr, err := sentinel.GetMasterAddrByName(ctx, testsrv.SentinelMaster).Result()
		if err == nil && addr[0]+":"+addr[1] != before[0]+":"+before[1] {
			newMaster = addr[0] + ":" + addr[1]
			old := newClient(before[0] + ":" + before[1])
			info, err := old.Info(ctx, "replication").Result()
			old.Close()
			if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no completed failover after 30s (master %v, was %v)", addr, before)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("failed over from %s:%s to %s", before[0], before[1], newMaster)

	// The hold survived (WAIT made sure the replica had it); the client
	// follows the new master after a few errors at most.
	deadline = time.Now().Add(20 * time.Second)
	for {
		err := l.Refresh(ctx)
		if err == nil {
			break
		}
		if errors.Is(err, dlock.ErrLost) || time.Now().After(deadline) {
			t.Fatalf("Refresh after the failover: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after the failover: %v", err)
	}
	select {
	case lb := <-got:
		if lb == nil {
			t.FailNow()
		}
		if lb.Token() <= l.Token() {
			t.Errorf("token after the failover %d <= %d", lb.Token(), l.Token())
		}
		if err := lb.Release(ctx); err != nil {
			t.Error(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("waiter not woken by a release after the failover")
	}
}
