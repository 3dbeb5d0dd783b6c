//go:build unix

package main_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/cmd/dlock/internal/check"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// Store faults: dlock check's lost-update workload (worker processes, each
// increment under the lock, a fenced register) runs against a deployment of
// the test's own while the test makes the store fail: a leader or master
// killed (and restarted), hung (SIGSTOP, then SIGCONT), a whole server
// paused or restarted. Where the backend promises safety under the fault,
// the check must pass (no lost update, no stale fenced write accepted, no
// overlap while a holder's lock was valid); the documented-unsafe cases
// (Redis restarted without persistence, failover of asynchronous
// replication, memcached) run too, and their outcome is logged, not
// asserted. The longest time without an acquisition is measured and
// logged, never asserted: machines are noisy.

const (
	faultTTL      = 2 * time.Second // the workload's lease
	faultDuration = 9 * time.Second // the workload
	faultAt       = 2 * time.Second // when the fault strikes, from the start
	faultFor      = 4 * time.Second // how long it lasts
)

// storeFault is one deployment and one fault of it.
type storeFault struct {
	name string
	// start starts a deployment private to the case.
	start func(ctx context.Context) (*testsrv.Server, error)
	// url is its URL for the check (query parameters included).
	url func(t *testing.T, s *testsrv.Server) string
	// victims picks the members the fault strikes, when it strikes.
	victims func(ctx context.Context, s *testsrv.Server) ([]*testsrv.Server, error)
	// pause hangs the victims (SIGSTOP) instead of killing them; either
	// way they come back after faultFor.
	pause bool
	// safe says that the backend promises safety under this fault: the
	// check's verdict is asserted.
	safe bool
}

// leader picks the current leader (etcd, ZooKeeper) or master (Sentinel).
func leader(ctx context.Context, s *testsrv.Server) ([]*testsrv.Server, error) {
	var (
		m   *testsrv.Server
		err error
	)
	if s.Name == testsrv.RedisSentinel {
		m, err = s.Master(ctx)
	} else {
		m, err = s.Leader(ctx)
	}
	return []*testsrv.Server{m}, err
}

// whole picks every process of the deployment.
func whole(_ context.Context, s *testsrv.Server) ([]*testsrv.Server, error) { return s.Members(), nil }

// lastN picks the last n members (the check keeps its resource on a
// Redlock's first server).
func lastN(n int) func(context.Context, *testsrv.Server) ([]*testsrv.Server, error) {
	return func(_ context.Context, s *testsrv.Server) ([]*testsrv.Server, error) {
		ms := s.Members()
		return ms[len(ms)-n:], nil
	}
}

// clusterPrefix is the key prefix of the check on Redis Cluster, which
// names the hash slot of its lock.
const clusterPrefix = "faults:"

// clusterMaster picks the Redis Cluster master that owns the slot of the
// check's lock.
func clusterMaster(ctx context.Context, s *testsrv.Server) ([]*testsrv.Server, error) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.Addrs})
	defer c.Close()
	m, err := c.MasterForKey(ctx, "{"+clusterPrefix+check.LockKey+"}")
	if err != nil {
		return nil, err
	}
	for _, mm := range s.Members() {
		if mm.Addr == m.Options().Addr {
			return []*testsrv.Server{mm}, nil
		}
	}
	return nil, fmt.Errorf("no member listens on %s", m.Options().Addr)
}

func plainURL(_ *testing.T, s *testsrv.Server) string { return s.URL }

func clusterURL(_ *testing.T, s *testsrv.Server) string { return s.URL + "?prefix=" + clusterPrefix }

// sessionURL gives etcd and ZooKeeper a 2s session, so that a client cut
// off by the fault loses its holds soon.
func sessionURL(_ *testing.T, s *testsrv.Server) string { return s.URL + "?session=2s" }

// replicatedURL makes the NATS bucket a replica on every server.
func replicatedURL(_ *testing.T, s *testsrv.Server) string { return s.URL + "/dlock?replicas=3" }

