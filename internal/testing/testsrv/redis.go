package testsrv

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// SentinelMaster is the name under which the sentinels of
// StartRedisSentinel monitor the master.
const SentinelMaster = "mymaster"

// Settings of the sentinels started by StartRedisSentinel.
const (
	// sentinels is how many sentinels watch the master.
	sentinels = 3
	// sentinelQuorum is how many sentinels must find the master down
	// before one of them fails it over (a majority must still elect
	// that one).
	sentinelQuorum = 2
	// sentinelDownAfter is the sentinels' down-after-milliseconds: how
	// long the master must be unreachable before a sentinel finds it down.
	sentinelDownAfter = 2 * time.Second
	// sentinelFailoverTimeout is the sentinels' failover-timeout; a
	// failover whose sentinel was not elected is tried again after twice
	// as long.
	sentinelFailoverTimeout = 3 * time.Second
)

// clusterNodeTimeout is the cluster-node-timeout of the nodes of
// StartRedisCluster: how long a master may not answer before the others
// find it failing and its replica takes over.
const clusterNodeTimeout = 2 * time.Second

// clusterBusOffset is the distance between a Redis Cluster node's client
// port and its cluster bus port.
const clusterBusOffset = 10000

// redisDirs are searched for redis-server after PATH.
var redisDirs = []string{"/usr/bin", "/usr/local/bin", "/usr/sbin", "/opt/homebrew/bin"}

// findRedis finds redis-server in PATH or the usual system directories.
func findRedis() (string, error) {
	p := lookPath([]string{"redis-server"}, redisDirs...)
	if p == "" {
		return "", fmt.Errorf("%w: redis (redis-server not found in PATH or %s)", ErrMissing, strings.Join(redisDirs, ", "))
	}
	return p, nil
}

// StartRedis starts a standalone Redis server on a free port on 127.0.0.1
// in a new temporary directory and waits until it answers PING. The server
// runs without persistence (no RDB snapshots, no AOF): its data, fencing
// counters included, are lost when it stops.
//
// Server.Addr is "127.0.0.1:port", Addrs holds Addr alone, and URL is
// "redis://127.0.0.1:port/0". The error wraps ErrMissing if redis-server
// cannot be found.
func StartRedis(ctx context.Context) (_ *Server, err error) {
	bin, err := findRedis()
	if err != nil {
		return nil, err
	}
	dir, err := makeTempDir(Redis, nil)
	if err != nil {
		return nil, err
	}
	s, err := startRedisProcess(ctx, bin, Redis, dir, nil, nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("testsrv: starting redis: %w", err)
	}
	s.URL = "redis://" + s.Addr + "/0"
	return s, nil
}

// StartRedisQuorum starts n independent standalone Redis servers (as
// StartRedis does, in parallel), for Redlock-style quorum locks. The
// returned Server stands for all of them: Addrs lists their addresses, Addr
// is the first, URL is "redlock://a,b,c,..." with every address, and Stop
// stops them all. Its Name is "redis-quorum"; Run starts it with n = 5
// (tests that want fewer servers use the first ones of Addrs).
func StartRedisQuorum(ctx context.Context, n int) (_ *Server, err error) {
	if n < 1 {
		return nil, fmt.Errorf("testsrv: StartRedisQuorum: n = %d, want at least 1", n)
	}
	bin, err := findRedis()
	if err != nil {
		return nil, err
	}
	s, err := newGroup(RedisQuorum)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = s.Stop()
			err = fmt.Errorf("testsrv: starting %s: %w", RedisQuorum, err)
		}
	}()
	if err := s.startMembers(ctx, n, func(ctx context.Context, i int) (*Server, error) {
		return s.startRedisMember(ctx, bin, "node"+strconv.Itoa(i), nil, nil)
	}); err != nil {
		return nil, err
	}
	s.URL = "redlock://" + strings.Join(s.Addrs, ",")
	return s, nil
}

