package redisdlock_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/drivertest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/redisdlock"
)

func TestMain(m *testing.M) {
	code := testsrv.Run(m, testsrv.Redis, testsrv.RedisCluster, testsrv.RedisSentinel)
	// The servers are stopped by now; nothing of ours may still run.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "redisdlock: leaked goroutines: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// withParams appends query parameters to a URL.
func withParams(raw string, params ...string) string {
	u, err := url.Parse(raw)
	if err != nil {
		panic(err)
	}
	q := u.Query()
	for i := 0; i+1 < len(params); i += 2 {
		q.Set(params[i], params[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// openURL opens a driver through dlock's registry, as dlock.Open does.
func openURL(t testing.TB, raw string) *redisdlock.Driver {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dlock.Open(ctx, raw)
	if err != nil {
		t.Fatalf("dlock.Open(%s): %v", raw, err)
	}
	return c.Driver().(*redisdlock.Driver)
}

// ownedDriver is a driver over a client the test made, closing the client
// with the driver.
type ownedDriver struct {
	*redisdlock.Driver
	client redis.UniversalClient
}

func (o ownedDriver) Close() error {
	err := o.Driver.Close()
	o.client.Close()
	return err
}

// newClient returns a go-redis client for a test server, configured as the
// package documentation recommends.
func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
}

// config returns the conformance configuration for drivers opened by
// newDriver, with a prefix of its own, and hung ones opened by newHung.
func config(t testing.TB, newDriver func(t testing.TB) driver.Driver, newHung func(t testing.TB) (driver.Driver, func())) drivertest.Config {
	counter := newDriver(t)
	t.Cleanup(func() { counter.Close() })
	type counterDriver interface {
		Count(ctx context.Context, prefix string) (int, error)
	}
	return drivertest.Config{
		NewDriver:     newDriver,
		Residue:       counter.(counterDriver).Count,
		NewHungDriver: newHung,
	}
}

// urlConfig is config for drivers opened from srv's URL with params, hung
// ones through a proxy (standalone servers only; nil for the others).
func urlConfig(t testing.TB, srv *testsrv.Server, params ...string) drivertest.Config {
	raw := withParams(srv.URL, params...)
	var hung func(t testing.TB) (driver.Driver, func())
	if strings.HasPrefix(srv.URL, "redis://") {
		hung = func(t testing.TB) (driver.Driver, func()) { return hungURLDriver(t, srv, params...) }
	}
	return config(t, func(t testing.TB) driver.Driver { return openURL(t, raw) }, hung)
}

// hungConfig is urlConfig with hung drivers of kind made by hungDriver with
// opts, for servers whose URLs cannot be pointed at a proxy (Sentinel and
// Cluster name the servers' own addresses in their replies).
func hungConfig(t testing.TB, srv *testsrv.Server, kind string, params []string, opts ...redisdlock.Option) drivertest.Config {
	cfg := urlConfig(t, srv, params...)
	cfg.NewHungDriver = func(t testing.TB) (driver.Driver, func()) { return hungDriver(t, kind, opts...) }
	return cfg
}

// testPrefix returns a key prefix unique to the test.
func testPrefix(t testing.TB) string {
	return fmt.Sprintf("t%d:", time.Now().UnixNano())
}

func TestConformance(t *testing.T) {
	t.Run("Standalone", func(t *testing.T) {
		addr := testsrv.Get(t, testsrv.Redis).Addr
		prefix := testPrefix(t)
		drivertest.Run(t, config(t, func(t testing.TB) driver.Driver {
			c := newClient(addr)
			d, err := redisdlock.New(c, redisdlock.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			return ownedDriver{d, c}
		}, func(t testing.TB) (driver.Driver, func()) {
			return hungDriver(t, testsrv.Redis, redisdlock.WithPrefix(prefix))
		}))
	})
	t.Run("StandaloneURL", func(t *testing.T) {
		srv := testsrv.Get(t, testsrv.Redis)
		drivertest.Run(t, urlConfig(t, srv, "prefix", testPrefix(t)))
	})
	t.Run("Transaction", func(t *testing.T) {
		srv := testsrv.Get(t, testsrv.Redis)
		drivertest.Run(t, urlConfig(t, srv, "prefix", testPrefix(t), "mode", "tx"))
	})
	t.Run("Legacy", func(t *testing.T) {
		srv := testsrv.Get(t, testsrv.Redis)
		drivertest.Run(t, urlConfig(t, srv, "prefix", testPrefix(t), "mode", "legacy"))
	})
	t.Run("LegacySeconds", func(t *testing.T) {
		srv := testsrv.Get(t, testsrv.Redis)
		drivertest.Run(t, urlConfig(t, srv, "prefix", testPrefix(t), "mode", "legacy", "legacy_unit", "s"))
	})
	cluster := func(t *testing.T, mode redisdlock.Protocol) drivertest.Config {
		prefix := testPrefix(t)
		return hungConfig(t, testsrv.Get(t, testsrv.RedisCluster), testsrv.RedisCluster,
			[]string{"prefix", prefix, "mode", mode.String()}, redisdlock.WithPrefix(prefix), redisdlock.WithProtocol(mode))
	}
	t.Run("Cluster", func(t *testing.T) { drivertest.Run(t, cluster(t, redisdlock.Script)) })
	t.Run("ClusterTransaction", func(t *testing.T) { drivertest.Run(t, cluster(t, redisdlock.Transaction)) })
	t.Run("ClusterLegacy", func(t *testing.T) { drivertest.Run(t, cluster(t, redisdlock.Legacy)) })
	t.Run("Sentinel", func(t *testing.T) {
		prefix := testPrefix(t)
		drivertest.Run(t, hungConfig(t, testsrv.Get(t, testsrv.RedisSentinel), testsrv.RedisSentinel,
			[]string{"prefix", prefix}, redisdlock.WithPrefix(prefix)))
	})
	t.Run("SentinelReplicaAck", func(t *testing.T) {
		prefix := testPrefix(t)
		drivertest.Run(t, hungConfig(t, testsrv.Get(t, testsrv.RedisSentinel), testsrv.RedisSentinel,
			[]string{"prefix", prefix, "wait_replicas", "1", "wait_timeout", "2s"},
			redisdlock.WithPrefix(prefix), redisdlock.WithReplicaAck(1, 2*time.Second)))
	})
}

// BenchmarkDriver runs the standard workloads on a standalone server in
// each mode, and on the Cluster in Script mode.
func BenchmarkDriver(b *testing.B) {
	srv := testsrv.Get(b, testsrv.Redis)
	for _, mode := range []string{"script", "tx", "legacy"} {
		b.Run(mode, func(b *testing.B) {
			drivertest.RunBenchmarks(b, urlConfig(b, srv, "prefix", testPrefix(b), "mode", mode))
		})
	}
	b.Run("cluster", func(b *testing.B) {
		srv := testsrv.Get(b, testsrv.RedisCluster)
		drivertest.RunBenchmarks(b, urlConfig(b, srv, "prefix", testPrefix(b)))
	})
}

// cmdRecorder is a go-redis hook that records the commands it sees, as
// Cmd.String prints them (as tracing hooks do).
type cmdRecorder struct {
	mu   sync.Mutex
	cmds []string
}

func (r *cmdRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *cmdRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.mu.Lock()
		r.cmds = append(r.cmds, cmd.String())
		r.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (r *cmdRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestHooksSeeKeys checks that a client's hooks print a script's keys and
// owner as they are, not as pointers.
func TestHooksSeeKeys(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	c := newClient(srv.Addr)
	defer c.Close()
	rec := &cmdRecorder{}
	c.AddHook(rec)
	d, err := redisdlock.New(c, redisdlock.WithPrefix(testPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	r := request("hooked-key", time.Minute)
	mustAcquire(t, d, r, true)
	if err := d.Release(testCtx(t), r); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	all := strings.Join(rec.cmds, "\n")
	if !strings.Contains(all, "hooked-key") || !strings.Contains(all, r.Owner) {
		t.Fatalf("the hook saw %q; want the key and the owner %q", all, r.Owner)
	}
}
