package memcachedlock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/drivertest"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

func TestMain(m *testing.M) { testsrv.Main(m, testsrv.Memcached) }

// newTestDriver returns a driver with a client of its own over addr.
func newTestDriver(t testing.TB, addr string, opts ...Option) *Driver {
	t.Helper()
	mc := memcache.New(addr)
	mc.MaxIdleConns = 64
	d, err := newDriver(mc, true, opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func suiteConfig(t testing.TB) drivertest.Config {
	srv := testsrv.Get(t, testsrv.Memcached)
	return drivertest.Config{
		NewDriver:     func(t testing.TB) driver.Driver { return newTestDriver(t, srv.Addr) },
		NewHungDriver: func(t testing.TB) (driver.Driver, func()) { return newHungDriver(t, srv.Addr) },
		Residue: func(ctx context.Context, prefix string) (int, error) {
			return countItems(ctx, srv.Addr, (&Driver{prefix: DefaultPrefix}).lockKey(prefix))
		},
	}
}

func TestConformance(t *testing.T) { drivertest.Run(t, suiteConfig(t)) }

func BenchmarkDriver(b *testing.B) { drivertest.RunBenchmarks(b, suiteConfig(b)) }

// metadumps serializes the crawler requests of parallel subtests: memcached
// runs one crawler at a time and answers BUSY to the others.
var metadumps sync.Mutex

// countItems counts the live items whose key starts with prefix, with
// memcached's lru_crawler metadump (which skips expired items). A crawler
// still busy with earlier work is asked again, a bounded number of times.
func countItems(ctx context.Context, addr, prefix string) (int, error) {
	metadumps.Lock()
	defer metadumps.Unlock()
	for try := 0; ; try++ {
		n, err := metadump(ctx, addr, prefix)
		if err == nil || !errors.Is(err, errCrawlerBusy) || try == 50 {
			return n, err
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

var errCrawlerBusy = errors.New("lru crawler busy")

func metadump(ctx context.Context, addr, prefix string) (int, error) {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "lru_crawler metadump all\r\n"); err != nil {
		return 0, err
	}
	n := 0
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		line := sc.Text()
		if line == "END" {
			return n, nil
		}
		if strings.HasPrefix(line, "BUSY") {
			return 0, fmt.Errorf("metadump: %q: %w", line, errCrawlerBusy)
		}
		f, _, _ := strings.Cut(line, " ")
		k, ok := strings.CutPrefix(f, "key=")
		if !ok {
			return 0, fmt.Errorf("metadump: %q", line)
		}
		if k, err := url.QueryUnescape(k); err == nil && strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return 0, fmt.Errorf("metadump: %v", sc.Err())
}

// Helpers shared with the other backends' tests.
var ctx, req = dlocktest.Ctx, dlocktest.Request

func key(t testing.TB) string { return dlocktest.Key(t, "mc") }

func TestNewRejects(t *testing.T) {
	mc := memcache.New("127.0.0.1:1")
	for _, tc := range []struct {
		name   string
		client *memcache.Client
		opts   []Option
		arg    string
	}{
		{"nil client", nil, nil, "client"},
		{"space in prefix", mc, []Option{WithPrefix("my app:")}, "prefix"},
		{"control in prefix", mc, []Option{WithPrefix("a\nb")}, "prefix"},
		{"unicode in prefix", mc, []Option{WithPrefix("ünï:")}, "prefix"},
		{"long prefix", mc, []Option{WithPrefix(strings.Repeat("p", MaxPrefixLen+1))}, "prefix"},
	} {
		d, err := New(tc.client, tc.opts...)
		var ae *dlock.ArgError
		if d != nil || !errors.As(err, &ae) || ae.Name != tc.arg {
			t.Errorf("%s: New = %v, %v; want an *ArgError naming %q", tc.name, d, err, tc.arg)
		}
	}
	if d, err := New(mc, WithPrefix("")); err != nil {
		t.Errorf("New with an empty prefix: %v", err)
	} else if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// A foreign owner can neither release nor refresh, before or after the
// holder's lease ran out and a third owner took the key.
func TestForeignOwnerCannotRelease(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Memcached)
	d := newTestDriver(t, srv.Addr)
	defer d.Close()
	k := key(t)
	a, b := req(k), req(k)
	a.TTL = 2 * time.Second
	if res, err := d.Acquire(ctx(t), a); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	if err := d.Release(ctx(t), b); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("foreign Release = %v; want ErrNotOwner", err)
	}
	if err := d.Refresh(ctx(t), b); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("foreign Refresh = %v; want ErrNotOwner", err)
	}
	if err := d.Refresh(ctx(t), a); err != nil {
		t.Errorf("owner's Refresh after foreign attempts = %v", err)
	}
	// A's lease runs out; B takes the key; A's late release must not free
	// B's lock.
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := d.Acquire(ctx(t), b)
		if err != nil {
			t.Fatal(err)
		}
		if res.Acquired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A's lease did not expire")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := d.Release(ctx(t), a); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("expired holder's Release = %v; want ErrNotOwner", err)
	}
	if err := d.Refresh(ctx(t), b); err != nil {
		t.Errorf("B lost its lock to A's late release: %v", err)
	}
	if err := d.Release(ctx(t), b); err != nil {
		t.Errorf("B's Release: %v", err)
	}
}

// The check and the removal are one step: an item read as the owner's, then
// taken over by another owner before the cas, is left alone.
func TestReleaseNeverRemovesAnotherOwnersItem(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Memcached)
	d := newTestDriver(t, srv.Addr)
	defer d.Close()
	k := key(t)
	a, b := req(k), req(k)
	if res, err := d.Acquire(ctx(t), a); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	seen, err := d.owned(d.lockKey(k), a.Owner) // A's release has read the item...
	if err != nil {
		t.Fatal(err)
	}
	// ...when the item goes (expiry, eviction, an operator) and B takes it.
	if n, err := d.ForceRelease(ctx(t), k); err != nil || n != 1 {
		t.Fatalf("ForceRelease = %d, %v", n, err)
	}
	rb, err := d.Acquire(ctx(t), b)
	if err != nil || !rb.Acquired {
		t.Fatalf("B's Acquire = %+v, %v", rb, err)
	}
	if err := d.renew(seen, a.Owner, -1); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("A's cas of the tombstone = %v; want ErrNotOwner", err)
	}
	if err := d.renew(seen, a.Owner, 60); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("A's cas of a new expiry = %v; want ErrNotOwner", err)
	}
	it, err := d.mc.Get(d.lockKey(k))
	if err != nil {
		t.Fatalf("B's item is gone: %v", err)
	}
	if tok, owner, _ := decodeValue(it.Value); owner != b.Owner || tok != rb.Token {
		t.Errorf("item = %q; want B's", it.Value)
	}
	// A concurrent change by the same owner is not a loss.
	seen, _ = d.owned(d.lockKey(k), b.Owner)
	if err := d.Refresh(ctx(t), b); err != nil {
		t.Fatal(err)
	}
	if err := d.renew(seen, b.Owner, -1); err != nil {
		t.Errorf("release after the owner's own refresh = %v; want nil", err)
	}
	if _, err := d.mc.Get(d.lockKey(k)); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Errorf("Get after release = %v; want a miss", err)
	}
}

