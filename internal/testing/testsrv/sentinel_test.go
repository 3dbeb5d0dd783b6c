package testsrv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisFollows returns a function that checks that the server at addr is a
// replica in sync with master and has key = val.
func redisFollows(addr, master, key, val string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		c := newQuickRedisClient(addr)
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if got := infoField(info, "master_host") + ":" + infoField(info, "master_port"); infoField(info, "role") != "slave" || got != master {
			return fmt.Errorf("role:%s, master %s; want a replica of %s", infoField(info, "role"), got, master)
		}
		if link := infoField(info, "master_link_status"); link != "up" {
			return fmt.Errorf("master_link_status:%s", link)
		}
		if got, err := c.Get(ctx, key).Result(); err != nil || got != val {
			return fmt.Errorf("GET %s = %q, %v; want %q", key, got, err, val)
		}
		return nil
	}
}

// redisSet returns a function that sets key = val through c and waits
// until one replica has it.
func redisSet(c redis.UniversalClient, key, val string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := c.Set(ctx, key, val, 0).Err(); err != nil {
			return err
		}
		if n, err := c.Do(ctx, "WAIT", 1, 1000).Int(); err != nil || n != 1 {
			return fmt.Errorf("WAIT 1 = %d, %v", n, err)
		}
		return nil
	}
}

// TestRedisSentinelFailover kills, then pauses, the master of a
// redis-sentinel and checks that the sentinels promote the replica, that a
// Sentinel client keeps serving, and that the old master, restarted or
// resumed, becomes a replica of the new one.
func TestRedisSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts database servers")
	}
	t.Parallel() // mostly waiting for elections
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t0 := time.Now()
	s, err := StartRedisSentinel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("started in %v", time.Since(t0).Round(time.Millisecond))
	defer func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	}()
	step := stepper(t)
	ms := s.Members()
	if len(ms) != 5 {
		t.Fatalf("%d members, want master, replica and 3 sentinels", len(ms))
	}
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: s.Addrs[2:], MaxRetries: -1})
	defer c.Close()
	eventually(ctx, t, "write", redisSet(c, "k", "before"))

	master, err := s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if master != ms[0] {
		t.Fatalf("Master() = %s, want the first master %s", master.Addr, ms[0].Addr)
	}
	if _, err := (&Server{Name: RedisCluster}).Master(ctx); err == nil {
		t.Error("Master() of a redis-cluster succeeded")
	}

	// A killed master is replaced by its replica, which has its data.
	if err := master.Kill(); err != nil {
		t.Fatal(err)
	}
	next, err := s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	step("failover after Kill")
	if next != ms[1] {
		t.Fatalf("Master() after killing the master = %s, want the replica %s", next.Addr, ms[1].Addr)
	}
	eventually(ctx, t, "read after the failover", func(ctx context.Context) error {
		if got, err := c.Get(ctx, "k").Result(); err != nil || got != "before" {
			return fmt.Errorf("GET k = %q, %v; want before", got, err)
		}
		return nil
	})
	// The old master, restarted (empty), is made a replica of the new one
	// (the sentinels leave a master that comes back alone for 8 s first, to
	// hear of a newer configuration).
	if err := c.Set(ctx, "k", "while down", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := master.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "restarted master follows the new one", redisFollows(master.Addr, next.Addr, "k", "while down"))
	step("Restart and resync")

	// A paused master is replaced too, and follows the new one once
	// resumed.
	if err := next.Pause(); err != nil {
		t.Fatal(err)
	}
	third, err := s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	step("failover after Pause")
	if third != master {
		t.Fatalf("Master() after pausing the master = %s, want the replica %s", third.Addr, master.Addr)
	}
	eventually(ctx, t, "write after the second failover", func(ctx context.Context) error {
		return c.Set(ctx, "k", "while paused", 0).Err()
	})
	if err := next.Resume(); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "resumed master follows the new one", redisFollows(next.Addr, third.Addr, "k", "while paused"))
	step("Resume and resync")
	eventually(ctx, t, "write acknowledged by the replica", redisSet(c, "k", "after"))
}
