package testsrv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// redisOptions are the options of the tests' own go-redis clients: one
// connection, no retries (callers poll), RESP2, no identity or maintenance
// handshakes, and no question outliving its context's deadline.
func redisOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                     addr,
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		MaxRetries:               -1,
		DialTimeout:              2 * time.Second,
		DialerRetries:            1, // the callers poll themselves
		DialerRetryTimeout:       10 * time.Millisecond,
		ReadTimeout:              5 * time.Second,
		WriteTimeout:             5 * time.Second,
		PoolSize:                 1,
		ContextTimeoutEnabled:    true,
	}
}

// newQuickRedisClient returns a go-redis client with redisOptions.
func newQuickRedisClient(addr string) *redis.Client { return redis.NewClient(redisOptions(addr)) }

// wantAddrs is how many processes each kind has.
var wantAddrs = map[string]int{Redis: 1, RedisCluster: 6, RedisSentinel: 5, RedisQuorum: 5, Memcached: 1}

// checkServer checks a running server of redis.go or memcached.go: its
// addresses and URL, and that it stores and returns a value through the
// client library a backend would use.
func checkServer(t *testing.T, s *Server) {
	t.Helper()
	if len(s.Addrs) != wantAddrs[s.Name] {
		t.Fatalf("%s: Addrs = %q, want %d addresses", s.Name, s.Addrs, wantAddrs[s.Name])
	}
	if s.Addr != s.Addrs[0] {
		t.Errorf("Addr = %q, want Addrs[0] = %q", s.Addr, s.Addrs[0])
	}
	seen := map[string]bool{}
	for _, a := range s.Addrs {
		if !strings.HasPrefix(a, "127.0.0.1:") || seen[a] {
			t.Errorf("Addrs = %q: want distinct 127.0.0.1:port addresses", s.Addrs)
		}
		seen[a] = true
	}
	wantURL := map[string]string{
		Redis:        "redis://" + s.Addr + "/0",
		RedisCluster: "redis+cluster://" + strings.Join(s.Addrs, ","),
		RedisQuorum:  "redlock://" + strings.Join(s.Addrs, ","),
		Memcached:    "memcached://" + s.Addr,
	}[s.Name]
	if s.Name == RedisSentinel {
		wantURL = "redis+sentinel://" + strings.Join(s.Addrs[2:], ",") + "/mymaster"
	}
	if s.URL != wantURL {
		t.Errorf("URL = %q, want %q", s.URL, wantURL)
	}
	if _, _, err := s.NewDatabase(context.Background(), "x"); err == nil {
		t.Errorf("NewDatabase on %s succeeded, want an error", s.Name)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key, val := "testsrv:"+t.Name(), strconv.FormatInt(time.Now().UnixNano(), 10)
	switch s.Name {
	case Redis:
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
		defer c.Close()
		setGet(ctx, t, c, key, val)
	case RedisCluster:
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.Addrs})
		defer c.Close()
		// Keys in every node's slots.
		for i := range 20 {
			setGet(ctx, t, c, fmt.Sprintf("%s:%d", key, i), val)
		}
		var masters atomic.Int32
		if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			masters.Add(1)
			return m.Ping(ctx).Err()
		}); err != nil {
			t.Fatal(err)
		}
		if n := masters.Load(); n != 3 {
			t.Errorf("%d masters, want 3", n)
		}
		// Every master's write reaches its replica.
		for _, a := range s.Addrs[:3] {
			m := redis.NewClient(&redis.Options{Addr: a})
			defer m.Close()
			if n, err := m.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
				t.Errorf("WAIT 1 on %s = %d, %v; want 1 replica", a, n, err)
			}
		}
	case RedisSentinel:
		c := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:    "mymaster",
			SentinelAddrs: s.Addrs[2:],
		})
		defer c.Close()
		setGet(ctx, t, c, key, val)
		// The write reaches the replica.
		if n, err := c.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
			t.Errorf("WAIT 1 = %d, %v; want 1 replica", n, err)
		}
		r := redis.NewClient(&redis.Options{Addr: s.Addrs[1]})
		defer r.Close()
		if got, err := r.Get(ctx, key).Result(); err != nil || got != val {
			t.Errorf("GET on the replica = %q, %v; want %q", got, err, val)
		}
		if role := infoField(r.Info(ctx, "replication").Val(), "role"); role != "slave" {
			t.Errorf("replica's role = %q", role)
		}
	case RedisQuorum:
		// Independent servers: a key set on one is on none of the others.
		for i, a := range s.Addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			defer c.Close()
			if i == 0 {
				setGet(ctx, t, c, key, val)
				continue
			}
			if n, err := c.Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Errorf("%s: EXISTS %s = %d, %v; want 0", a, key, n, err)
			}
			if role := infoField(c.Info(ctx, "replication").Val(), "role"); role != "master" {
				t.Errorf("%s: role = %q, want master", a, role)
			}
		}
	case Memcached:
		c := memcache.New(s.Addr)
		defer c.Close()
		if err := c.Set(&memcache.Item{Key: "k", Value: []byte(val)}); err != nil {
			t.Fatal(err)
		}
		it, err := c.Get("k")
		if err != nil || string(it.Value) != val {
			t.Fatalf("Get = %v, %v; want %q", it, err, val)
		}
		// Only the TCP port is open (-U 0).
		if conn, err := net.ListenPacket("udp", s.Addr); err != nil {
			t.Errorf("UDP %s is taken: %v", s.Addr, err)
		} else {
			conn.Close()
		}
	default:
		t.Fatalf("unknown kind %q", s.Name)
	}
}

