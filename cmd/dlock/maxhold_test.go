//go:build unix

package main_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/dlockhq/dlock/cmd/dlock/internal/cli"
)

// TestMaxHold runs a command that would run until it is signalled under
// --max-hold 2s: dlock must terminate it as on a loss, exit 76 and leave the
// lock free for the next run at once (its 30s lease would keep it
// otherwise).
func TestMaxHold(t *testing.T) {
	for _, name := range []string{"sqlite", "redis", "etcd"} {
		i := slices.IndexFunc(stores, func(s store) bool { return s.name == name })
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, stores[i].setup)
			marker, child := e.signalledCommand()
			p := e.start(append([]string{"run", "--key", "cron", "--max-hold", "2s", "--kill-after", "1m", "--"}, child...)...)
			p.started()
			code, stderr := p.wait()
			if code != cli.ExitLost {
				t.Errorf("exit status %d, want %d", code, cli.ExitLost)
			}
			if !strings.Contains(stderr, `lock "cron" reached --max-hold 2s`) {
				t.Errorf("stderr %q does not report the max hold", stderr)
			}
			if got := signalled(t, marker); got != "terminated" {
				t.Errorf("the command got %q, want SIGTERM (terminated)", got)
			}
			if r := e.run("run", "--key", "cron", "--wait", "0", "--", "true"); r.code != 0 {
				t.Errorf("the lock was not released: exit status %d", r.code)
			}
		})
	}
}
