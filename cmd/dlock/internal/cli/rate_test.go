//go:build unix

package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock/cmd/dlock/internal/cli"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// rateChildEnv holds the JSON arguments of a child process that runs the
// dlock command (see TestRateChildProcess).
const rateChildEnv = "DLOCK_RATE_TEST_CHILD"

// TestRateChildProcess is the dlock command of TestRateAcrossProcesses'
// child processes, which run this test binary: it prints "ready", waits
// for a line on stdin, so that the children start together, and runs
// cli.Main as cmd/dlock does. It does nothing in the test run itself.
func TestRateChildProcess(t *testing.T) {
	spec := os.Getenv(rateChildEnv)
	if spec == "" {
		t.Skip("runs as a child process of TestRateAcrossProcesses")
	}
	var args []string
	if err := json.Unmarshal([]byte(spec), &args); err != nil {
		os.Exit(100)
	}
	os.Stdout.WriteString("ready\n")
	if _, err := io.ReadFull(os.Stdin, make([]byte, 1)); err != nil {
		os.Exit(101)
	}
	os.Exit(cli.Main(args, strings.NewReader(""), os.Stdout, os.Stderr))
}

// child is a started child process running the dlock command.
type child struct {
	cmd            *exec.Cmd
	start          io.WriteCloser // its stdin: a byte starts it
	stdout, stderr bytes.Buffer
	ready          chan struct{}
}

// startChild starts `dlock args...` as a process of its own, waiting on its
// stdin, and returns once it is ready.
func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	spec, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	c := &child{ready: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^TestRateChildProcess$", "-test.count=1")
	c.cmd.Env = append(os.Environ(), rateChildEnv+"="+string(spec))
	if c.start, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stderr = &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.cmd.Process.Kill(); c.cmd.Wait() })
	line := make([]byte, len("ready\n"))
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
		t.Fatalf("child: %q, %v; stderr: %s", line, err, c.stderr.String())
	}
	go func() { // the rest of its output, until it exits
		io.Copy(&c.stdout, out)
		close(c.ready)
	}()
	return c
}

// run lets the child go and returns its exit status.
func (c *child) run(t *testing.T) int {
	t.Helper()
	if _, err := c.start.Write([]byte{'\n'}); err != nil {
		t.Fatal(err)
	}
	c.start.Close()
	<-c.ready
	err := c.cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatal(err)
	return -1
}

// rateStores are the stores dlock processes share in TestRateAcrossProcesses.
var rateStores = []struct {
	name string
	url  func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string { return cli.SQLiteURL(filepath.Join(t.TempDir(), "locks.db")) }},
	{"redis", func(t *testing.T) string {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		srv, err := testsrv.StartRedis(ctx)
		if errors.Is(err, testsrv.ErrMissing) {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Stop() })
		return srv.URL
	}},
}

// Eight dlock processes started together with --rate 3/3s --wait 0: three
// run their command, the others exit 75 without running it. A ninth, which
// waits, runs once a slot has freed, and not before the window has passed.
func TestRateAcrossProcesses(t *testing.T) {
	const procs, n, window = 8, 3, 3 * time.Second
	for _, s := range rateStores {
		t.Run(s.name, func(t *testing.T) {
			url := s.url(t)
			run := func(extra ...string) *child {
				args := append([]string{"run", "--url", url, "--key", "api", "--rate", "3/3s"}, extra...)
				return startChild(t, append(args, "--", "sh", "-c", `echo "admitted $DLOCK_KEY"`)...)
			}
			children := make([]*child, procs)
			for i := range children {
				children[i] = run("--wait", "0")
			}
			waiter := run()
			before := time.Now() // before any slot was granted
			codes := make([]int, procs)
			var wg sync.WaitGroup
			for i, c := range children {
				wg.Go(func() { codes[i] = c.run(t) })
			}
			wg.Wait()
			admitted := 0
			for i, c := range children {
				switch codes[i] {
				case 0:
					admitted++
					if c.stdout.String() != "admitted api\n" {
						t.Errorf("admitted run %d printed %q", i, c.stdout.String())
					}
				case cli.ExitNotAcquired:
					if c.stdout.Len() != 0 || !strings.Contains(c.stderr.String(), `rate limit "api" of 3/3s reached`) {
						t.Errorf("refused run %d: stdout %q, stderr %q; want no output and a message", i, c.stdout.String(), c.stderr.String())
					}
				default:
					t.Errorf("run %d: exit status %d, stderr %s", i, codes[i], c.stderr.String())
				}
			}
			if admitted != n {
				t.Fatalf("%d of %d runs admitted, want %d", admitted, procs, n)
			}
			// The dlock processes have exited; their slots have not.
			if code := waiter.run(t); code != 0 || waiter.stdout.String() != "admitted api\n" {
				t.Fatalf("waiting run: exit status %d, stdout %q, stderr %s", code, waiter.stdout.String(), waiter.stderr.String())
			}
			if d := time.Since(before); d < window {
				t.Errorf("a slot freed %v after the runs started, before the window of %v", d, window)
			}
		})
	}
}