func TestExpiryRounding(t *testing.T) {
	for _, tc := range []struct {
		ttl     time.Duration
		exp     int32
		granted time.Duration
	}{
		{2 * time.Second, 2, time.Second},
		{2999 * time.Millisecond, 2, time.Second},
		{3 * time.Second, 3, 2 * time.Second},
		{11 * time.Second, 11, 10 * time.Second},
		{maxTTL, 2592000, maxTTL - time.Second},
	} {
		exp, granted := expiry(tc.ttl)
		if exp != tc.exp || granted != tc.granted {
			t.Errorf("expiry(%v) = %d, %v; want %d, %v", tc.ttl, exp, granted, tc.exp, tc.granted)
		}
		if granted > tc.ttl || time.Duration(exp)*time.Second > tc.ttl {
			t.Errorf("expiry(%v): the item may outlive the TTL asked for", tc.ttl)
		}
	}
	srv := testsrv.Get(t, testsrv.Memcached)
	// Below the minimum the expiry would be 0 (never) or 1 (a lease of
	// nothing): refused even when package dlock is bypassed.
	d := newTestDriver(t, srv.Addr)
	defer d.Close()
	short := req(key(t))
	short.TTL = 1500 * time.Millisecond
	if res, err := d.Acquire(ctx(t), short); err == nil {
		t.Errorf("Acquire with a 1.5s TTL = %+v; want an error", res)
	}
	if _, err := d.mc.Get(d.lockKey(short.Key)); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Errorf("item after a refused Acquire: %v", err)
	}
	c, err := dlock.Open(ctx(t), "memcached://"+srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.TryLock(ctx(t), key(t), dlock.WithTTL(maxTTL+time.Second)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("TTL over 30 days = %v; want an *ArgError", err)
	}
	if _, err := c.TryLock(ctx(t), key(t), dlock.WithTTL(1999*time.Millisecond)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("TTL under 2s = %v; want an *ArgError", err)
	}
	l, err := c.TryLock(ctx(t), key(t), dlock.WithTTL(maxTTL))
	if err != nil {
		t.Fatalf("TTL of 30 days: %v", err)
	}
	if l.TTL() != maxTTL-time.Second {
		t.Errorf("granted lease = %v; want %v", l.TTL(), maxTTL-time.Second)
	}
	l.Release(ctx(t))
}

