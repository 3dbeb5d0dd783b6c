package zkdlock

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/drivertest"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(interopHolderEnv); spec != "" {
		os.Exit(interopHolder(spec))
	}
	testsrv.Main(m, testsrv.ZooKeeper)
}

// newTestDriver returns a driver over addr, closed when t ends.
func newTestDriver(t testing.TB, addr string, opts ...Option) *Driver {
	t.Helper()
	d, err := New([]string{addr}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// suiteConfig returns the conformance suite's configuration for drivers
// made with opts. With lingering true, the keys' znodes may linger after
// release: Residue then ignores the empty ones.
func suiteConfig(t testing.TB, lingering bool, opts ...Option) drivertest.Config {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	return drivertest.Config{
		NewDriver: func(t testing.TB) driver.Driver { return newTestDriver(t, srv.Addr, opts...) },
		NewHungDriver: func(t testing.TB) (driver.Driver, func()) {
			p, err := testsrv.StartProxy(srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() }) // after the driver's Close
			return newTestDriver(t, p.Addr(), opts...), p.Block
		},
		Residue: func(ctx context.Context, prefix string) (int, error) {
			if lingering {
				return nodes(ctx, srv.Addr, DefaultPrefix, prefix)
			}
			return residue(ctx, srv.Addr, DefaultPrefix, prefix)
		},
	}
}

// TestConformance runs the suite twice: without a linger period, where
// nothing at all may remain after a release, and with the default one,
// where the keys' znodes may remain, empty, for that long.
func TestConformance(t *testing.T) {
	t.Run("NoLinger", func(t *testing.T) { drivertest.Run(t, suiteConfig(t, false, WithParentLinger(0))) })
	t.Run("Linger", func(t *testing.T) { drivertest.Run(t, suiteConfig(t, true)) })
}

func BenchmarkDriver(b *testing.B) { drivertest.RunBenchmarks(b, suiteConfig(b, true)) }

// dial opens a ZooKeeper connection of the test's own and waits for its
// session.
func dial(ctx context.Context, addr string) (*zk.Conn, error) {
	c, events, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(discard{}))
	if err != nil {
		return nil, err
	}
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go func() { // the channel closes when the client's goroutines end
					for range events {
					}
				}()
				return c, nil
			}
		case <-ctx.Done():
			c.Close()
			return nil, ctx.Err()
		}
	}
}

type discard struct{}

func (discard) Printf(string, ...any) {}

// residue counts the znodes of keys that start with prefix under root: the
// keys' znodes and their children.
func residue(ctx context.Context, addr, root, prefix string) (int, error) {
	return count(ctx, addr, root, prefix, true)
}

// nodes counts the znodes of keys that start with prefix under root, except
// the keys' znodes that are empty (lingering after a release).
func nodes(ctx context.Context, addr, root, prefix string) (int, error) {
	return count(ctx, addr, root, prefix, false)
}

func count(ctx context.Context, addr, root, prefix string, empty bool) (int, error) {
	c, err := dial(ctx, addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	names, _, err := c.Children(root)
	if errors.Is(err, zk.ErrNoNode) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		if !strings.HasPrefix(name, escape(prefix)) {
			continue
		}
		children, _, err := c.Children(root + "/" + name)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return 0, err
		}
		if len(children) > 0 || empty && err == nil {
			n += 1 + len(children)
		}
	}
	return n, nil
}

// Helpers shared with the other backends' tests.
var ctx, req = dlocktest.Ctx, dlocktest.Request

func key(t testing.TB) string { return dlocktest.Key(t, "zk") }

func TestURL(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	for _, bad := range []string{
		"zk://",
		"zk://user:pw@" + srv.Addr,
		"zk://" + srv.Addr + "/a//b",
		"zk://" + srv.Addr + "/a/./b",
		"zk://" + srv.Addr + "?nope=1",
		"zk://" + srv.Addr + "?session=soon",
		"zk://" + srv.Addr + "?session=-1s",
		"zk://" + srv.Addr + "?linger=-1s",
		"zk://" + srv.Addr + "?linger=later",
		"zk://" + srv.Addr + "?curator=semaphore",
		"zk://" + srv.Addr + "?prefix=relative",
		"zk://" + srv.Addr + "?prefix=/",
		"zk://" + srv.Addr + "?prefix=/a/",
		"zk://" + srv.Addr + ",:x",
	} {
		dlocktest.RejectURL(t, bad, "url", "zk:")
	}
	c, err := dlock.Open(ctx(t), "zk://"+srv.Addr+"/chroot/x?session=3s&linger=250ms&prefix=/app/locks")
	if err != nil {
		t.Fatal(err)
	}
	d := c.Driver().(*Driver)
	if d.root != "/chroot/x/app/locks" || d.ttl != 3*time.Second || d.SessionTimeout() != 3*time.Second || d.linger != 250*time.Millisecond {
		t.Errorf("driver = root %q, session %v (granted %v), linger %v; want /chroot/x/app/locks, 3s (3s), 250ms",
			d.root, d.ttl, d.SessionTimeout(), d.linger)
	}
	k := key(t)
	l, err := c.TryLock(ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := d.conn.Exists("/chroot/x/app/locks/" + escape(k)); !ok || err != nil {
		t.Errorf("the key's znode is not under the chroot and prefix: %v, %v", ok, err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		query string
		want  time.Duration
	}{{"", DefaultParentLinger}, {"?linger=0", 0}, {"?linger=0s", 0}, {"?curator=rwlock", DefaultParentLinger}} {
		c, err := dlock.Open(ctx(t), "zk://"+srv.Addr+tc.query)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Driver().(*Driver).linger; got != tc.want {
			t.Errorf("Open(%q): linger %v; want %v", tc.query, got, tc.want)
		}
		if got, want := c.Driver().(*Driver).layout, CuratorMutex; strings.Contains(tc.query, "rwlock") != (got != want) {
			t.Errorf("Open(%q): layout %v", tc.query, got)
		}
		c.Close()
	}
	// A server that does not answer fails the Open.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	if c, err := dlock.Open(ctx(t), "zk://"+addr); err == nil {
		c.Close()
		t.Errorf("Open of a closed port succeeded")
	}
}

func TestNewRejects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		servers []string
		opts    []Option
		arg     string
	}{
		{"no servers", nil, nil, "servers"},
		{"empty server", []string{""}, nil, "servers"},
		{"relative prefix", []string{"127.0.0.1:1"}, []Option{WithPrefix("locks")}, "prefix"},
		{"root prefix", []string{"127.0.0.1:1"}, []Option{WithPrefix("/")}, "prefix"},
		{"dot in prefix", []string{"127.0.0.1:1"}, []Option{WithPrefix("/a/../b")}, "prefix"},
		{"control in prefix", []string{"127.0.0.1:1"}, []Option{WithPrefix("/a\nb")}, "prefix"},
		{"zero session", []string{"127.0.0.1:1"}, []Option{WithSessionTTL(0)}, "session"},
		{"negative linger", []string{"127.0.0.1:1"}, []Option{WithParentLinger(-time.Second)}, "linger"},
	} {
		d, err := New(tc.servers, tc.opts...)
		var ae *dlock.ArgError
		if !errors.As(err, &ae) || ae.Name != tc.arg {
			t.Errorf("%s: New = %v; want an *ArgError naming %q", tc.name, err, tc.arg)
		}
		if d != nil {
			d.Close()
		}
	}
}
