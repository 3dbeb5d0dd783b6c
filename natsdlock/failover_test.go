package natsdlock

import (
	"testing"

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