// StartRedisCluster starts a Redis Cluster of three masters with one
// replica each (cluster-node-timeout 2 s, no persistence) on free ports on
// 127.0.0.1, assigns the 16384 hash slots evenly to the masters, joins the
// nodes, and waits until every node reports cluster_state:ok and knows
// every replica as the replica of its master, and every replica is in sync
// with its master. Each node's cluster bus port (its port + 10000) is free
// when the node starts.
//
// A killed or paused master is failed over to its replica a few seconds
// later (the other masters find it failing after the node timeout and
// elect the replica). A node keeps its cluster configuration (nodes.conf)
// when Restart starts it again, so it rejoins the cluster with its ID: a
// master that was failed over comes back as the replica of its successor.
//
// Server.Addrs lists the three masters, then their replicas in the same
// order (Addrs[3] replicates Addrs[0], and so on; the roles at start: a
// failover swaps a master and its replica), Addr is the first master, and
// URL is "redis+cluster://" with the six nodes. Stop stops every node.
// The error wraps ErrMissing if redis-server cannot be found.
func StartRedisCluster(ctx context.Context) (_ *Server, err error) {
	bin, err := findRedis()
	if err != nil {
		return nil, err
	}
	s, err := newGroup(RedisCluster)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = s.Stop()
			err = fmt.Errorf("testsrv: starting %s: %w", RedisCluster, err)
		}
	}()
	const masters = 3
	if err := s.startMembers(ctx, 2*masters, func(ctx context.Context, i int) (*Server, error) {
		name := "node" + strconv.Itoa(i)
		nodesConf := filepath.Join(s.Dir, name, "nodes.conf")
		launched := false
		m, err := s.startRedisMember(ctx, bin, name, clusterPort, func(port int) ([]string, error) {
			// A fresh node on every start attempt: no state from one that
			// failed to bind its ports. Restart keeps the node's state.
			if !launched {
				if err := os.Remove(nodesConf); err != nil && !errors.Is(err, os.ErrNotExist) {
					return nil, err
				}
			}
			return []string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", nodesConf,
				"--cluster-node-timeout", strconv.FormatInt(clusterNodeTimeout.Milliseconds(), 10),
				// No delay before a diskless full sync (the default
				// waits 5 s for more replicas to arrive).
				"--repl-diskless-sync-delay", "0",
			}, nil
		})
		launched = true
		return m, err
	}); err != nil {
		return nil, err
	}
	if err := createCluster(ctx, s.Addrs[:masters], s.Addrs[masters:]); err != nil {
		return nil, fmt.Errorf("%w%s", err, s.membersLogTail())
	}
	s.URL = "redis+cluster://" + strings.Join(s.Addrs, ",")
	return s, nil
}

