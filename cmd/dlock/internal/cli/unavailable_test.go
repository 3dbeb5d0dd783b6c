//go:build unix

package cli_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock/cmd/dlock/internal/cli"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// TestWaitWithoutReplica checks that `dlock run` waiting for a lock that
// becomes free on a Redis Sentinel deployment whose replica is gone, with
// wait_replicas=1, reports the store as unavailable (status 69), not the
// lock as held.
func TestWaitWithoutReplica(t *testing.T) {
	ctx := context.Background()
	srv, err := testsrv.StartRedisSentinel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	holder, err := openClient(t, srv.URL).TryLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Members()[1].Kill(); err != nil { // master, replica, sentinel
		t.Fatal(err)
	}
	// The lock is free in 2s: dlock first finds it held, then every
	// attempt takes it and gives it back for want of the replica.
	if err := holder.ReleaseAfter(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	r := runMain(t, "run", "--url", srv.URL+"?wait_replicas=1&wait_timeout=100ms", "--key", "job", "--wait", "6s", "--", "touch", marker)
	if r.code != cli.ExitUnavailable || !strings.Contains(r.stderr, "replicas") {
		t.Errorf("exit status %d, stderr %q; want %d and the missing replica named", r.code, r.stderr, cli.ExitUnavailable)
	}
}