// A run that waits with --wait D gives up with status 75 when no slot frees
// in time.
func TestRateWaitRunsOut(t *testing.T) {
	url := memURL(t)
	for range 2 {
		if r := runMain(t, "run", "--url", url, "--key", "api", "--rate", "2/1h", "--wait", "0", "--", "true"); r.code != 0 {
			t.Fatalf("exit status %d", r.code)
		}
	}
	marker := filepath.Join(t.TempDir(), "ran")
	r := runMain(t, "run", "--url", url, "--key", "api", "--rate", "2/1h", "--wait", "50ms", "--", "touch", marker)
	if r.code != cli.ExitNotAcquired || !strings.Contains(r.stderr, `rate limit "api" of 2/1h: no slot freed after waiting 50ms`) {
		t.Errorf("exit status %d, stderr %q; want %d and a message", r.code, r.stderr, cli.ExitNotAcquired)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran: %v", err)
	}
	// Another N for the key is refused while its slots last.
	r = runMain(t, "run", "--url", url, "--key", "api", "--rate", "3/1h", "--wait", "0", "--", "touch", marker)
	if r.code != cli.ExitNotAcquired || !strings.Contains(r.stderr, "another mode or with another N") {
		t.Errorf("another N: exit status %d, stderr %q; want %d", r.code, r.stderr, cli.ExitNotAcquired)
	}
}

func TestRateUsageErrors(t *testing.T) {
	t.Setenv("DLOCK_URL", "mem://rate-usage")
	for _, tt := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"--rate", "3"}, `invalid --rate "3": want N/DURATION`},
		{[]string{"--rate", ""}, `invalid --rate "": want N/DURATION`},
		{[]string{"--rate", "0/1s"}, `invalid --rate "0/1s": N 0 must be at least 1`},
		{[]string{"--rate", "3/0s"}, `invalid --rate "3/0s": DURATION 0s must be positive`},
		{[]string{"--rate", "3/-1s"}, `invalid --rate "3/-1s": DURATION -1s must be positive`},
		{[]string{"--rate", "x/1s"}, `invalid --rate "x/1s": N "x" is not a number`},
		{[]string{"--rate", "+3/1s"}, `invalid --rate "+3/1s": N "+3" is not a number`},
		{[]string{"--rate", "/1s"}, `invalid --rate "/1s": N "" is not a number`},
		{[]string{"--rate", "99999999999999999999/1s"}, `invalid --rate "99999999999999999999/1s": N "99999999999999999999" is out of range`},
		{[]string{"--rate", "3/1"}, `invalid --rate "3/1": DURATION "1" is not a duration`},
		{[]string{"--rate", "3/1s/2"}, `invalid --rate "3/1s/2": DURATION "1s/2" is not a duration`},
		{[]string{"--rate", "3/100000h"}, `invalid --rate "3/100000h": window 100000h0m0s is above this store's longest window of 168h0m0s`},
		{[]string{"--rate", "3/1us"}, `invalid --rate "3/1us": window 1µs is below`},
		{[]string{"--rate", "3/1s", "--limit", "3"}, "--rate excludes --limit"},
		{[]string{"--rate", "3/1s", "--shared"}, "--rate excludes"},
		{[]string{"--rate", "3/1s", "--ttl", "1m"}, "--rate excludes"},
		{[]string{"--rate", "3/1s", "--hold-at-least", "1m"}, "--rate excludes"},
		{[]string{"--rate", "3/1s", "--max-hold", "1m"}, "--rate excludes"},
	} {
		args := append(append([]string{"run", "--key", "k"}, tt.args...), "--", "true")
		r := runMain(t, args...)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("%q: exit status %d, stderr %q; want %d and %q", tt.args, r.code, r.stderr, cli.ExitUsage, tt.want)
		}
	}
}

// --rate needs a store whose leases outlive dlock, and semaphores for N > 1.
func TestRateUnsupportedStores(t *testing.T) {
	start := func(t *testing.T, startSrv func(context.Context) (*testsrv.Server, error)) string {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		srv, err := startSrv(ctx)
		if errors.Is(err, testsrv.ErrMissing) {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Stop() })
		return srv.URL
	}
	t.Run("etcd", func(t *testing.T) {
		url := start(t, testsrv.StartEtcd)
		r := runMain(t, "run", "--url", url, "--key", "api", "--rate", "3/1m", "--wait", "0", "--", "true")
		if r.code != cli.ExitUnavailable || !strings.Contains(r.stderr, "does not support it: its holds end with dlock's session") {
			t.Errorf("exit status %d, stderr %q; want %d and a message", r.code, r.stderr, cli.ExitUnavailable)
		}
	})
	t.Run("memcached", func(t *testing.T) {
		url := start(t, testsrv.StartMemcached) + "?prefix=" + testsrv.DatabaseName(t.Name()) + ":"
		r := runMain(t, "run", "--url", url, "--key", "api", "--rate", "2/1m", "--wait", "0", "--", "true")
		if r.code != cli.ExitUnavailable || !strings.Contains(r.stderr, "admits 1/DURATION only") {
			t.Errorf("--rate 2/1m: exit status %d, stderr %q; want %d and a message", r.code, r.stderr, cli.ExitUnavailable)
		}
		for i, want := range []int{0, cli.ExitNotAcquired} {
			if r := runMain(t, "run", "--url", url, "--key", "api", "--rate", "1/1m", "--wait", "0", "--", "true"); r.code != want {
				t.Errorf("--rate 1/1m, run %d: exit status %d, want %d", i+1, r.code, want)
			}
		}
	})
}