// The item lives longer than the reported lease and no longer than the
// TTL, wherever in the server's second it was stored.
func TestLeaseLifetime(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Memcached)
	d := newTestDriver(t, srv.Addr)
	defer d.Close()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 250 * time.Millisecond)
			r := req(key(t))
			r.TTL = 2 * time.Second
			sent := time.Now()
			res, err := d.Acquire(context.Background(), r)
			if err != nil || !res.Acquired || res.TTL != time.Second {
				t.Errorf("Acquire = %+v, %v; want acquired with a 1s lease", res, err)
				return
			}
			var gone time.Duration
			for gone == 0 {
				time.Sleep(10 * time.Millisecond)
				if _, err := d.mc.Get(d.lockKey(r.Key)); errors.Is(err, memcache.ErrCacheMiss) {
					gone = time.Since(sent)
				} else if err != nil {
					t.Error(err)
					return
				}
			}
			if gone < res.TTL || gone > r.TTL+100*time.Millisecond {
				t.Errorf("item lived %v; want between the reported %v and the TTL %v", gone, res.TTL, r.TTL)
			}
		})
	}
	wg.Wait()
}

func TestKeyEncoding(t *testing.T) {
	d := &Driver{prefix: DefaultPrefix}
	keys := []string{
		"order:42", "a b", "a%20b", "a\tb", "naïve/ключ/键", "100%", "%hX", "emoji 🔒",
		"\x7f", "ctl\x01\x1f", strings.Repeat("k", 230), strings.Repeat("k", 240),
		strings.Repeat("ü", 200), strings.Repeat("k", 1024), strings.Repeat("k", 1023) + "j",
	}
	seen := map[string]string{}
	for _, k := range keys {
		for _, kind := range []string{"l", "t"} {
			mk := d.encodeKey(kind, k)
			if len(mk) > maxItemKey {
				t.Errorf("key %q: memcached key is %d bytes", k, len(mk))
			}
			for i := 0; i < len(mk); i++ {
				if mk[i] <= ' ' || mk[i] >= 0x7f {
					t.Errorf("key %q: memcached key %q has byte %#x", k, mk, mk[i])
				}
			}
			if other, dup := seen[mk]; dup {
				t.Errorf("keys %q and %q map to %q", other, k, mk)
			}
			seen[mk] = k
		}
	}
	if got := d.lockKey("order:42"); got != "dlock:l:order:42" {
		t.Errorf("lockKey(order:42) = %q; want it readable", got)
	}
	if got := d.lockKey("a b"); got != "dlock:l:a%20b" {
		t.Errorf("lockKey(a b) = %q", got)
	}
	if got := d.lockKey(strings.Repeat("k", 300)); !strings.HasPrefix(got, "dlock:l:%h") {
		t.Errorf("long key not hashed: %q", got)
	}

	// Through the API, on a real server: distinct keys are distinct locks.
	srv := testsrv.Get(t, testsrv.Memcached)
	c, err := dlock.Open(ctx(t), "memcached://"+srv.Addr+"?prefix=enc:")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	base := key(t)
	var held []*dlock.Lock
	tried := map[string]bool{}
	for _, k := range keys {
		k = base + k
		if len(k) > maxKeyLen {
			k = k[len(k)-maxKeyLen:] // keep the distinct tail
		}
		if !utf8.ValidString(k) || tried[k] {
			continue
		}
		tried[k] = true
		l, err := c.TryLock(ctx(t), k, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Errorf("TryLock(%q): %v", k, err)
			continue
		}
		held = append(held, l)
		if _, err := c.TryLock(ctx(t), k); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("second TryLock(%q) = %v; want ErrNotAcquired", k, err)
		}
	}
	for _, l := range held {
		if err := l.Release(ctx(t)); err != nil {
			t.Errorf("Release(%q): %v", l.Key(), err)
		}
	}
}