// StartRedisSentinel starts a Redis master, one replica of it, and three
// sentinels that monitor the master under the name "mymaster"
// (SentinelMaster) with quorum 2, all without persistence on free ports on
// 127.0.0.1. It waits until the replica is in sync (master_link_status:up)
// and every sentinel reports the master, knows the replica and knows the
// other two sentinels. The sentinels find a master down after 2 s without
// an answer (down-after-milliseconds 2000, failover-timeout 3000), so a
// killed or paused master is failed over to the replica a few seconds
// later; a restarted or resumed old master is made a replica of the new
// one. Master returns the current master.
//
// Server.Addrs is [master, replica, sentinel, sentinel, sentinel] (the
// roles at start: after a failover the first two have swapped), Addr is
// the first master, and URL is "redis+sentinel://s1,s2,s3/mymaster" with
// the three sentinels. Stop stops all five. The error wraps ErrMissing if
// redis-server cannot be found.
func StartRedisSentinel(ctx context.Context) (_ *Server, err error) {
	bin, err := findRedis()
	if err != nil {
		return nil, err
	}
	s, err := newGroup(RedisSentinel)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = s.Stop()
			err = fmt.Errorf("testsrv: starting %s: %w", RedisSentinel, err)
		}
	}()
	// No delay before a diskless full sync (the default waits 5 s for more
	// replicas to arrive).
	noSyncDelay := func(int) ([]string, error) { return []string{"--repl-diskless-sync-delay", "0"}, nil }
	master, err := s.startRedisMember(ctx, bin, "master", nil, noSyncDelay)
	if err != nil {
		return nil, err
	}
	s.addMembers(master)
	masterHost, masterPort, _ := net.SplitHostPort(master.Addr)
	replica, err := s.startRedisMember(ctx, bin, "replica", nil, func(int) ([]string, error) {
		return []string{"--repl-diskless-sync-delay", "0", "--replicaof", masterHost, masterPort}, nil
	})
	if err != nil {
		return nil, err
	}
	s.addMembers(replica)
	// The sentinels start once the replica is in sync: a sentinel learns
	// of the replicas from the master's INFO, which it asks for when it
	// connects and then only every 10 s.
	if err := waitRedis(ctx, "replica in sync with the master", replica.Addr, replicaInSync); err != nil {
		return nil, fmt.Errorf("%w%s", err, s.membersLogTail())
	}
	if err := s.startMembers(ctx, sentinels, func(ctx context.Context, i int) (*Server, error) {
		return s.startSentinel(ctx, bin, "sentinel"+strconv.Itoa(i), master.Addr)
	}); err != nil {
		return nil, err
	}
	sentinelAddrs := s.Addrs[2:]
	for _, a := range sentinelAddrs {
		// The sentinels find each other through the master and replica
		// (every sentinel announces itself there every 2 s).
		if err := waitRedis(ctx, "sentinel to report the master, its replica and the other sentinels", a, func(ctx context.Context, c *redisConn) error {
			return sentinelReady(ctx, c, master.Addr, replica.Addr)
		}); err != nil {
			return nil, fmt.Errorf("%w%s", err, s.membersLogTail())
		}
	}
	s.URL = "redis+sentinel://" + strings.Join(sentinelAddrs, ",") + "/" + SentinelMaster
	return s, nil
}

// sentinelReady checks that the sentinel reports master as the address of
// SentinelMaster, sees it up, knows the other sentinels, and knows
// replica.
func sentinelReady(ctx context.Context, c *redisConn, master, replica string) error {
	addr, err := c.sentinelMasterAddr(ctx)
	if err != nil {
		return err
	}
	if addr != master {
		return fmt.Errorf("sentinel reports master %s, want %s", addr, master)
	}
	m, err := c.do(ctx, "SENTINEL", "master", SentinelMaster)
	if err != nil {
		return err
	}
	fields := redisFields(m)
	if flags := fields["flags"]; flags != "master" {
		return fmt.Errorf("sentinel reports master flags %q", flags)
	}
	if n := fields["num-other-sentinels"]; n != strconv.Itoa(sentinels-1) {
		return fmt.Errorf("sentinel knows %s other sentinels, want %d", n, sentinels-1)
	}
	reply, err := c.do(ctx, "SENTINEL", "replicas", SentinelMaster)
	if err != nil {
		return err
	}
	replicas, _ := reply.([]any)
	for _, r := range replicas {
		f := redisFields(r)
		if net.JoinHostPort(f["ip"], f["port"]) == replica && f["flags"] == "slave" {
			return nil
		}
	}
	return fmt.Errorf("sentinel does not know replica %s yet (%d replicas known)", replica, len(replicas))
}

// redisFields turns a reply that is a flat field/value array into a map of
// strings.
func redisFields(reply any) map[string]string {
	out := map[string]string{}
	r, _ := reply.([]any)
	for i := 0; i+1 < len(r); i += 2 {
		out[fmt.Sprint(r[i])] = fmt.Sprint(r[i+1])
	}
	return out
}

