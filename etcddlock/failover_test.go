package etcddlock

import (
	"testing"

	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// TestLeaderFailover runs the failover workload on a three-member cluster
// of its own while its leader is killed (and restarted) or paused (SIGSTOP)
// for six seconds, with clients opened from the cluster's URL.
func TestLeaderFailover(t *testing.T) {
	srv, err := testsrv.StartEtcdCluster(ctx(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	dlocktest.LeaderFailover(t, srv, key(t))
}

// TestWaitThroughConnectionResets cuts a waiter's connection to etcd again
// and again while it waits: its Lock keeps waiting, and gets the lock once
// the holder releases it.
func TestWaitThroughConnectionResets(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	p, err := testsrv.StartProxy(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	holder := newLockClient(t, newTestDriver(t, srv.Addr))
	waiter := newTestDriver(t, p.Addr())
	defer waiter.Close()
	dlocktest.WaitThroughResets(t, holder, waiter, p, key(t))
}
