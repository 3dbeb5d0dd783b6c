package testsrv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterFollows returns a function that checks that the cluster node at
// addr is a replica in sync with master and, unless key is "", has key =
// val.
func clusterFollows(addr, master, key, val string) func(ctx context.Context) error {
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
		if key == "" {
			return nil
		}
		// A replica answers reads of its master's slots after READONLY, on
		// the same connection.
		var get *redis.StringCmd
		if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ReadOnly(ctx)
			get = p.Get(ctx, key)
			return nil
		}); err != nil {
			return err
		}
		if got := get.Val(); got != val {
			return fmt.Errorf("GET %s = %q, want %q", key, got, val)
		}
		return nil
	}
}

// clusterMaster returns a function that checks that the cluster node at
// addr is a master and that the cluster is ok in its view.
func clusterMaster(addr string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		c := newQuickRedisClient(addr)
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if role := infoField(info, "role"); role != "master" {
			return fmt.Errorf("%s: role:%s", addr, role)
		}
		if info, err = c.ClusterInfo(ctx).Result(); err != nil {
			return err
		}
		if state := infoField(info, "cluster_state"); state != "ok" {
			return fmt.Errorf("%s: cluster_state:%s", addr, state)
		}
		return nil
	}
}

// TestRedisClusterFailover kills, then pauses, a master of a redis-cluster
// and checks that its replica takes over its slots, that a cluster client
// keeps serving them, and that the old master, restarted or resumed, comes
// back as the replica of its successor.
func TestRedisClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts database servers")
	}
	t.Parallel() // mostly waiting for elections
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t0 := time.Now()
	s, err := StartRedisCluster(ctx)
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
	if len(ms) != 6 {
		t.Fatalf("%d members, want 3 masters and 3 replicas", len(ms))
	}
	// go-redis reloads the slot map on MOVED, and otherwise only every
	// ClusterStateReloadInterval (60 s by default): a refused connection
	// to a dead master does not make it look for the new one.
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.Addrs, ClusterStateReloadInterval: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	// A key of the first master's slots.
	var key string
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("testsrv:%d", i)
		m, err := c.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == ms[0].Addr {
			key = k
		}
	}
	set := func(val string) func(ctx context.Context) error {
		return func(ctx context.Context) error { return c.Set(ctx, key, val, 0).Err() }
	}
	eventually(ctx, t, "write", set("before"))
	eventually(ctx, t, "replica has the write", clusterFollows(ms[3].Addr, ms[0].Addr, key, "before"))

	// A killed master is replaced by its replica, which has its data.
	if err := ms[0].Kill(); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "replica promoted", clusterMaster(ms[3].Addr))
	step("failover after Kill")
	eventually(ctx, t, "read after the failover", func(ctx context.Context) error {
		if got, err := c.Get(ctx, key).Result(); err != nil || got != "before" {
			return fmt.Errorf("GET %s = %q, %v; want before", key, got, err)
		}
		return nil
	})
	step("read after the failover")
	eventually(ctx, t, "write after the failover", set("while down"))
	step("write after the failover")
	// Restarted (empty), the old master rejoins as its successor's replica.
	if err := ms[0].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "restarted master follows its successor", clusterFollows(ms[0].Addr, ms[3].Addr, key, "while down"))
	step("Restart and resync")

	// A paused master is replaced too, and follows its successor once
	// resumed.
	if err := ms[3].Pause(); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "old master promoted again", clusterMaster(ms[0].Addr))
	step("failover after Pause")
	eventually(ctx, t, "write after the second failover", set("while paused"))
	step("write after the second failover")
	if err := ms[3].Resume(); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "resumed master follows its successor", clusterFollows(ms[3].Addr, ms[0].Addr, key, "while paused"))
	step("Resume and resync")
	// The other shards never changed hands.
	for i := 1; i < 3; i++ {
		if err := clusterMaster(ms[i].Addr)(ctx); err != nil {
			t.Error(err)
		}
		if err := clusterFollows(ms[i+3].Addr, ms[i].Addr, "", "")(ctx); err != nil {
			t.Error(err)
		}
	}
}