// startSentinel starts a sentinel, in the subdirectory name of the group's
// directory, monitoring the master at masterAddr. A sentinel needs a
// writable configuration file (it records there what it learns: its own
// ID, the other sentinels, the current master). The file is written anew
// for every start attempt, and kept when Restart starts the sentinel
// again.
func (s *Server) startSentinel(ctx context.Context, bin, name, masterAddr string) (*Server, error) {
	host, port, _ := net.SplitHostPort(masterAddr)
	dir := filepath.Join(s.Dir, name)
	conf := filepath.Join(dir, "sentinel.conf")
	config := fmt.Sprintf("sentinel monitor %s %s %s %d\n"+
		"sentinel down-after-milliseconds %s %d\n"+
		"sentinel failover-timeout %s %d\n",
		SentinelMaster, host, port, sentinelQuorum,
		SentinelMaster, sentinelDownAfter.Milliseconds(),
		SentinelMaster, sentinelFailoverTimeout.Milliseconds())
	m := &Server{Name: s.Name + "/" + name, Dir: dir, logPath: filepath.Join(dir, logFile), stopSig: syscall.SIGTERM}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	launched := false
	start := func(port int, log *os.File) (*exec.Cmd, error) {
		if !launched {
			if err := os.WriteFile(conf, []byte(config), 0o644); err != nil {
				return nil, err
			}
		}
		// The configuration file must come first, then --sentinel.
		args := append([]string{conf, "--sentinel"}, redisBaseArgs(port, dir, m.logPath)...)
		return startProcess(bin, args, dir, nil, log)
	}
	if err := m.launch(ctx, start, pingRedisPort); err != nil {
		_ = m.Stop()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	launched = true
	m.Addr = loopbackAddr(m.port)
	m.Addrs = []string{m.Addr}
	return m, nil
}

// newGroup creates the Server of a multi-process server and its temporary
// directory.
func newGroup(name string) (*Server, error) {
	dir, err := makeTempDir(name, nil)
	if err != nil {
		return nil, err
	}
	return &Server{Name: name, Dir: dir}, nil
}

// addMembers appends the processes (skipping nil ones) to the group, their
// addresses to Addrs, and sets Addr to the first address.
func (s *Server) addMembers(members ...*Server) {
	for _, m := range members {
		if m == nil {
			continue
		}
		s.members = append(s.members, m)
		s.Addrs = append(s.Addrs, m.Addr)
	}
	if len(s.Addrs) > 0 {
		s.Addr = s.Addrs[0]
	}
}

// startMembers starts n processes of the group in parallel, with start(ctx,
// i) for i in 0..n-1, and adds the ones that started in the order of i. If
// any failed it returns their errors.
func (s *Server) startMembers(ctx context.Context, n int, start func(ctx context.Context, i int) (*Server, error)) error {
	members := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			members[i], errs[i] = start(ctx, i)
		}()
	}
	wg.Wait()
	s.addMembers(members...)
	return errors.Join(errs...)
}

