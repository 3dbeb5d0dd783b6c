package redisdlock_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/drivertest"
	"github.com/dlockhq/dlock/internal/testsrv"
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
// newDriver, with a prefix of its own.
func config(t testing.TB, newDriver func(t testing.TB) driver.Driver) drivertest.Config {
	counter := newDriver(t)
	t.Cleanup(func() { counter.Close() })
	type counterDriver interface {
		Count(ctx context.Context, prefix string) (int, error)
	}
	return drivertest.Config{
		NewDriver: newDriver,
		Residue:   counter.(counterDriver).Count,
	}
}

// urlConfig is config for drivers opened from raw.
func urlConfig(t testing.TB, raw string) drivertest.Config {
	return config(t, func(t testing.TB) driver.Driver { return openURL(t, raw) })
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
		}))
	})
	t.Run("StandaloneURL", func(t *testing.T) {
		srv := testsrv.Get(t, testsrv.Redis)
		drivertest.Run(t, urlConfig(t, withParams(srv.URL, "prefix", testPrefix(t))))
	})
	t.Run("Transaction", func(t *testing.T) {
		srv := testsrv.Get(t, testsrv.Redis)
		drivertest.Run(t, urlConfig(t, withParams(srv.URL, "prefix", testPrefix(t), "mode", "tx")))
	})
	t.Run("Legacy", func(t *testing.T) {
		srv := testsrv.Get(t, testsrv.Redis)
		drivertest.Run(t, urlConfig(t, withParams(srv.URL, "prefix", testPrefix(t), "mode", "legacy")))
	})
	t.Run("LegacySeconds", func(t *testing.T) {
		srv := testsrv.Get(t, testsrv.Redis)
		cfg := urlConfig(t, withParams(srv.URL, "prefix", testPrefix(t), "mode", "legacy", "legacy_unit", "s"))
		drivertest.Run(t, cfg)
	})
	t.Run("Cluster", func(t *testing.T) {
		srv := testsrv.Get(t, testsrv.RedisCluster)
		drivertest.Run(t, urlConfig(t, withParams(srv.URL, "prefix", testPrefix(t))))
	})
	t.Run("ClusterTransaction", func(t *testing.T) {
		srv := testsrv.Get(t, testsrv.RedisCluster)
		drivertest.Run(t, urlConfig(t, withParams(srv.URL, "prefix", testPrefix(t), "mode", "tx")))
	})
	t.Run("ClusterLegacy", func(t *testing.T) {
		srv := testsrv.Get(t, testsrv.RedisCluster)
		drivertest.Run(t, urlConfig(t, withParams(srv.URL, "prefix", testPrefix(t), "mode", "legacy")))
	})
	t.Run("Sentinel", func(t *testing.T) {
		srv := testsrv.Get(t, testsrv.RedisSentinel)
		drivertest.Run(t, urlConfig(t, withParams(srv.URL, "prefix", testPrefix(t))))
	})
	t.Run("SentinelReplicaAck", func(t *testing.T) {
		srv := testsrv.Get(t, testsrv.RedisSentinel)
		drivertest.Run(t, urlConfig(t, withParams(srv.URL, "prefix", testPrefix(t), "wait_replicas", "1", "wait_timeout", "2s")))
	})
}

// BenchmarkDriver runs the standard workloads on a standalone server in
// each mode, and on the Cluster in Script mode.
func BenchmarkDriver(b *testing.B) {
	srv := testsrv.Get(b, testsrv.Redis)
	for _, mode := range []string{"script", "tx", "legacy"} {
		b.Run(mode, func(b *testing.B) {
			drivertest.RunBenchmarks(b, urlConfig(b, withParams(srv.URL, "prefix", testPrefix(b), "mode", mode)))
		})
	}
	b.Run("cluster", func(b *testing.B) {
		srv := testsrv.Get(b, testsrv.RedisCluster)
		drivertest.RunBenchmarks(b, urlConfig(b, withParams(srv.URL, "prefix", testPrefix(b))))
	})
}
