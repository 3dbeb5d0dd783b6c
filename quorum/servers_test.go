package quorum_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/drivertest"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/quorum"
	"github.com/dlockhq/dlock/redisdlock"
)

// redisNode is a redisdlock driver that owns its client.
type redisNode struct {
	*redisdlock.Driver
	client *redis.Client
}

func (n *redisNode) Close() error { return errors.Join(n.Driver.Close(), n.client.Close()) }

// redisConfig is the conformance configuration over the first n servers of
// redis-quorum.
func redisConfig(t testing.TB, n int, opts ...quorum.Option) drivertest.Config {
	srv := testsrv.Get(t, testsrv.RedisQuorum)
	if len(srv.Addrs) < n {
		t.Fatalf("redis-quorum has %d servers; want %d", len(srv.Addrs), n)
	}
	addrs := srv.Addrs[:n]
	open := func(t testing.TB) []*redisNode {
		nodes := make([]*redisNode, n)
		for i, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, ContextTimeoutEnabled: true})
			d, err := redisdlock.New(c)
			if err != nil {
				t.Fatal(err)
			}
			nodes[i] = &redisNode{Driver: d, client: c}
		}
		return nodes
	}
	counters := open(t)
	t.Cleanup(func() {
		for _, nd := range counters {
			nd.Close()
		}
	})
	return drivertest.Config{
		NewDriver: func(t testing.TB) driver.Driver {
			nodes := open(t)
			ds := make([]driver.Driver, n)
			for i, nd := range nodes {
				ds[i] = nd
			}
			q, err := quorum.New(ds, append([]quorum.Option{quorum.WithLogger(quietLog)}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			return q
		},
		NewHungDriver: func(t testing.TB) (driver.Driver, func()) { return newHungQuorum(t, n, opts...) },
		Residue: func(ctx context.Context, prefix string) (int, error) {
			total := 0
			for _, nd := range counters {
				c, err := nd.Count(ctx, prefix)
				if err != nil {
					return 0, err
				}
				total += c
			}
			return total, nil
		},
	}
}

func TestConformanceRedis3(t *testing.T) { drivertest.Run(t, redisConfig(t, 3)) }

func TestConformanceRedis5(t *testing.T) { drivertest.Run(t, redisConfig(t, 5)) }

func BenchmarkDriverRedis(b *testing.B) {
	b.Run("redis3", func(b *testing.B) { drivertest.RunBenchmarks(b, redisConfig(b, 3)) })
	b.Run("redis5", func(b *testing.B) { drivertest.RunBenchmarks(b, redisConfig(b, 5)) })
	// Lagging counters not raised: tokens that are not monotonic.
	b.Run("redis5-nofence", func(b *testing.B) { drivertest.RunBenchmarks(b, redisConfig(b, 5, quorum.WithoutFenceRound())) })
}

func TestRedlockURL(t *testing.T) {
	srv := testsrv.Get(t, testsrv.RedisQuorum)
	url := "redlock://" + strings.Join(srv.Addrs[:3], ",") + "?prefix=rl:&dial_timeout=2s&client=go-redis"
	c, err := dlock.Open(ctx(t), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q, ok := c.Driver().(*quorum.Driver)
	if !ok || q.Nodes() != 3 || q.Quorum() != 2 {
		t.Fatalf("driver = %T; want a quorum over 3 nodes", c.Driver())
	}
	k := key(t)
	l, err := c.Lock(ctx(t), k, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx(t), k); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock on a held key = %v; want ErrNotAcquired", err)
	}
	hs, err := c.List(ctx(t), k)
	if err != nil || len(hs) != 1 || hs[0].Token != l.Token() || hs[0].Owner != l.OwnerID() {
		t.Errorf("List = %+v, %v; want the holder with token %d", hs, err, l.Token())
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// The prefix reached the nodes.
	rc := redis.NewClient(&redis.Options{Addr: srv.Addrs[0]})
	defer rc.Close()
	keys, err := rc.Keys(ctx(t), "{rl:*").Result()
	if err != nil || len(keys) == 0 {
		t.Errorf("keys under {rl: = %v, %v; want the fencing counters", keys, err)
	}

	for _, bad := range []string{
		"redlock://",
		"redlock://" + srv.Addrs[0] + "," + srv.Addrs[0],
		"redlock://" + srv.Addrs[0] + "?mode=nope",
		"redlock://" + srv.Addrs[0] + "?drift_factor=x",
		"redlock://" + srv.Addrs[0] + "?drift_factor=0.7",
		"redlock://" + srv.Addrs[0] + "?fence=maybe",
		"redlock://" + srv.Addrs[0] + "?unknown_param=1",
		"redlock://" + srv.Addrs[0] + "?client=hiredis",
	} {
		dlocktest.RejectURL(t, bad, "", "")
	}
	// Refused before anything is dialled: a usage error whether the
	// servers answer or not (nothing listens on ports 1 to 3).
	for _, hosts := range []string{strings.Join(srv.Addrs[:3], ","), "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"} {
		dlocktest.RejectURL(t, "redlock://"+hosts+"?client=rueidis", "url", `client="rueidis": dlock runs on go-redis`)
	}
}

// A majority of servers is enough to open, and to lock.
func TestRedlockURLServerDown(t *testing.T) {
	srv := testsrv.Get(t, testsrv.RedisQuorum)
	down := "127.0.0.1:1" // nothing listens on port 1
	c, err := dlock.Open(ctx(t), "redlock://"+srv.Addrs[0]+","+srv.Addrs[1]+","+down, dlock.WithLogger(quietLog))
	if err != nil {
		t.Fatalf("Open with 1 of 3 servers down: %v", err)
	}
	defer c.Close()
	l, err := c.TryLock(ctx(t), key(t))
	if err != nil {
		t.Fatalf("TryLock with 1 of 3 servers down: %v", err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if c, err := dlock.Open(ctx(t), "redlock://"+srv.Addrs[0]+","+down+",127.0.0.1:2"); err == nil {
		c.Close()
		t.Error("Open with 2 of 3 servers down succeeded")
	}
}
