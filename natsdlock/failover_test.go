package natsdlock

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"

	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// TestLeaderFailover runs the failover workload on a three-node JetStream
// cluster of its own, on a bucket of three replicas, while the leader of
// the bucket's stream is killed (and restarted) or paused (SIGSTOP) for
// six seconds, with clients opened from the cluster's URL.
func TestLeaderFailover(t *testing.T) {
	srv, err := testsrv.StartNATSCluster(ctx(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	srv.URL += "?replicas=3"
	dlocktest.LeaderFailover(t, srv, key(t))
}

// TestOpenWhileMetaLeaderHangs opens a new bucket through a follower while
// the cluster's meta leader is paused (SIGSTOP): the first request of the
// open goes to a leader that never answers, and the open must ask again
// once the others have elected a new one, not wait out its whole budget.
func TestOpenWhileMetaLeaderHangs(t *testing.T) {
	srv, err := testsrv.StartNATSCluster(ctx(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	leader, err := srv.Leader(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var follower *testsrv.Server
	for _, m := range srv.Members() {
		if m != leader {
			follower = m
		}
	}
	if err := leader.Pause(); err != nil {
		t.Fatal(err)
	}
	defer leader.Resume()
	url := "nats://" + follower.Addr + "/" + testsrv.DatabaseName(t.Name()) + "?replicas=2&discovery=false&connect_timeout=30s"
	c, err := dlock.Open(ctx(t), url)
	if err != nil {
		t.Fatalf("open while the meta leader hangs: %v", err)
	}
	defer c.Close()
	l, err := c.Lock(ctx(t), key(t), dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentOpenNewBucket opens one new bucket of three replicas from
// many connections at once, as a fleet does that starts after a deploy:
// each open must succeed although the others are creating the same stream
// and its leader is being elected.
func TestConcurrentOpenNewBucket(t *testing.T) {
	srv := testsrv.Get(t, testsrv.NATSCluster)
	url := fmt.Sprintf("%s/%s_%x?replicas=3", srv.URL, testsrv.DatabaseName(t.Name()), rand.Uint32()) // a new bucket on every run
	const n = 32
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := dlock.Open(ctx(t), url)
			if err == nil {
				err = c.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("open %d: %v", i, err)
		}
	}
}
