package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/go-zookeeper/zk"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// storeKind is a kind of server the locks run on.
type storeKind struct {
	name   string // as in -stores and in cell names
	server string // the server's name in the round trip line
	// start starts the store's servers (or connects to existing ones, as
	// the flags say).
	start func(ctx context.Context, cfg config) (*servers, error)
	// probe opens the bench's own connection to servers: addrs as the
	// libraries dial them, direct without the delay proxy.
	// pids are the servers' process IDs (nil or 0 where unknown), for
	// their CPU time.
	probe func(addrs, direct []string, pids []int, s settings) (probe, error)
}

// storeList lists the stores in the order they run and are reported.
var storeList = []storeKind{
	{name: "redis", server: "redis-server", start: startRedis, probe: newRedisProbe},
	{name: "etcd", server: "etcd", start: startEtcd, probe: newEtcdProbe},
	{name: "zk", server: "zookeeper", start: startZooKeeper, probe: newZkProbe},
	{name: "pg", server: "postgres", start: startPostgres, probe: newPgProbe},
	{name: "nats", server: "nats-server", start: startNATS, probe: newNatsProbe},
}

func storeNames() []string {
	var ns []string
	for _, st := range storeList {
		ns = append(ns, st.name)
	}
	return ns
}

// servers are the running servers of one store.
type servers struct {
	addrs  []string // what the libraries dial
	direct []string // the servers themselves
	pids   []int    // the servers' processes (PostgreSQL: the postmaster), nil if not started here
	// maxClients is the number of the libraries' clients the server takes
	// at once (0: no limit known): cells that need more are skipped.
	maxClients int
	stop       func()
}

// pidsOf returns the process IDs of the first n servers (0 where unknown).
func (s *servers) pidsOf(n int) []int {
	pids := make([]int, n)
	copy(pids, s.pids)
	return pids
}

func existing(addrs []string) *servers {
	return &servers{addrs: addrs, direct: addrs, stop: func() {}}
}

func started(srv *testsrv.Server) *servers {
	var pids []int
	for _, m := range srv.Members() {
		pids = append(pids, m.Pid())
	}
	return &servers{addrs: srv.Addrs, direct: srv.Addrs, pids: pids, stop: func() { srv.Stop() }}
}

// startRedis starts five independent redis-servers on free loopback ports,
// without persistence, killed with this process if it dies.
func startRedis(ctx context.Context, cfg config) (*servers, error) {
	if cfg.redis != nil {
		return existing(cfg.redis), nil
	}
	// The harness polls each server until it answers; go-redis would log
	// every refused connection meanwhile.
	redisLog.quiet.Store(true)
	srv, err := testsrv.StartRedisQuorum(ctx, 5)
	redisLog.quiet.Store(false)
	if err != nil {
		return nil, fmt.Errorf("%w (install redis-server, pass -redis, or leave redis out of -stores)", err)
	}
	return started(srv), nil
}

// startEtcd starts a single-member etcd cluster.
func startEtcd(ctx context.Context, cfg config) (*servers, error) {
	if cfg.etcd != "" {
		return existing([]string{cfg.etcd}), nil
	}
	srv, err := testsrv.StartEtcd(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w (install etcd, pass -etcd, or leave etcd out of -stores)", err)
	}
	return started(srv), nil
}

// startZooKeeper starts a standalone ZooKeeper server.
func startZooKeeper(ctx context.Context, cfg config) (*servers, error) {
	if cfg.zk != "" {
		return existing([]string{cfg.zk}), nil
	}
	srv, err := testsrv.StartZooKeeper(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w (install ZooKeeper, pass -zk, or leave zk out of -stores)", err)
	}
	return started(srv), nil
}

// startNATS starts a nats-server with JetStream.
func startNATS(ctx context.Context, cfg config) (*servers, error) {
	if cfg.nats != "" {
		return existing([]string{cfg.nats}), nil
	}
	srv, err := testsrv.StartNATS(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w (install nats-server with scripts/install-servers.sh, pass -nats, or leave nats out of -stores)", err)
	}
	return started(srv), nil
}

// natsProbe flushes a connection of its own (a PING and its PONG: one
// round trip).
type natsProbe struct {
	nc  *nats.Conn
	pid int
}

func newNatsProbe(addrs, _ []string, pids []int, _ settings) (probe, error) {
	nc, err := nats.Connect("nats://"+addrs[0], nats.Timeout(connectTimeout))
	if err != nil {
		return nil, err
	}
	return &natsProbe{nc, pids[0]}, nil
}