func dbURL(t *testing.T, s *testsrv.Server) string {
	u, _, err := s.NewDatabase(context.Background(), "faults")
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// staleLeader: on the 3-member etcd cluster, a leader resumed after a
// SIGSTOP longer than the sessions' TTL revokes, as it wakes, the leases
// that expired in its frozen view, and the cluster applies those
// revocations although the clients renewed the leases with the new leader
// meanwhile (etcd-io/etcd#15247; mitigated only from etcd 3.4.30 and 3.5.13,
// and not entirely). A lock taken on such a session can then be taken by
// another client while it is still valid: seen about once in twenty runs of
// this case with the 2s sessions used here and Debian's etcd 3.4. The case
// runs and its outcome is reported, not asserted; the README tells users to
// keep the session TTL above the pauses they expect and to fence.
var storeFaults = []storeFault{
	{name: "etcd-cluster/leader-kill", start: func(ctx context.Context) (*testsrv.Server, error) { return testsrv.StartEtcdCluster(ctx, 3) },
		url: sessionURL, victims: leader, safe: true},
	{name: "etcd-cluster/leader-stop", start: func(ctx context.Context) (*testsrv.Server, error) { return testsrv.StartEtcdCluster(ctx, 3) },
		url: sessionURL, victims: leader, pause: true, safe: false /* see staleLeader */},
	{name: "zookeeper-ensemble/leader-kill", start: func(ctx context.Context) (*testsrv.Server, error) {
		return testsrv.StartZooKeeperEnsemble(ctx, 3)
	}, url: sessionURL, victims: leader, safe: true},
	{name: "zookeeper-ensemble/leader-stop", start: func(ctx context.Context) (*testsrv.Server, error) {
		return testsrv.StartZooKeeperEnsemble(ctx, 3)
	}, url: sessionURL, victims: leader, pause: true, safe: true},
	// The leader of the stream of the bucket "dlock", replicated on all three.
	{name: "nats-cluster/leader-kill", start: func(ctx context.Context) (*testsrv.Server, error) { return testsrv.StartNATSCluster(ctx, 3) },
		url: replicatedURL, victims: leader, safe: true},
	{name: "nats-cluster/leader-stop", start: func(ctx context.Context) (*testsrv.Server, error) { return testsrv.StartNATSCluster(ctx, 3) },
		url: replicatedURL, victims: leader, pause: true, safe: true},
	{name: "redlock-5/2-nodes-stop", start: func(ctx context.Context) (*testsrv.Server, error) { return testsrv.StartRedisQuorum(ctx, 5) },
		url: plainURL, victims: lastN(2), pause: true, safe: true},
	{name: "redlock-5/2-nodes-kill", start: func(ctx context.Context) (*testsrv.Server, error) { return testsrv.StartRedisQuorum(ctx, 5) },
		url: plainURL, victims: lastN(2), safe: true},
	// Asynchronous replication: a failover can lose a lock (documented).
	{name: "redis-sentinel/master-kill", start: (testsrv.StartRedisSentinel), url: plainURL, victims: leader},
	{name: "redis-cluster/master-kill", start: (testsrv.StartRedisCluster), url: clusterURL, victims: clusterMaster},
	{name: "postgres/stop", start: (testsrv.StartPostgres), url: dbURL, victims: whole, pause: true, safe: true},
	{name: "postgres/restart", start: (testsrv.StartPostgres), url: dbURL, victims: whole, safe: true},
	{name: "mariadb/restart", start: (testsrv.StartMariaDB), url: dbURL, victims: whole, safe: true},
	{name: "etcd/restart", start: (testsrv.StartEtcd), url: sessionURL, victims: whole, safe: true},
	{name: "zookeeper/restart", start: (testsrv.StartZooKeeper), url: sessionURL, victims: whole, safe: true},
	{name: "nats/restart", start: (testsrv.StartNATS), url: plainURL, victims: whole, safe: true},
	// Without persistence a restarted Redis has forgotten the lock, and
	// memcached everything (documented).
	{name: "redis/restart", start: (testsrv.StartRedis), url: plainURL, victims: whole},
	{name: "memcached/restart", start: (testsrv.StartMemcached), url: plainURL, victims: whole},
}

func TestStoreFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("store faults take minutes")
	}
	var (
		mu      sync.Mutex
		summary []string
	)
	for _, c := range storeFaults {
		t.Run(c.name, func(t *testing.T) {
			line := runStoreFault(t, c)
			mu.Lock()
			summary = append(summary, line)
			mu.Unlock()
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-32s %-8s %6s %5s %5s %5s %9s  %s\n", "deployment/fault", "promised", "acq", "lost", "stale", "ovl", "gap", "verdict")
	for _, l := range summary {
		b.WriteString(l + "\n")
	}
	t.Logf("store faults (ttl %s, fault at %v for %v):\n%s", faultTTL, faultAt, faultFor, b.String())
	if os.Getenv("DLOCK_FAULT_SUMMARY") != "" {
		os.WriteFile(os.Getenv("DLOCK_FAULT_SUMMARY"), []byte(b.String()), 0o644)
	}
}

// runStoreFault runs one case and returns its summary line.
func runStoreFault(t *testing.T, c storeFault) string {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := c.start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			t.Logf("stopping the deployment: %v", err)
		}
	}()
	started := make(chan struct{})
	cfg := check.Config{
		URL: c.url(t, srv), Workers: 3, Duration: faultDuration, TTL: faultTTL, Hold: 50 * time.Millisecond,
		Worker:  func() *exec.Cmd { return exec.Command(dlockBin, "check-worker") },
		Started: func() { close(started) },
	}
	faultErr := make(chan error, 1)
	go func() { faultErr <- strike(ctx, srv, c, started) }()
	rep, err := check.Run(ctx, cfg)
	if ferr := <-faultErr; ferr != nil {
		t.Fatalf("injecting the fault: %v", ferr)
	}
	if err != nil {
		t.Fatalf("dlock check: %v", err)
	}
	verdict := "ok"
	if !rep.OK {
		var failed []string
		for _, ch := range rep.Checks {
			if ch.Promised && !ch.OK {
				failed = append(failed, ch.Name+": "+ch.Detail)
			}
		}
		verdict = "FAILED " + strings.Join(failed, "; ")
	}
	line := fmt.Sprintf("%-32s %-8v %6d %5d %5d %5d %9v  %s", c.name, c.safe, rep.Acquisitions, rep.LostUpdates,
		rep.StaleAccepted, rep.Violations, rep.LongestGap.Round(10*time.Millisecond), verdict)
	t.Log(line)
	if len(rep.ErrorSamples) > 0 {
		t.Logf("errors: %q", rep.ErrorSamples)
	}
	for _, v := range rep.ViolationSamples {
		t.Logf("violation: %s", v)
	}
	if c.safe {
		if !rep.OK {
			t.Errorf("the backend promises safety under this fault, but the check failed: %s", verdict)
		}
		if rep.Acquisitions == 0 {
			t.Errorf("no acquisition at all")
		}
	}
	return line
}

// strike waits until faultAt into the workload (which started is closed
// at the start of), kills or pauses the victims, and brings them back
// after faultFor.
func strike(ctx context.Context, srv *testsrv.Server, c storeFault, started <-chan struct{}) error {
	select {
	case <-started:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-time.After(faultAt):
	case <-ctx.Done():
		return ctx.Err()
	}
	victims, err := c.victims(ctx, srv)
	if err != nil {
		return err
	}
	for _, v := range victims {
		if c.pause {
			err = v.Pause()
		} else {
			err = v.Kill()
		}
		if err != nil {
			return err
		}
	}
	select {
	case <-time.After(faultFor):
	case <-ctx.Done():
		return ctx.Err()
	}
	for _, v := range victims {
		if c.pause {
			err = v.Resume()
		} else {
			err = v.Restart(ctx)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
