//go:build unix

package main_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dlockhq/dlock/cmd/dlock/internal/cli"
)

// runIn runs dlock to completion with stdin and extra environment.
func (e *env) runIn(stdin string, extra []string, args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	defer cancel()
	cmd := e.command(ctx, args...)
	cmd.Env = append(cmd.Env, extra...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		e.t.Fatalf("dlock %q: %v", args, err)
	}
	r := result{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
	e.t.Logf("dlock %q: exit %d\nstdout: %s\nstderr: %s", cmd.Args[1:], r.code, r.stdout, r.stderr)
	return r
}

// sessionStores hold locks on the session of the process that took them.
var sessionStores = map[string]bool{"etcd": true, "zookeeper": true}

// A hold taken by one dlock process outlives it; other processes extend
// and release it with its hold ID, given on stdin or in DLOCK_HOLD, and a
// spent hold ID is refused. Stores whose holds end with their session
// refuse to take the hold.
func TestHoldAcrossProcesses(t *testing.T) {
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			e := newEnv(t, s.setup)
			r := e.run("hold", "--key", "phone", "--ttl", "15m", "--wait", "0")
			if sessionStores[s.name] {
				if r.code != cli.ExitUnavailable || !strings.Contains(r.stderr, "session") || r.stdout != "" {
					t.Errorf("hold: exit status %d, stderr %q; want %d and why", r.code, r.stderr, cli.ExitUnavailable)
				}
				// Nothing was taken.
				if r := e.run("run", "--key", "phone", "--wait", "0", "--", "true"); r.code != 0 {
					t.Errorf("run after a refused hold: exit status %d", r.code)
				}
				return
			}
			id := strings.TrimSpace(r.stdout)
			if r.code != 0 || !strings.HasPrefix(id, "dlh1.") {
				t.Fatalf("hold: exit status %d, stdout %q", r.code, r.stdout)
			}
			// The hold outlived the process that took it.
			if r := e.run("run", "--key", "phone", "--wait", "0", "--", "true"); r.code != cli.ExitNotAcquired {
				t.Errorf("run while held: exit status %d, want %d", r.code, cli.ExitNotAcquired)
			}
			held := "held for 1h0m0s"
			if s.name == "memcached" || strings.HasPrefix(s.name, "nats") {
				// Leases of whole seconds: dlock counts on one less.
				held = "held for 59m59s"
			}
			if r := e.runIn(id+"\n", nil, "extend", "--hold", "-", "--ttl", "1h"); r.code != 0 || !strings.Contains(r.stdout, held) {
				t.Errorf("extend: exit status %d, stdout %q; want %s", r.code, r.stdout, held)
			}
			if r := e.run("run", "--key", "phone", "--wait", "0", "--", "true"); r.code != cli.ExitNotAcquired {
				t.Errorf("run after the extension: exit status %d, want %d", r.code, cli.ExitNotAcquired)
			}
			if r := e.runIn("", []string{"DLOCK_HOLD=" + id}, "release"); r.code != 0 || !strings.Contains(r.stdout, `released "phone"`) {
				t.Errorf("release: exit status %d, stdout %q", r.code, r.stdout)
			}
			// The key is free, and the hold ID spent.
			if r := e.run("run", "--key", "phone", "--wait", "0", "--", "true"); r.code != 0 {
				t.Errorf("run after the release: exit status %d, want 0", r.code)
			}
			if r := e.runIn(id, nil, "release", "--hold", "-"); r.code != cli.ExitLost || strings.Contains(r.stderr, id[5:]) {
				t.Errorf("release of a spent hold: exit status %d, stderr %q; want %d, without the hold ID", r.code, r.stderr, cli.ExitLost)
			}
		})
	}
}

// holdExample matches docs/cli.md's shell example of dlock hold.
var holdExample = regexp.MustCompile("(?s)<!-- hold example[^>]*-->\n```sh\n(.*?)```")

// TestReadmeHoldExample runs docs/cli.md's example of dlock hold, extend
// and release on SQLite.
func TestReadmeHoldExample(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	m := holdExample.FindSubmatch(b)
	if m == nil {
		t.Fatal("docs/cli.md has no hold example")
	}
	url, _ := sqliteStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-e", "-c", string(m[1]))
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(dlockBin)+":"+os.Getenv("PATH"), "DLOCK_URL="+url, "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	t.Logf("docs/cli.md example:\n%s", out)
	if err != nil {
		t.Fatalf("docs/cli.md example: %v", err)
	}
	want := "extended \"phone:5550100\" (token 1): held for 10m0s\nreleased \"phone:5550100\" (token 1)\n"
	if string(out) != want {
		t.Errorf("docs/cli.md example printed %q, want %q", out, want)
	}
}
