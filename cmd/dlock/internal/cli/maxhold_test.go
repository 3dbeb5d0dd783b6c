//go:build unix

package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock/cmd/dlock/internal/cli"
)

// TestMaxHoldInProcess runs a command that waits to be terminated under
// --max-hold: dlock must terminate it, exit 76 and release the lock.
func TestMaxHoldInProcess(t *testing.T) {
	url := memURL(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	marker := filepath.Join(t.TempDir(), "terminated")
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		defer pw.Close()
		done <- cli.Main([]string{"run", "--url", url, "--key", "cron", "--max-hold", "300ms", "--kill-after", "1m", "--",
			"sh", "-c", `trap 'echo x > "$1"; exit 9' TERM; echo started; sleep 1000 & wait`, "sh", marker},
			nil, pw, &stderr)
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || line != "started\n" {
		t.Fatalf("child output %q, %v", line, err)
	}
	var code int
	select {
	case code = <-done:
	case <-time.After(time.Minute):
		t.Fatal("dlock run --max-hold 300ms is still running after a minute")
	}
	t.Logf("stderr: %s", stderr.String())
	if code != cli.ExitLost {
		t.Errorf("exit status %d, want %d", code, cli.ExitLost)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the command did not get SIGTERM: %v", err)
	}
	if !strings.Contains(stderr.String(), `lock "cron" reached --max-hold 300ms`) {
		t.Errorf("stderr %q does not report the max hold", stderr.String())
	}
	l, err := openClient(t, url).TryLock(context.Background(), "cron")
	if err != nil {
		t.Fatalf("the lock was not released: %v", err)
	}
	l.Release(context.Background())
}

func TestMaxHoldUsageErrors(t *testing.T) {
	t.Setenv("DLOCK_URL", "mem://usage")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-hold", "0"}, "invalid --max-hold 0s: must be positive"},
		{[]string{"--max-hold", "-2s"}, "invalid --max-hold -2s: must be positive"},
		{[]string{"--max-hold", "1us"}, "invalid --max-hold 1µs: is below"},
		{[]string{"--max-hold", "5s", "--hold-at-least", "10s"}, "invalid --hold-at-least 10s: longer than --max-hold 5s"},
	} {
		marker := filepath.Join(t.TempDir(), "ran")
		r := runMain(t, append(append([]string{"run", "--key", "k"}, tt.args...), "--", "touch", marker)...)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("%q: exit status %d, stderr %q; want %d and %q", tt.args, r.code, r.stderr, cli.ExitUsage, tt.want)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("%q: the command ran", tt.args)
		}
	}
}
