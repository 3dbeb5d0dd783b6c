package zkdlock

import (
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"

	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// TestLeaderFailover runs the failover workload on a three-server ensemble
// of its own while its leader is killed (and restarted) or paused (SIGSTOP)
// for six seconds, with clients opened from the ensemble's URL.
func TestLeaderFailover(t *testing.T) {
	srv, err := testsrv.StartZooKeeperEnsemble(ctx(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	dlocktest.LeaderFailover(t, srv, key(t))
}

// TestWaitersThroughLeaderPause pauses the leader of a three-server
// ensemble for six seconds, longer than the lease of the waiters' queue
// entries, while a holder holds a key and three waiters wait for it: no
// waiter ends its wait while its context is live; each queues again, and
// they all get the lock in turn once the holder has released it.
func TestWaitersThroughLeaderPause(t *testing.T) {
	srv, err := testsrv.StartZooKeeperEnsemble(ctx(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	k := key(t)
	const ttl = 3 * time.Second
	ensemble := func() driver.Driver {
		d, err := New(srv.Addrs)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	holder := client(t, ensemble())
	l, err := holder.Lock(ctx(t), k, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 3)
	for range cap(results) {
		sp := newSpy(ensemble())
		w := client(t, sp)
		go func() {
			lw, err := w.Lock(ctx(t), k, dlock.WithTTL(ttl))
			if err == nil {
				err = lw.Release(ctx(t))
			}
			results <- err
		}()
		wait(t, sp.waiting, "waiter queued")
	}
	leader, err := srv.Leader(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second) // the fault lasts
	if err := leader.Resume(); err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx(t)) // if the holder's session ended, its lock is lost
	for range cap(results) {
		if err := wait(t, results, "waiter's Lock"); err != nil {
			t.Errorf("waiter's Lock = %v; want the lock", err)
		}
	}
}

// TestWaitThroughConnectionResets cuts a waiter's connection to ZooKeeper
// again and again while it waits: its Lock keeps waiting, and gets the
// lock once the holder releases it.
func TestWaitThroughConnectionResets(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	p := startProxy(t, srv.Addr)
	holder := client(t, newTestDriver(t, srv.Addr))
	dlocktest.WaitThroughResets(t, holder, newTestDriver(t, p.Addr()), p, key(t))
}