func setGet(ctx context.Context, t *testing.T, c redis.UniversalClient, key, val string) {
	t.Helper()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if err := c.Set(ctx, key, val, time.Minute).Err(); err != nil {
		t.Fatalf("SET %s: %v", key, err)
	}
	if got, err := c.Get(ctx, key).Result(); err != nil || got != val {
		t.Fatalf("GET %s = %q, %v; want %q", key, got, err, val)
	}
}

// TestRedisCluster checks the cluster's shape: three masters that hold
// all the slots, then a replica of each, in the order of the masters.
func TestRedisCluster(t *testing.T) {
	s := Get(t, RedisCluster)
	ctx := context.Background()
	ids := make([]string, len(s.Addrs))
	for i, a := range s.Addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		defer c.Close()
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for field, want := range map[string]string{
			"cluster_state":          "ok",
			"cluster_slots_assigned": "16384",
			"cluster_slots_ok":       "16384",
			"cluster_known_nodes":    "6",
			"cluster_size":           "3",
		} {
			if got := infoField(info, field); got != want {
				t.Errorf("%s: %s = %q, want %q", a, field, got, want)
			}
		}
		if ids[i], err = c.ClusterMyID(ctx).Result(); err != nil {
			t.Fatal(err)
		}
	}
	for i, a := range s.Addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			if role, n := infoField(info, "role"), infoField(info, "connected_slaves"); role != "master" || n != "1" {
				t.Errorf("%s: role:%s, connected_slaves:%s; want a master with one replica", a, role, n)
			}
			continue
		}
		master := infoField(info, "master_host") + ":" + infoField(info, "master_port")
		if role := infoField(info, "role"); role != "slave" || master != s.Addrs[i-3] {
			t.Errorf("%s: role:%s of %s; want a replica of %s", a, role, master, s.Addrs[i-3])
		}
		nodes, err := c.ClusterNodes(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		var self []string
		for _, line := range strings.Split(nodes, "\n") {
			if f := strings.Fields(line); len(f) > 3 && f[0] == ids[i] {
				self = f
			}
		}
		if len(self) == 0 || !hasFlag(self[2], "slave") || self[3] != ids[i-3] {
			t.Errorf("%s: CLUSTER NODES does not show it as the replica of %s:\n%s", a, ids[i-3], nodes)
		}
	}
}

// TestGroupStartFailure checks that when one process of a multi-process
// server fails to start, stopping the group stops the ones that started and
// removes the directory (what the Start functions do on failure).
func TestGroupStartFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts database servers")
	}
	bin, err := findRedis()
	if err != nil {
		t.Fatal(err)
	}
	s, err := newGroup(RedisQuorum)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err = s.startMembers(context.Background(), 3, func(ctx context.Context, i int) (*Server, error) {
		if i == 1 {
			return nil, boom
		}
		return s.startRedisMember(ctx, bin, "node"+strconv.Itoa(i), nil, nil)
	})
	if !errors.Is(err, boom) {
		t.Fatalf("startMembers = %v, want boom", err)
	}
	procs := processes(s)
	if len(procs) != 2 || len(s.Addrs) != 2 {
		t.Fatalf("%d processes, Addrs %q; want the 2 that started", len(procs), s.Addrs)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", p.Pid)); err == nil {
			t.Errorf("process %d still exists after Stop", p.Pid)
		}
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("dir %s still exists after Stop (err %v)", s.Dir, err)
	}
}

// TestRedisPortTaken checks that a Redis server whose port turns out to be
// taken is started again on another port.
func TestRedisPortTaken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts database servers")
	}
	bin, err := findRedis()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // refuse to talk, so that the readiness check fails fast
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	taken := l.Addr().(*net.TCPAddr).Port
	calls := 0
	pick := func() (int, error) {
		calls++
		if calls == 1 {
			return taken, nil
		}
		return freePort()
	}
	dir := t.TempDir()
	s, err := startRedisProcess(context.Background(), bin, Redis, dir, pick, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if calls != 2 || s.port == taken {
		t.Errorf("port picked %d times, running on %d (taken: %d); want a second, free port", calls, s.port, taken)
	}
}

func TestClusterPort(t *testing.T) {
	for range 20 {
		port, err := clusterPort()
		if err != nil {
			t.Fatal(err)
		}
		if port+clusterBusOffset > 65535 {
			t.Fatalf("clusterPort() = %d: no room for the bus port", port)
		}
		for _, p := range []int{port, port + clusterBusOffset} {
			l, err := net.Listen("tcp", loopbackAddr(p))
			if err != nil {
				t.Fatalf("port %d is not free: %v", p, err)
			}
			l.Close()
		}
	}
}

func TestInfoField(t *testing.T) {
	info := "# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nmaster_link_status:up\r\n"
	for field, want := range map[string]string{"role": "slave", "master_link_status": "up", "master": "", "nope": ""} {
		if got := infoField(info, field); got != want {
			t.Errorf("infoField(%q) = %q, want %q", field, got, want)
		}
	}
}