func (p *natsProbe) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout) // the client flushes only with a deadline
	defer cancel()
	return p.nc.FlushWithContext(ctx)
}

func (p *natsProbe) serverCPU(context.Context) time.Duration { return procTreeCPU(p.pid) }

func (p *natsProbe) records(context.Context) (int, error) { return 0, errNoRecords }

func (p *natsProbe) close() { p.nc.Close() }

// probe is the bench's own connection to the servers of a cell, beside the
// libraries' clients.
type probe interface {
	// ping makes one request that changes nothing: a round trip.
	ping(ctx context.Context) error
	// serverCPU returns the CPU time the servers have used; 0 if unknown.
	serverCPU(ctx context.Context) time.Duration
	// records returns the number of lock records (etcd: keys; ZooKeeper:
	// ephemeral znodes) on the server now, read after everything the
	// server acknowledged before the call. The FIFO workload counts
	// waiters with it.
	records(ctx context.Context) (int, error)
	close()
}

var errNoRecords = errors.New("this store cannot count lock records")

// redisProbe PINGs the first server and reads every server's INFO cpu.
type redisProbe struct {
	cs       []*redis.Client
	closeAll func()
}

func newRedisProbe(addrs, _ []string, _ []int, s settings) (probe, error) {
	cs, closeAll := newClients(addrs, s)
	return &redisProbe{cs, closeAll}, nil
}

func (p *redisProbe) close() { p.closeAll() }

func (p *redisProbe) ping(ctx context.Context) error { return p.cs[0].Ping(ctx).Err() }

func (p *redisProbe) serverCPU(ctx context.Context) time.Duration { return serverCPU(ctx, p.cs) }

func (p *redisProbe) records(context.Context) (int, error) { return 0, errNoRecords }

// etcdProbe reads a key that does not exist (a linearizable read: one
// round trip to the leader) and counts every key of the keyspace.
type etcdProbe struct {
	cli, direct *clientv3.Client
	pid         int
}

func newEtcdProbe(addrs, direct []string, pids []int, _ settings) (probe, error) {
	cli, err := newEtcdClient(addrs[0])
	if err != nil {
		return nil, err
	}
	d, err := newEtcdClient(direct[0])
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &etcdProbe{cli, d, pids[0]}, nil
}

func (p *etcdProbe) ping(ctx context.Context) error {
	_, err := p.cli.Get(ctx, "bench-ping")
	return err
}

func (p *etcdProbe) serverCPU(context.Context) time.Duration { return procTreeCPU(p.pid) }

func (p *etcdProbe) records(ctx context.Context) (int, error) {
	resp, err := p.direct.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return int(resp.Count), nil
}

func (p *etcdProbe) close() {
	p.cli.Close()
	p.direct.Close()
}

// zkProbe checks that the root znode exists (a read, served by the server
// the session is connected to: one round trip) and counts ephemeral znodes
// with the four-letter word mntr.
type zkProbe struct {
	conn   *zk.Conn
	direct string
	pid    int
}

func newZkProbe(addrs, direct []string, pids []int, _ settings) (probe, error) {
	conn, err := connectZk(addrs[0])
	if err != nil {
		return nil, err
	}
	return &zkProbe{conn, direct[0], pids[0]}, nil
}

func (p *zkProbe) ping(ctx context.Context) error {
	_, _, err := p.conn.Exists("/")
	return err
}

func (p *zkProbe) serverCPU(context.Context) time.Duration { return procTreeCPU(p.pid) }

// records reads zk_ephemerals_count from mntr, over a connection of its own.
// A standalone server applies a request to its tree before it answers it,
// and mntr reads the tree.
func (p *zkProbe) records(ctx context.Context) (int, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", p.direct)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("mntr")); err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "\t")
		if k == "zk_ephemerals_count" {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("mntr: %w", err)
	}
	return 0, errors.New("mntr: no zk_ephemerals_count (is mntr in 4lw.commands.whitelist?)")
}

func (p *zkProbe) close() { p.conn.Close() }

// pingProbe measures a store's round trip: back-to-back requests of the
// probe.
func pingProbe(ctx context.Context, pr probe, dur time.Duration) result {
	var s samples
	start := time.Now()
	for time.Since(start) < dur && ctx.Err() == nil {
		t0 := time.Now()
		if err := pr.ping(ctx); err != nil {
			s.err(err)
			break
		}
		s.locks = append(s.locks, time.Since(t0))
	}
	s.elapsed, s.ops = time.Since(start), len(s.locks)
	r := s.result()
	r.Goroutines, r.Servers = 1, 1
	return r
}
