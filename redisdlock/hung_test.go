package redisdlock_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/redisdlock"
)

// hungReadTimeout is the read timeout of the clients of hung drivers: a
// call on a hung server whose context was cancelled (which go-redis does
// not watch) returns when it runs out.
const hungReadTimeout = time.Second

// hungMargin is what a call on a hung server may take beyond
// hungReadTimeout: scheduling on a loaded machine, never the network.
const hungMargin = 4 * time.Second

// proxies starts a testsrv.Proxy in front of each of addrs, closed when t
// ends, and returns a dialer that reaches those addresses through their
// proxies (and refuses any other, so that nothing bypasses them), and the
// proxies.
func proxies(t testing.TB, addrs []string) (dial func(ctx context.Context, network, addr string) (net.Conn, error), all []*testsrv.Proxy) {
	t.Helper()
	via := map[string]string{}
	for _, a := range addrs {
		p, err := testsrv.StartProxy(a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		via[a] = p.Addr()
		all = append(all, p)
	}
	dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		p, ok := via[addr]
		if !ok {
			return nil, errors.New("test dialer: no proxy for " + addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, p)
	}
	return dial, all
}

// hungURLDriver opens a driver from srv's URL (Script, Transaction or
// Legacy mode, as params say) with the host replaced by a proxy, and
// returns it with the function that blackholes the proxy. The proxy is
// closed when t ends, after the driver.
func hungURLDriver(t testing.TB, srv *testsrv.Server, params ...string) (*redisdlock.Driver, func()) {
	t.Helper()
	p, err := testsrv.StartProxy(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr()
	d := openURL(t, withParams(u.String(), append(params, "read_timeout", hungReadTimeout.String())...))
	return d, p.Block
}

// hungClient returns a go-redis client of kind (testsrv.Redis,
// RedisSentinel or RedisCluster) over srv whose every connection goes
// through a proxy, set up as the URL openers set theirs up, and the
// function that blackholes the proxies.
func hungClient(t testing.TB, kind string) (redis.UniversalClient, func()) {
	t.Helper()
	srv := testsrv.Get(t, kind)
	dial, ps := proxies(t, srv.Addrs)
	hang := func() {
		for _, p := range ps {
			p.Block()
		}
	}
	switch kind {
	case testsrv.RedisCluster:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: srv.Addrs, Dialer: dial, ReadTimeout: hungReadTimeout, ContextTimeoutEnabled: true,
		}), hang
	case testsrv.RedisSentinel:
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: testsrv.SentinelMaster, SentinelAddrs: srv.Addrs[2:], Dialer: dial,
			ReadTimeout: hungReadTimeout, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1,
		}), hang
	}
	return redis.NewClient(&redis.Options{
		Addr: srv.Addr, Dialer: dial, ReadTimeout: hungReadTimeout, MaxRetries: -1, ContextTimeoutEnabled: true,
	}), hang
}

// hungDriver is hungClient with a driver over it that closes the client.
func hungDriver(t testing.TB, kind string, opts ...redisdlock.Option) (ownedDriver, func()) {
	t.Helper()
	c, hang := hungClient(t, kind)
	d, err := redisdlock.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ownedDriver{d, c}, hang
}

// hungCase is one setup of the hung-server tests.
type hungCase struct {
	name string
	open func(t *testing.T) (driver.Driver, func())
}

// hungCases are the three modes on a standalone server (opened from a
// URL), and Script mode on Sentinel and on Cluster.
func hungCases() []hungCase {
	var cs []hungCase
	for _, mode := range []string{"script", "tx", "legacy"} {
		cs = append(cs, hungCase{"standalone/" + mode, func(t *testing.T) (driver.Driver, func()) {
			return hungURLDriver(t, testsrv.Get(t, testsrv.Redis), "prefix", testPrefix(t), "mode", mode)
		}})
	}
	for _, kind := range []string{testsrv.RedisSentinel, testsrv.RedisCluster} {
		cs = append(cs, hungCase{kind, func(t *testing.T) (driver.Driver, func()) {
			return hungDriver(t, kind, redisdlock.WithPrefix(testPrefix(t)))
		}})
	}
	return cs
}

// TestHungServerContextErrors checks that calls on a blackholed server
// fail with an error wrapping context.DeadlineExceeded when their deadline
// passes, and with one wrapping context.Canceled when they are cancelled,
// and that a cancelled call returns within the client's read timeout (go-redis
// does not watch cancellation, only deadlines).
func TestHungServerContextErrors(t *testing.T) {
	for _, tc := range hungCases() {
		t.Run(tc.name, func(t *testing.T) {
			d, hang := tc.open(t)
			defer d.Close()
			held := request("held", time.Minute)
			if res, err := d.Acquire(testCtx(t), held); err != nil || !res.Acquired {
				t.Fatalf("Acquire = %+v, %v", res, err)
			}
			hang()
			calls := map[string]func(ctx context.Context) error{
				"Acquire": func(ctx context.Context) error {
					_, err := d.Acquire(ctx, request("k", time.Minute))
					return err
				},
				"Refresh": func(ctx context.Context) error { return d.Refresh(ctx, held) },
				"Release": func(ctx context.Context) error { return d.Release(ctx, held) },
			}
			dlocktest.HungCalls(t, calls, hungReadTimeout+hungMargin)
		})
	}
}

// TestCloseHungServer checks that Close returns while the server is
// blackholed, with a subscription open and a call in flight.
func TestCloseHungServer(t *testing.T) {
	for _, tc := range hungCases() {
		t.Run(tc.name, func(t *testing.T) {
			d, hang := tc.open(t)
			req := request("k", time.Minute)
			sub, err := d.(driver.Notifier).Subscribe(testCtx(t), req)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			hang()
			dlocktest.CloseWhileHung(t, d, req, hungReadTimeout+hungMargin)
		})
	}
}

// TestOpenURLHidesSecrets checks that a URL opener's error on a server that
// cannot be reached does not show the password.
func TestOpenURLHidesSecrets(t *testing.T) {
	dlocktest.OpenHidesSecret(t, "s3cret",
		"redis+sentinel://127.0.0.1:1/m?sentinel_password=s3cret&dial_timeout=200ms",
		"redis://:s3cret@127.0.0.1:1/?dial_timeout=200ms",
		"redis://user:s3cret@127.0.0.1:1/?dial_timeout=200ms&mode=tx",
		"redis+cluster://:s3cret@127.0.0.1:1?dial_timeout=200ms",
	)
}

// TestOpenURLRejectsTimeoutsOff checks that a URL cannot turn the network
// timeouts off: go-redis does not watch cancellation, so a call cancelled on
// a hung server would never return.
func TestOpenURLRejectsTimeoutsOff(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	cluster := testsrv.Get(t, testsrv.RedisCluster)
	sentinel := testsrv.Get(t, testsrv.RedisSentinel)
	for _, tc := range []struct{ url, param string }{
		{withParams(srv.URL, "read_timeout", "-1"), "read_timeout"},
		{withParams(srv.URL, "read_timeout", "0"), "read_timeout"},
		{withParams(srv.URL, "write_timeout", "-2"), "write_timeout"},
		{withParams(cluster.URL, "read_timeout", "-1"), "read_timeout"},
		{withParams(sentinel.URL, "write_timeout", "0s"), "write_timeout"},
	} {
		dlocktest.RejectURL(t, tc.url, "url", tc.param)
	}
}