// startRedisMember starts one redis-server process of the group, in the
// subdirectory name of the group's directory.
func (s *Server) startRedisMember(ctx context.Context, bin, name string, portFn func() (int, error), extra func(port int) ([]string, error)) (*Server, error) {
	dir := filepath.Join(s.Dir, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	m, err := startRedisProcess(ctx, bin, s.Name+"/"+name, dir, portFn, extra)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

// startRedisProcess starts redis-server in dir (which exists) with the
// common arguments plus extra(port), and waits until it answers PING. On
// failure it stops the process and returns an error with the log's tail;
// dir is left for the caller to remove.
func startRedisProcess(ctx context.Context, bin, name, dir string, portFn func() (int, error), extra func(port int) ([]string, error)) (*Server, error) {
	return startRedisProcessReady(ctx, bin, name, dir, portFn, extra, pingRedisPort)
}

// startRedisProcessReady is startRedisProcess with ready as the readiness
// check instead of a plain PING.
func startRedisProcessReady(ctx context.Context, bin, name, dir string, portFn func() (int, error), extra func(port int) ([]string, error), ready func(ctx context.Context, port int) error) (*Server, error) {
	s := &Server{Name: name, logPath: filepath.Join(dir, logFile), stopSig: syscall.SIGTERM, portFn: portFn}
	start := func(port int, log *os.File) (*exec.Cmd, error) {
		args := redisBaseArgs(port, dir, s.logPath)
		if extra != nil {
			more, err := extra(port)
			if err != nil {
				return nil, err
			}
			args = append(args, more...)
		}
		return startProcess(bin, args, dir, nil, log)
	}
	if err := s.launch(ctx, start, ready); err != nil {
		_ = s.Stop() // s.Dir is unset: the directory stays
		return nil, err
	}
	s.Dir = dir
	s.Addr = loopbackAddr(s.port)
	s.Addrs = []string{s.Addr}
	return s, nil
}

// redisBaseArgs are the command-line options every Redis process gets: no
// configuration file from /etc, loopback only, everything in dir, no
// persistence, in the foreground.
func redisBaseArgs(port int, dir, logPath string) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--logfile", logPath,
		"--daemonize", "no",
		"--save", "",
		"--appendonly", "no",
	}
}

// loopbackAddr returns "127.0.0.1:port".
func loopbackAddr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// clusterPort returns a port that was free a moment ago on 127.0.0.1
// together with its cluster bus port (port + 10000), see freePortBelow.
func clusterPort() (int, error) {
	port, err := freePortBelow(clusterBusOffset)
	if err != nil {
		return 0, fmt.Errorf("testsrv: no free port with a free cluster bus port (port+%d): %w", clusterBusOffset, err)
	}
	return port, nil
}

// redisConn is a connection of the harness's own to a Redis process. It
// speaks RESP2 itself, one command at a time, so that testsrv imports no
// client library (and a program that imports a backend does not download
// the others' through the backends' tests).
type redisConn struct {
	net.Conn
	r *bufio.Reader
}

// redisTimeout bounds each command of a redisConn whose context has no
// earlier deadline.
const redisTimeout = 5 * time.Second

// dialRedis connects to the Redis process at addr, over TLS if cfg is not
// nil.
func dialRedis(ctx context.Context, addr string, cfg *tls.Config) (*redisConn, error) {
	var d interface {
		DialContext(ctx context.Context, network, addr string) (net.Conn, error)
	} = &net.Dialer{}
	if cfg != nil {
		d = &tls.Dialer{Config: cfg}
	}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &redisConn{Conn: conn, r: bufio.NewReader(conn)}, nil
}

// do sends a command and returns its reply: a string (simple or bulk), an
// int64, nil, or a []any of those; an error reply is returned as an error.
func (c *redisConn) do(ctx context.Context, args ...any) (any, error) {
	deadline := time.Now().Add(redisTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		s := fmt.Sprint(a)
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(s), s)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return nil, err
	}
	reply, err := c.reply()
	if err != nil {
		return nil, fmt.Errorf("%v: %w", args[0], err)
	}
	return reply, nil
}

// reply reads one RESP2 reply.
func (c *redisConn) reply() (any, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply")
	}
	switch kind, rest := line[0], line[1:]; kind {
	case '+':
		return rest, nil
	case '-':
		return nil, errors.New(rest)
	case ':':
		return strconv.ParseInt(rest, 10, 64)
	case '$', '*':
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 {
			return nil, err // a null reply is nil
		}
		if kind == '$' {
			b := make([]byte, n+2)
			_, err := io.ReadFull(c.r, b)
			return string(b[:n]), err
		}
		items := make([]any, n)
		for i := range items {
			if items[i], err = c.reply(); err != nil {
				return nil, err
			}
		}
		return items, nil
	}
	return nil, fmt.Errorf("reply %q", line)
}

