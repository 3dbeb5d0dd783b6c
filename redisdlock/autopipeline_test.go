package redisdlock_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/redisdlock"
)

// pipelined returns how many connections the pipelines of c have taken
// from its pipeline pools (those of a Cluster's nodes summed).
func pipelined(c redis.UniversalClient) uint32 {
	s := c.PoolStats().PipelineStats
	if s == nil {
		return 0
	}
	return s.Hits + s.Misses
}

// TestAutoPipeline checks that Script mode sends the scripts of concurrent
// callers through the client's AutoPipeliner (whose pipelines run on the
// client's pipeline pool) on every kind of client, passed to New or opened
// from a URL, unless auto-pipelining is turned off or the protocol runs no
// scripts; and that a lone caller's scripts go out as commands of their
// own.
func TestAutoPipeline(t *testing.T) {
	redisSrv := testsrv.Get(t, testsrv.Redis)
	cluster := testsrv.Get(t, testsrv.RedisCluster)
	sentinel := testsrv.Get(t, testsrv.RedisSentinel)
	newDriver := func(t *testing.T, c redis.UniversalClient, opts ...redisdlock.Option) *redisdlock.Driver {
		t.Cleanup(func() { c.Close() })
		d, err := redisdlock.New(c, append(opts, redisdlock.WithPrefix(testPrefix(t)))...)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, tc := range []struct {
		name string
		open func(t *testing.T) *redisdlock.Driver
		want bool
	}{
		{"New", func(t *testing.T) *redisdlock.Driver { return newDriver(t, newClient(redisSrv.Addr)) }, true},
		{"NewOff", func(t *testing.T) *redisdlock.Driver {
			return newDriver(t, newClient(redisSrv.Addr), redisdlock.WithAutoPipeline(false))
		}, false},
		{"NewSentinel", func(t *testing.T) *redisdlock.Driver {
			return newDriver(t, redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: testsrv.SentinelMaster, SentinelAddrs: sentinel.Addrs[2:], MaxRetries: -1, ContextTimeoutEnabled: true,
			}))
		}, true},
		{"NewCluster", func(t *testing.T) *redisdlock.Driver {
			return newDriver(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs, ContextTimeoutEnabled: true}))
		}, true},
		{"URL", func(t *testing.T) *redisdlock.Driver {
			return openURL(t, withParams(redisSrv.URL, "prefix", testPrefix(t)))
		}, true},
		{"URLOff", func(t *testing.T) *redisdlock.Driver {
			return openURL(t, withParams(redisSrv.URL, "prefix", testPrefix(t), "autopipeline", "false"))
		}, false},
		{"URLTransaction", func(t *testing.T) *redisdlock.Driver {
			return openURL(t, withParams(redisSrv.URL, "prefix", testPrefix(t), "mode", "tx"))
		}, false},
		{"URLSentinel", func(t *testing.T) *redisdlock.Driver {
			return openURL(t, withParams(sentinel.URL, "prefix", testPrefix(t)))
		}, true},
		{"URLCluster", func(t *testing.T) *redisdlock.Driver {
			return openURL(t, withParams(cluster.URL, "prefix", testPrefix(t)))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.open(t)
			defer d.Close()
			before := pipelined(d.Client())
			if err := cycles(t, d, 1, 3); err != nil {
				t.Fatal(err)
			}
			if n := pipelined(d.Client()) - before; n != 0 {
				t.Errorf("a lone caller's scripts ran in %d pipelines; want none", n)
			}
			if err := cycles(t, d, 16, 10); err != nil {
				t.Fatal(err)
			}
			if got := pipelined(d.Client()) > before; got != tc.want {
				t.Errorf("concurrent callers' scripts ran in pipelines = %v; want %v", got, tc.want)
			}
		})
	}
}

// cycles runs n rounds of Acquire, Refresh and Release on d in each of g
// goroutines, each on a key of its own, and returns the first error.
func cycles(t *testing.T, d *redisdlock.Driver, g, n int) error {
	ctx := testCtx(t)
	errs := make(chan error, g)
	var wg sync.WaitGroup
	for i := range g {
		wg.Go(func() {
			for range n {
				req := request(fmt.Sprintf("k%d", i), time.Minute)
				res, err := d.Acquire(ctx, req)
				if err == nil && !res.Acquired {
					err = fmt.Errorf("Acquire of a free key = %+v", res)
				}
				if err == nil {
					err = d.Refresh(ctx, req)
				}
				if err == nil {
					err = d.Release(ctx, req)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// TestAutoPipelineShared checks that a driver leaves the AutoPipeliner of a
// client it does not own running when it is closed, and that it goes on
// working when someone else closes that AutoPipeliner (the client makes a
// new one).
func TestAutoPipelineShared(t *testing.T) {
	c := newClient(testsrv.Get(t, testsrv.Redis).Addr)
	defer c.Close()
	prefix := redisdlock.WithPrefix(testPrefix(t))
	d, err := redisdlock.New(c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	ap, err := c.AutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if ap.IsClosed() {
		t.Fatal("Driver.Close closed the AutoPipeliner of a client it does not own")
	}
	d, err = redisdlock.New(c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := cycles(t, d, 16, 3); err != nil {
		t.Fatal(err)
	}
	ap.Close()
	if err := cycles(t, d, 16, 3); err != nil {
		t.Errorf("after the client's AutoPipeliner was closed: %v", err)
	}
	if ap, err = c.AutoPipeline(); err != nil || ap.IsClosed() {
		t.Errorf("the client's AutoPipeliner = closed %v, %v; want a new one", ap.IsClosed(), err)
	}
}
