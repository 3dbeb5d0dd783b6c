package zkdlock

import (
	"testing"

	"github.com/dlockhq/dlock/internal/dlocktest"
	"github.com/dlockhq/dlock/internal/testsrv"
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