// text runs a command whose reply is a string.
func (c *redisConn) text(ctx context.Context, args ...any) (string, error) {
	reply, err := c.do(ctx, args...)
	if s, ok := reply.(string); ok || err != nil {
		return s, err
	}
	return "", fmt.Errorf("%v: reply %v, want a string", args[0], reply)
}

// sentinelMasterAddr asks a sentinel for the address of SentinelMaster.
func (c *redisConn) sentinelMasterAddr(ctx context.Context) (string, error) {
	reply, err := c.do(ctx, "SENTINEL", "get-master-addr-by-name", SentinelMaster)
	if err != nil {
		return "", err
	}
	if addr, _ := reply.([]any); len(addr) == 2 {
		return net.JoinHostPort(fmt.Sprint(addr[0]), fmt.Sprint(addr[1])), nil
	}
	return "", fmt.Errorf("sentinel reports master address %v", reply)
}

// replicaInSync checks that the server is a replica whose link to its
// master is up.
func replicaInSync(ctx context.Context, c *redisConn) error {
	info, err := c.text(ctx, "INFO", "replication")
	if err != nil {
		return err
	}
	if v := infoField(info, "master_link_status"); v != "up" {
		return fmt.Errorf("master_link_status:%s", v)
	}
	return nil
}

// pingRedisPort is the readiness check of a Redis process: a PING over a
// new connection.
func pingRedisPort(ctx context.Context, port int) error {
	return pingRedis(ctx, port, nil, "", "")
}

// pingRedis sends PING over a new connection (TLS if cfg is not nil), after
// AUTH if password is set.
func pingRedis(ctx context.Context, port int, cfg *tls.Config, user, password string) error {
	c, err := dialRedis(ctx, loopbackAddr(port), cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	if password != "" {
		args := []any{"AUTH", password}
		if user != "" {
			args = []any{"AUTH", user, password}
		}
		if _, err := c.do(ctx, args...); err != nil {
			return errors.New("AUTH failed") // the reply may quote the password
		}
	}
	if pong, err := c.text(ctx, "PING"); err != nil || pong != "PONG" {
		return fmt.Errorf("PING: reply %q, %v", pong, err)
	}
	return nil
}

// waitRedis polls check, on a new connection to addr each time, until it
// succeeds or the deadline (readyTimeout, or ctx's if earlier) passes.
func waitRedis(ctx context.Context, what, addr string, check func(ctx context.Context, c *redisConn) error) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		c, err := dialRedis(ctx, addr, nil)
		if err == nil {
			err = check(ctx, c)
			c.Close()
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s (%s): %w; last error: %v", what, addr, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// infoField returns the value of field in the text of an INFO reply.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// createCluster turns the (empty, cluster-enabled) nodes at masters and
// replicas into one cluster, as redis-cli --cluster create would: distinct
// config epochs, the hash slots split evenly among the masters, every node
// met, replicas[i] the replica of masters[i]. It waits until every node
// reports cluster_state:ok and knows every replica as the replica of its
// master, and every replica is in sync (a master waits about 2 s after its
// start before it reports ok).
func createCluster(ctx context.Context, masters, replicas []string) error {
	const slots = 16384
	addrs := append(append([]string(nil), masters...), replicas...)
	conns := map[string]*redisConn{}
	for _, a := range addrs {
		c, err := dialRedis(ctx, a, nil)
		if err != nil {
			return err
		}
		defer c.Close()
		conns[a] = c
	}
	ids := map[string]string{}
	for _, a := range addrs {
		id, err := conns[a].text(ctx, "CLUSTER", "MYID")
		if err != nil {
			return fmt.Errorf("CLUSTER MYID on %s: %w", a, err)
		}
		ids[a] = id
	}
	for i, a := range masters {
		first, last := i*slots/len(masters), (i+1)*slots/len(masters)-1
		if _, err := conns[a].do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1); err != nil {
			return fmt.Errorf("CLUSTER SET-CONFIG-EPOCH on %s: %w", a, err)
		}
		add := []any{"CLUSTER", "ADDSLOTS"}
		for slot := first; slot <= last; slot++ {
			add = append(add, slot)
		}
		if _, err := conns[a].do(ctx, add...); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTS %d..%d on %s: %w", first, last, a, err)
		}
	}
	for _, a := range addrs[1:] {
		host, port, _ := net.SplitHostPort(a)
		if _, err := conns[addrs[0]].do(ctx, "CLUSTER", "MEET", host, port); err != nil {
			return fmt.Errorf("CLUSTER MEET %s from %s: %w", a, addrs[0], err)
		}
	}
	for i, a := range replicas {
		// A node replicates only a master it knows: wait for the MEET to
		// reach it.
		if err := waitRedis(ctx, "replica to replicate its master", a, func(ctx context.Context, c *redisConn) error {
			_, err := c.do(ctx, "CLUSTER", "REPLICATE", ids[masters[i]])
			return err
		}); err != nil {
			return err
		}
	}
	for _, a := range addrs {
		if err := waitRedis(ctx, "cluster_state:ok with every replica known", a, func(ctx context.Context, c *redisConn) error {
			info, err := c.text(ctx, "CLUSTER", "INFO")
			if err != nil {
				return err
			}
			if v := infoField(info, "cluster_state"); v != "ok" {
				return fmt.Errorf("cluster_state:%s, cluster_known_nodes:%s, cluster_slots_assigned:%s",
					v, infoField(info, "cluster_known_nodes"), infoField(info, "cluster_slots_assigned"))
			}
			nodes, err := c.text(ctx, "CLUSTER", "NODES")
			if err != nil {
				return err
			}
			return clusterShaped(nodes, ids, masters, replicas)
		}); err != nil {
			return err
		}
	}
	for _, a := range replicas {
		if err := waitRedis(ctx, "replica in sync with its master", a, replicaInSync); err != nil {
			return err
		}
	}
	return nil
}