// The fencing counter is an ordinary item: flush_all (like eviction or a
// restart) loses it, and the next acquisition seeds a new one from its
// clock. Tokens continue above the old ones when that clock is right, and
// go backwards when it is behind: the tokens are not durable.
func TestTokenCounterLoss(t *testing.T) {
	srv, err := testsrv.StartMemcached(ctx(t)) // flush_all must not hit other tests
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	d := newTestDriver(t, srv.Addr)
	defer d.Close()
	k := key(t)
	take := func() uint64 {
		t.Helper()
		r := req(k)
		res, err := d.Acquire(ctx(t), r)
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire = %+v, %v", res, err)
		}
		if err := d.Release(ctx(t), r); err != nil {
			t.Fatal(err)
		}
		return res.Token
	}
	t1 := take()
	t2 := take()
	if t2 <= t1 {
		t.Fatalf("token %d after %d", t2, t1)
	}
	if seed := uint64(time.Now().UnixMicro()); t1 > seed || seed-t1 > uint64(time.Minute/time.Microsecond) {
		t.Errorf("first token %d; want the clock in microseconds (%d)", t1, seed)
	}
	if err := d.mc.FlushAll(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // flush_all acts per second
	t3 := take()
	if t3 <= t2 {
		t.Errorf("token %d after the counter was lost, following %d; want it greater (the clock moved on)", t3, t2)
	}

	// A client whose clock is an hour behind re-creates the counter: the
	// tokens go back. This is why DurableTokens is false.
	now = func() time.Time { return time.Now().Add(-time.Hour) }
	defer func() { now = time.Now }()
	if err := d.mc.FlushAll(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if t4 := take(); t4 >= t3 {
		t.Errorf("token %d after a loss with a slow clock, following %d; want it smaller", t4, t3)
	}
	if d.Capabilities().DurableTokens {
		t.Error("DurableTokens is true")
	}
}

// delayProxy forwards TCP connections to addr, holding every chunk of
// client data for delay.
type delayProxy struct {
	ln    net.Listener
	addr  string
	delay time.Duration
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newDelayProxy(t *testing.T, addr string, delay time.Duration) *delayProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{ln: ln, addr: addr, delay: delay}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Go(func() {
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						time.Sleep(p.delay)
						if _, err := s.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						s.Close()
						return
					}
				}
			})
			p.wg.Go(func() { io.Copy(c, s); c.Close() })
		}
	})
	return p
}

func (p *delayProxy) Addr() string { return p.ln.Addr().String() }

