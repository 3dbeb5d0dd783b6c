//go:build unix

package main_test

import (
	"slices"
	"testing"
	"time"

	"github.com/dlockhq/dlock/cmd/dlock/internal/check"
)

// With a lock delay of one TTL, the holders that the check pauses or cuts
// off, which otherwise overlap the next holder once their lease has run out,
// overlap nobody: the next holder waits out the delay, and their late
// writes land before it starts: on stores whose lease includes the delay
// (Redis, PostgreSQL, a replicated NATS bucket), and on etcd, which keeps it
// with a shadow key that outlives the holder's session (ZooKeeper does not
// take a lock delay yet).
func TestCheckLockDelay(t *testing.T) {
	for _, s := range stores {
		if !slices.Contains([]string{"redis", "postgres", "nats-cluster", "etcd"}, s.name) {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, s.setup)
			r := e.run(append(checkArgs(s.shortTTL), "--lock-delay", s.shortTTL)...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("exit status %d, stderr %q; want 0 and nothing", r.code, r.stderr)
			}
			rep := parseReport(t, r.stdout)
			checkSaneReport(t, rep)
			if d, _ := time.ParseDuration(s.shortTTL); rep.LockDelay != d {
				t.Errorf("report's lock delay %v; want %v", rep.LockDelay, d)
			}
			for _, kind := range []string{check.FaultPause, check.FaultCut} {
				if f := fault(rep, kind); f == nil || f.Token == 0 {
					t.Errorf("%s fault %+v, want one that struck a holder", kind, f)
				}
			}
			if rep.Overlaps != 0 {
				t.Errorf("%d overlapping holds with a lock delay of one TTL; want 0", rep.Overlaps)
			}
		})
	}
}