// clusterShaped checks a node's CLUSTER NODES reply: it knows the nodes
// of ids and no other, none failing or still in handshake, masters[i] a
// master and replicas[i] its replica.
func clusterShaped(nodes string, ids map[string]string, masters, replicas []string) error {
	type node struct{ flags, master string }
	known := map[string]node{}
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return fmt.Errorf("CLUSTER NODES line %q", line)
		}
		known[f[0]] = node{flags: f[2], master: f[3]}
	}
	if len(known) != len(ids) {
		return fmt.Errorf("%d nodes known, want %d", len(known), len(ids))
	}
	for i, a := range masters {
		m := known[ids[a]]
		if !hasFlag(m.flags, "master") || hasFlag(m.flags, "fail", "fail?", "handshake", "noaddr") {
			return fmt.Errorf("master %s has flags %q", a, m.flags)
		}
		r := known[ids[replicas[i]]]
		if !hasFlag(r.flags, "slave") || hasFlag(r.flags, "fail", "fail?", "handshake", "noaddr") || r.master != ids[a] {
			return fmt.Errorf("replica %s has flags %q and master %s, want a replica of %s", replicas[i], r.flags, r.master, a)
		}
	}
	return nil
}

// hasFlag reports whether the comma-separated flags of a CLUSTER NODES line
// include one of want.
func hasFlag(flags string, want ...string) bool {
	for _, f := range strings.Split(flags, ",") {
		for _, w := range want {
			if f == w {
				return true
			}
		}
	}
	return false
}

// membersLogTail returns the log tails of the group's processes, for error
// messages.
func (s *Server) membersLogTail() string {
	var b strings.Builder
	for _, m := range s.members {
		b.WriteString(m.logTail())
	}
	return b.String()
}