func (p *delayProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// A context that ends during an acquisition returns at once through package
// dlock, while gomemcache's request goes on to land on the server; dlock's
// clean-up waits for it and removes the hold (Close waits for that clean-up).
func TestAbandonedAcquireLeavesNothing(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Memcached)
	proxy := newDelayProxy(t, srv.Addr, 300*time.Millisecond)
	defer proxy.Close()
	mc := memcache.New(proxy.Addr())
	mc.Timeout = 5 * time.Second
	d, err := newDriver(mc, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	direct := newTestDriver(t, srv.Addr)
	defer direct.Close()

	k := key(t)
	actx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start := time.Now()
	_, err = c.TryLock(actx, k)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock with a short deadline = %v; want DeadlineExceeded", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("TryLock returned after %v; want promptly after its deadline", el)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := direct.mc.Get(direct.lockKey(k)); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Errorf("lock item after Close = %v; want a miss (the late add was cleaned up)", err)
	}
	res, err := direct.Acquire(ctx(t), req(k))
	if err != nil || !res.Acquired {
		t.Errorf("Acquire by another owner = %+v, %v; want acquired", res, err)
	}
}

func TestURL(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Memcached)
	for _, bad := range []string{
		"memcached://",
		"memcached://user:pw@" + srv.Addr,
		"memcached://" + srv.Addr + "/db",
		"memcached://" + srv.Addr + "?nope=1",
		"memcached://" + srv.Addr + "?timeout=fast",
		"memcached://" + srv.Addr + "?max_idle_conns=0",
		"memcached://" + srv.Addr + "?prefix=has%20space",
		"memcached://" + srv.Addr + ",:x",
	} {
		dlocktest.RejectURL(t, bad, "", "")
	}
	c, err := dlock.Open(ctx(t), "memcached://"+srv.Addr+"?prefix=app1:&timeout=2s&max_idle_conns=8")
	if err != nil {
		t.Fatal(err)
	}
	d := c.Driver().(*Driver)
	if d.prefix != "app1:" || d.mc.Timeout != 2*time.Second || d.mc.MaxIdleConns != 8 || !d.owns {
		t.Errorf("driver = prefix %q, timeout %v, idle %d, owns %v", d.prefix, d.mc.Timeout, d.mc.MaxIdleConns, d.owns)
	}
	l, err := c.TryLock(ctx(t), key(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// A server that does not answer fails the Open.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	if c, err := dlock.Open(ctx(t), "memcached://"+addr); err == nil {
		c.Close()
		t.Errorf("Open of a closed port succeeded")
	}
}

// TestTokenDrawnBeforeAnotherHold replays the interleaving in which a
// contender draws its token, another client takes and releases the lock with
// a larger token, and only then the contender's add succeeds: its hold must
// still get a token above the other's.
func TestTokenDrawnBeforeAnotherHold(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Memcached)
	d := newTestDriver(t, srv.Addr)
	defer d.Close()
	k := key(t)
	a, b := req(k), req(k)
	a.TTL, b.TTL = 5*time.Second, 5*time.Second
	early, err := d.nextToken(k)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := d.Acquire(ctx(t), b)
	if err != nil || !rb.Acquired || rb.Token <= early {
		t.Fatalf("B's Acquire = %+v, %v; want a token above %d", rb, err, early)
	}
	if err := d.Release(ctx(t), b); err != nil {
		t.Fatal(err)
	}
	ra, err := d.take(ctx(t), a, early)
	if err != nil || !ra.Acquired {
		t.Fatalf("A's add = %+v, %v", ra, err)
	}
	if ra.Token <= rb.Token {
		t.Errorf("A holds with token %d after B held with %d; want a larger one", ra.Token, rb.Token)
	}
	if err := d.Refresh(ctx(t), a); err != nil {
		t.Errorf("Refresh after the token was replaced: %v", err)
	}
	if err := d.Release(ctx(t), a); err != nil {
		t.Errorf("Release: %v", err)
	}
}
