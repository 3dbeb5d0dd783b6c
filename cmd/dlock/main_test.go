//go:build unix

package main_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/cmd/dlock/internal/cli"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// dlockBin is the dlock binary under test, built by TestMain.
var dlockBin string

// processTimeout bounds every dlock process a test starts, so that a bug
// fails the test instead of hanging it.
const processTimeout = 2 * time.Minute

func TestMain(m *testing.M) {
	if marker := os.Getenv(childEnv); marker != "" {
		os.Exit(signalledChild(marker))
	}
	goleak.VerifyTestMain(mainRunner{m})
}

// childEnv makes the test binary act as a command run by dlock: see
// signalledChild.
const childEnv = "DLOCK_TEST_SIGNALLED_CHILD"

// signalledChild is a command for dlock that prints "started TOKEN PGID" once
// it catches SIGTERM and SIGINT, waits for one of them, writes its name to
// the file marker and exits 7. A shell script cannot do this reliably: a
// signal that arrives while it forks a command can be lost.
func signalledChild(marker string) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	fmt.Printf("started %s %d\n", os.Getenv("DLOCK_TOKEN"), syscall.Getpgrp())
	sig := <-sigs
	if err := os.WriteFile(marker, []byte(sig.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 7
}

// signalledCommand returns the arguments of a signalledChild command and the
// marker file it writes when it is signalled.
func (e *env) signalledCommand() (marker string, args []string) {
	self, err := os.Executable()
	if err != nil {
		e.t.Fatal(err)
	}
	marker = filepath.Join(e.t.TempDir(), "signalled")
	e.env = append(e.env, childEnv+"="+marker)
	return marker, []string{self}
}

// signalled returns the signal the signalledChild got, or "" if none.
func signalled(t *testing.T, marker string) string {
	b, err := os.ReadFile(marker)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

type mainRunner struct{ m *testing.M }

func (r mainRunner) Run() int {
	dir, err := os.MkdirTemp("", "dlock-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	dlockBin = filepath.Join(dir, "dlock")
	args := []string{"build", "-o", dlockBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building dlock: %v\n", err)
		return 1
	}
	return testsrv.Run(r.m, testsrv.Postgres, testsrv.MariaDB, testsrv.Redis, testsrv.RedisQuorum, testsrv.Memcached, testsrv.Etcd, testsrv.ZooKeeper, testsrv.NATS, testsrv.NATSCluster)
}

// store is one kind of lock store the tests run against.
type store struct {
	name string
	// setup returns the --url to pass (empty: none) and the environment to
	// add, for a store private to the test.
	setup func(t *testing.T) (url string, env []string)
	// shortTTL is the --ttl of tests that want a short lease: 1s, or the
	// backend's minimum if that is longer.
	shortTTL string
}

func sqliteStore(t *testing.T) (string, []string) {
	return cli.SQLiteURL(filepath.Join(t.TempDir(), "locks.db")), nil
}

// defaultStore exercises the embedded default: no --url, no DLOCK_URL, and
// XDG_STATE_HOME pointed at a temporary directory.
func defaultStore(t *testing.T) (string, []string) {
	return "", []string{"XDG_STATE_HOME=" + t.TempDir()}
}

func serverStore(name string) func(t *testing.T) (string, []string) {
	return func(t *testing.T) (string, []string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		url, _, err := testsrv.Get(t, name).NewDatabase(ctx, t.Name())
		if err != nil {
			t.Fatal(err)
		}
		return url, nil
	}
}

// keyValueStore is a Redis or memcached store shared by the tests: the
// server's URL with a key prefix of the test's own. With n > 0 the URL is a
// redlock:// URL over the first n servers of the server group.
func keyValueStore(name string, n int) func(t *testing.T) (string, []string) {
	return func(t *testing.T) (string, []string) {
		srv := testsrv.Get(t, name)
		url := srv.URL
		if n > 0 {
			if len(srv.Addrs) < n {
				t.Fatalf("%s has %d servers, want %d", name, len(srv.Addrs), n)
			}
			url = "redlock://" + strings.Join(srv.Addrs[:n], ",")
		}
		return url + "?prefix=" + testsrv.DatabaseName(t.Name()) + ":", nil
	}
}

// consensusStore is an etcd or ZooKeeper store shared by the tests: the
// server's URL with a key prefix of the test's own and a 2s session, so that
// a paused holder's session ends soon.
func consensusStore(name string) func(t *testing.T) (string, []string) {
	return func(t *testing.T) (string, []string) {
		return testsrv.Get(t, name).URL + "?session=2s&prefix=/" + testsrv.DatabaseName(t.Name()), nil
	}
}

// sqlStores are the SQL stores: the ones with a schema.
var sqlStores = []store{
	{name: "sqlite", setup: sqliteStore, shortTTL: "1s"},
	{name: "postgres", setup: serverStore(testsrv.Postgres), shortTTL: "1s"},
	{name: "mariadb", setup: serverStore(testsrv.MariaDB), shortTTL: "1s"},
}

// stores are the stores the cross-store tests run on.
var stores = append(slices.Clip(sqlStores),
	store{name: "redis", setup: keyValueStore(testsrv.Redis, 0), shortTTL: "1s"},
	store{name: "redlock", setup: keyValueStore(testsrv.RedisQuorum, 3), shortTTL: "1s"},
	// memcached expiry times are whole seconds: memcachedlock's MinTTL is 2s.
	store{name: "memcached", setup: keyValueStore(testsrv.Memcached, 0), shortTTL: "2s"},
	store{name: "etcd", setup: consensusStore(testsrv.Etcd), shortTTL: "1s"},
	store{name: "zookeeper", setup: consensusStore(testsrv.ZooKeeper), shortTTL: "1s"},
	// NATS message TTLs are whole seconds, from one.
	store{name: "nats", setup: natsStore(testsrv.NATS, ""), shortTTL: "1s"},
	store{name: "nats-cluster", setup: natsStore(testsrv.NATSCluster, "?replicas=3"), shortTTL: "1s"},
)

// natsStore is a NATS server or cluster shared by the tests, with a bucket
// of the test's own, made with the URL's query.
func natsStore(name, query string) func(t *testing.T) (string, []string) {
	return func(t *testing.T) (string, []string) {
		return testsrv.Get(t, name).URL + "/" + testsrv.DatabaseName(t.Name()) + query, nil
	}
}

// env is how a test runs dlock: against one store, with extra environment.
type env struct {
	t   *testing.T
	url string
	env []string
}

func newEnv(t *testing.T, setup func(t *testing.T) (string, []string)) *env {
	url, extra := setup(t)
	return &env{t: t, url: url, env: extra}
}

// command returns a dlock command; args[0] is the subcommand, and --url is
// inserted after it when the store has a URL.
func (e *env) command(ctx context.Context, args ...string) *exec.Cmd {
	if e.url != "" && len(args) > 0 {
		args = append([]string{args[0], "--url", e.url}, args[1:]...)
	}
	cmd := exec.CommandContext(ctx, dlockBin, args...)
	environ := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "DLOCK_") || strings.HasPrefix(kv, "XDG_STATE_HOME=")
	})
	cmd.Env = append(environ, e.env...)
	if raceEnabled {
		// A race-enabled binary sleeps a second at exit unless told not
		// to; a race it detects makes it exit 66, failing the test.
		cmd.Env = append(cmd.Env, "GORACE=atexit_sleep_ms=0")
	}
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

type result struct {
	code           int
	stdout, stderr string
}

// run runs dlock to completion.
func (e *env) run(args ...string) result {
	e.t.Helper()
	return e.runIn("", nil, args...)
}

// proc is a dlock process running in the background.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  *os.File // write end of dlock's stdin
	out    *os.File // read end of dlock's stdout
	errs   *os.File // read end of dlock's stderr
	stdout *bufio.Reader
	stderr *bufio.Reader
	cancel context.CancelFunc
	pgid   int // the command's process group, once known
	done   bool
}

// start starts dlock with pipes on its standard streams (files, which dlock
// hands to its command as they are). The test reads stdout and stderr as far
// as it needs; the cleanup kills what is left.
func (e *env) start(args ...string) *proc {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	p := &proc{t: e.t, cmd: e.command(ctx, args...), cancel: cancel}
	e.t.Cleanup(p.cleanup)
	var child [3]*os.File
	for i, parent := range []**os.File{&p.stdin, &p.out, &p.errs} {
		r, w, err := os.Pipe()
		if err != nil {
			e.t.Fatal(err)
		}
		if i == 0 {
			child[i], *parent = r, w
		} else {
			child[i], *parent = w, r
		}
	}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = child[0], child[1], child[2]
	err := p.cmd.Start()
	for _, f := range child {
		f.Close()
	}
	if err != nil {
		e.t.Fatal(err)
	}
	p.stdout, p.stderr = bufio.NewReader(p.out), bufio.NewReader(p.errs)
	return p
}

// readLine reads a line from r, failing the test if none comes in time.
func (p *proc) readLine(f *os.File, r *bufio.Reader) string {
	p.t.Helper()
	f.SetReadDeadline(time.Now().Add(processTimeout))
	s, err := r.ReadString('\n')
	if err != nil {
		var stderr []byte
		if r != p.stderr {
			p.errs.SetReadDeadline(time.Now().Add(5 * time.Second))
			stderr, _ = io.ReadAll(p.stderr)
		}
		p.t.Fatalf("reading the output of dlock %q: %q, %v; stderr: %s", p.cmd.Args[1:], s, err, stderr)
	}
	return strings.TrimSuffix(s, "\n")
}

// line reads the next line the process (or its command) writes on stdout.
func (p *proc) line() string {
	p.t.Helper()
	return p.readLine(p.out, p.stdout)
}

// started reads the "started TOKEN PGID" line the test commands print and
// returns the token.
func (p *proc) started() uint64 {
	p.t.Helper()
	f := strings.Fields(p.line())
	if len(f) != 3 || f[0] != "started" {
		p.t.Fatalf("unexpected output %q, want \"started TOKEN PGID\"", f)
	}
	tok, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		p.t.Fatalf("bad token %q: %v", f[1], err)
	}
	if p.pgid, err = strconv.Atoi(f[2]); err != nil {
		p.t.Fatal(err)
	}
	return tok
}

// wait waits for dlock to exit and returns its exit status and the rest of
// its stderr.
func (p *proc) wait() (int, string) {
	p.t.Helper()
	err := p.cmd.Wait()
	p.done = true
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		p.t.Fatalf("dlock %q: %v", p.cmd.Args[1:], err)
	}
	// What is left of stderr; a command's leftover child could keep the
	// pipe open, hence the deadline.
	p.errs.SetReadDeadline(time.Now().Add(10 * time.Second))
	rest, err := io.ReadAll(p.stderr)
	if err != nil {
		p.t.Errorf("reading dlock's stderr: %v", err)
	}
	code := p.cmd.ProcessState.ExitCode()
	p.t.Logf("dlock %q: exit %d, stderr: %s", p.cmd.Args[1:], code, rest)
	return code, string(rest)
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

func (p *proc) cleanup() {
	if !p.done && p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
	if p.pgid > 0 {
		syscall.Kill(-p.pgid, syscall.SIGKILL) // whatever the command left behind
	}
	for _, f := range []*os.File{p.stdin, p.out, p.errs} {
		if f != nil {
			f.Close()
		}
	}
	p.cancel()
}

// holdScript prints "started TOKEN PGID", then waits for a line on stdin
// (or end of file) and exits 0.
const holdScript = `echo "started $DLOCK_TOKEN $$"; read x; exit 0`

func TestExitStatusPassThrough(t *testing.T) {
	e := newEnv(t, sqliteStore)
	r := e.run("run", "--key", "job", "--", "sh", "-c", `echo "$DLOCK_KEY $DLOCK_TOKEN"`)
	if r.code != 0 {
		t.Fatalf("exit status %d, want 0", r.code)
	}
	f := strings.Fields(r.stdout)
	if len(f) != 2 || f[0] != "job" {
		t.Fatalf("child printed %q, want DLOCK_KEY=job and DLOCK_TOKEN", r.stdout)
	}
	tok1, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil || tok1 == 0 {
		t.Fatalf("DLOCK_TOKEN %q: %v", f[1], err)
	}
	for _, tt := range []struct {
		script string
		want   int
	}{
		{`exit 3`, 3},
		{`exit 0`, 0},
		{`kill -KILL $$`, 128 + int(syscall.SIGKILL)},
		{`kill -TERM $$`, 128 + int(syscall.SIGTERM)},
	} {
		if r := e.run("run", "--key", "job", "sh", "-c", tt.script); r.code != tt.want || r.stderr != "" {
			t.Errorf("%s: exit status %d, stderr %q; want %d and nothing", tt.script, r.code, r.stderr, tt.want)
		}
	}
	r = e.run("run", "--key", "job", "sh", "-c", `echo "$DLOCK_TOKEN"`)
	if tok2, err := strconv.ParseUint(strings.TrimSpace(r.stdout), 10, 64); err != nil || tok2 <= tok1 {
		t.Errorf("token of a later run %q (%v), want more than %d", r.stdout, err, tok1)
	}
}

func TestNotAcquiredWhenHeld(t *testing.T) {
	e := newEnv(t, sqliteStore)
	holder := e.start("run", "--key", "busy", "--", "sh", "-c", holdScript)
	holder.started()
	marker := filepath.Join(t.TempDir(), "ran")
	for _, wait := range []string{"0", "100ms"} {
		r := e.run("run", "--key", "busy", "--wait", wait, "--", "touch", marker)
		if r.code != cli.ExitNotAcquired {
			t.Errorf("--wait %s: exit status %d, want %d", wait, r.code, cli.ExitNotAcquired)
		}
		if !strings.Contains(r.stderr, `lock "busy"`) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("--wait %s: stderr %q: want one line naming the key", wait, r.stderr)
		}
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran although the lock was held (%v)", err)
	}
	holder.stdin.Close()
	if code, _ := holder.wait(); code != 0 {
		t.Errorf("holder: exit status %d", code)
	}
	if r := e.run("run", "--key", "busy", "--wait", "0", "--", "true"); r.code != 0 {
		t.Errorf("after the holder exited: exit status %d, want 0", r.code)
	}
}

// TestNoOverlap runs twenty dlock processes on one key at once: their
// commands must never overlap, and the fencing tokens must increase in the
// order the commands ran.
func TestNoOverlap(t *testing.T) {
	all := append([]store{{name: "default", setup: defaultStore, shortTTL: "1s"}}, stores...)
	for _, s := range all {
		t.Run(s.name, func(t *testing.T) {
			e := newEnv(t, s.setup)
			dir := t.TempDir()
			// The marker directory is created atomically: if it exists,
			// another command is inside its critical section.
			const script = `
mkdir "$1/inside" 2>/dev/null || echo "overlap at token $DLOCK_TOKEN" >> "$1/failures"
echo "$DLOCK_TOKEN" >> "$1/log"
rmdir "$1/inside" 2>/dev/null || echo "marker gone at token $DLOCK_TOKEN" >> "$1/failures"
`
			const n = 20
			var wg sync.WaitGroup
			results := make([]result, n)
			for i := range n {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
					defer cancel()
					cmd := e.command(ctx, "run", "--key", "shared", "--ttl", "10s", "--", "sh", "-c", script, "sh", dir)
					var stderr bytes.Buffer
					cmd.Stderr = &stderr
					err := cmd.Run()
					results[i] = result{code: -1, stderr: fmt.Sprint(stderr.String(), err)}
					if cmd.ProcessState != nil {
						results[i].code = cmd.ProcessState.ExitCode()
					}
				})
			}
			wg.Wait()
			for i, r := range results {
				if r.code != 0 {
					t.Errorf("process %d: exit status %d, stderr %q", i, r.code, r.stderr)
				}
			}
			if b, err := os.ReadFile(filepath.Join(dir, "failures")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("commands overlapped:\n%s", b)
			}
			b, err := os.ReadFile(filepath.Join(dir, "log"))
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Fields(string(b))
			if len(lines) != n {
				t.Errorf("%d commands ran, want %d", len(lines), n)
			}
			var last uint64
			for _, l := range lines {
				tok, err := strconv.ParseUint(l, 10, 64)
				if err != nil || tok <= last {
					t.Errorf("tokens in the order the commands ran: %v; want strictly increasing", lines)
					break
				}
				last = tok
			}
			if s.name == "default" {
				xdg := strings.TrimPrefix(e.env[0], "XDG_STATE_HOME=")
				fi, err := os.Stat(filepath.Join(xdg, "dlock"))
				if err != nil || fi.Mode().Perm() != 0o700 {
					t.Errorf("default store directory: %v, %v; want mode 0700", fi, err)
				}
				if _, err := os.Stat(filepath.Join(xdg, "dlock", "dlock.db")); err != nil {
					t.Errorf("default store file: %v", err)
				}
			}
		})
	}
}

// TestLostWhilePaused pauses a holder (SIGSTOP) past its lease: another
// process takes the lock, and when the first resumes it must see its lock as
// lost, terminate its command and exit 76.
func TestLostWhilePaused(t *testing.T) {
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			e := newEnv(t, s.setup)
			marker, child := e.signalledCommand()
			first := e.start(append([]string{"run", "--key", "paused", "--ttl", s.shortTTL, "--kill-after", "1m", "--"}, child...)...)
			tok1 := first.started()
			first.signal(syscall.SIGSTOP)

			// The second waits until the first's lease has run out.
			r := e.run("run", "--key", "paused", "--", "sh", "-c", `echo "$DLOCK_TOKEN"`)
			if r.code != 0 {
				t.Fatalf("second: exit status %d", r.code)
			}
			tok2, err := strconv.ParseUint(strings.TrimSpace(r.stdout), 10, 64)
			if err != nil {
				t.Fatalf("second's token %q: %v", r.stdout, err)
			}

			first.signal(syscall.SIGCONT)
			code, stderr := first.wait()
			if code != cli.ExitLost {
				t.Errorf("first: exit status %d, want %d", code, cli.ExitLost)
			}
			if !strings.Contains(stderr, `lock "paused" was lost`) {
				t.Errorf("first: stderr %q does not report the loss", stderr)
			}
			if got := signalled(t, marker); got != "terminated" {
				t.Errorf("first's command got %q, want SIGTERM (terminated)", got)
			}
			if tok2 <= tok1 {
				t.Errorf("second's token %d is not greater than first's %d", tok2, tok1)
			}
		})
	}
}

func TestSignalForwarding(t *testing.T) {
	e := newEnv(t, sqliteStore)
	marker, child := e.signalledCommand()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		os.Remove(marker)
		p := e.start(append([]string{"run", "--key", "sig", "--"}, child...)...)
		p.started()
		p.signal(sig)
		if code, _ := p.wait(); code != 7 {
			t.Errorf("after %v: exit status %d, want the command's 7", sig, code)
		}
		if got := signalled(t, marker); got != sig.String() {
			t.Errorf("the command got %q, want %q", got, sig)
		}
		if r := e.run("run", "--key", "sig", "--wait", "0", "--", "true"); r.code != 0 {
			t.Errorf("the lock was not released: exit status %d", r.code)
		}
	}

	// A command killed by the forwarded signal: dlock exits 128+N. (Should
	// the signal reach sh before it execs sleep, sh dies of it all the same.)
	p := e.start("run", "--key", "sig", "--", "sh", "-c", `echo "started $DLOCK_TOKEN $$"; exec sleep 1000`)
	p.started()
	p.signal(syscall.SIGINT)
	if code, _ := p.wait(); code != 128+int(syscall.SIGINT) {
		t.Errorf("after SIGINT: exit status %d, want %d", code, 128+int(syscall.SIGINT))
	}
	if r := e.run("run", "--key", "sig", "--wait", "0", "--", "true"); r.code != 0 {
		t.Errorf("the lock was not released: exit status %d", r.code)
	}
}

// TestInterruptWhileWaiting interrupts a dlock waiting for a held lock: it
// must not run its command, must exit 130 and must leave nothing behind.
func TestInterruptWhileWaiting(t *testing.T) {
	e := newEnv(t, sqliteStore)
	holder := e.start("run", "--key", "w", "--", "sh", "-c", holdScript)
	holder.started()
	marker := filepath.Join(t.TempDir(), "ran")
	waiter := e.start("run", "--verbose", "--key", "w", "--", "touch", marker)
	for !strings.Contains(waiter.readLine(waiter.errs, waiter.stderr), "waiting for the lock") {
	}
	waiter.signal(syscall.SIGINT)
	if code, _ := waiter.wait(); code != 128+int(syscall.SIGINT) {
		t.Errorf("waiter: exit status %d, want %d", code, 128+int(syscall.SIGINT))
	}
	holder.stdin.Close()
	if code, _ := holder.wait(); code != 0 {
		t.Errorf("holder: exit status %d", code)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the interrupted waiter ran its command (%v)", err)
	}
	r := e.run("ls", "--json")
	if r.code != 0 || r.stdout != "" {
		t.Errorf("ls after both ended: exit status %d, output %q; want nothing held", r.code, r.stdout)
	}
}

func TestHoldAtLeast(t *testing.T) {
	e := newEnv(t, sqliteStore)
	if r := e.run("run", "--key", "cron", "--hold-at-least", "30s", "--", "true"); r.code != 0 {
		t.Fatalf("exit status %d, want 0", r.code)
	}
	if r := e.run("run", "--key", "cron", "--wait", "0", "--", "true"); r.code != cli.ExitNotAcquired {
		t.Errorf("run after the held run: exit status %d, want %d", r.code, cli.ExitNotAcquired)
	}
	r := e.run("release", "cron")
	if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "--force") {
		t.Errorf("release without --force: exit status %d, stderr %q", r.code, r.stderr)
	}
	r = e.run("release", "--force", "cron")
	if r.code != 0 || !strings.Contains(r.stdout, "1 hold removed") {
		t.Errorf("release --force: exit status %d, stdout %q", r.code, r.stdout)
	}
	if r := e.run("run", "--key", "cron", "--wait", "0", "--", "true"); r.code != 0 {
		t.Errorf("run after the forced release: exit status %d, want 0", r.code)
	}
}

func TestBadFlags(t *testing.T) {
	e := newEnv(t, sqliteStore)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--", "true"}, "--key is required"},
		{[]string{"run", "--key", "", "--", "true"}, `invalid --key ""`},
		{[]string{"run", "--key", "k", "--ttl", "0", "--", "true"}, "invalid --ttl 0s"},
		{[]string{"run", "--key", "k", "--wait", "-1s", "--", "true"}, "invalid --wait -1s"},
		{[]string{"run", "--key", "k", "--ttl", "soon", "--", "true"}, `"soon"`},
		{[]string{"run", "--key", "k"}, "no command to run"},
		{[]string{"run", "--key", strings.Repeat("x", 300), "--", "true"}, "invalid --key \"xxxxxxxx"},
		{[]string{"run", "--key", "k", "--ttl", "1ns", "--", "true"}, "invalid --ttl 1ns: is below"},
		{[]string{"run", "--url", "sqlite://host/x.db", "--key", "k", "--", "true"}, "has a host"},
	} {
		r := e.run(tt.args...)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("dlock %q: exit status %d, stderr %q; want %d and a message with %q", tt.args, r.code, r.stderr, cli.ExitUsage, tt.want)
		}
	}
}

// TestCompletion runs the shell completion of the dlock binary, as a shell
// does, on a line that already has --key: the flags are still offered.
func TestCompletion(t *testing.T) {
	e := newEnv(t, defaultStore)
	r := e.run("__complete", "run", "--key", "k", "--wa")
	if r.code != 0 || !strings.Contains(r.stdout, "--wait\t") {
		t.Errorf("dlock __complete run --key k --wa: exit status %d, stdout %q, stderr %q; want --wait offered", r.code, r.stdout, r.stderr)
	}
}

// TestDurationAboveMaximum runs dlock on the default store with a lease
// longer than the store accepts (dlock.DefaultMaxTTL): a usage error naming
// the value and the maximum, and the command does not run.
func TestDurationAboveMaximum(t *testing.T) {
	e := newEnv(t, defaultStore)
	marker := filepath.Join(t.TempDir(), "ran")
	max := dlock.DefaultMaxTTL.String()
	for _, tt := range []struct {
		flag, want string
	}{
		{"--ttl", "invalid --ttl 100000h0m0s"},
		{"--hold-at-least", "invalid --hold-at-least 100000h0m0s"},
	} {
		r := e.run("run", "--key", "k", tt.flag, "100000h", "--", "touch", marker)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, tt.want) || !strings.Contains(r.stderr, max) {
			t.Errorf("%s 100000h: exit status %d, stderr %q; want %d and a message with %q and the maximum %s",
				tt.flag, r.code, r.stderr, cli.ExitUsage, tt.want, max)
		}
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran (%v)", err)
	}
	if r := e.run("run", "--key", "k", "--ttl", max, "--wait", "0", "--", "true"); r.code != 0 {
		t.Errorf("--ttl %s (the maximum): exit status %d, want 0", max, r.code)
	}
}

// TestSecretsNotShown runs dlock with -v on store URLs that carry a secret
// (in a query parameter, in the userinfo, in text that is not a URL) and
// that cannot be used: the secret must never appear on stdout or stderr,
// whether the URL comes from --url or $DLOCK_URL, and dlock exits with the
// status of the failure.
func TestSecretsNotShown(t *testing.T) {
	const secret = "s3cret"
	for i, tt := range []struct {
		url  string
		want int
	}{
		{"postgres://127.0.0.1:1/x?password=" + secret + "&sslmode=disable", cli.ExitUnavailable},
		{"postgres://u:" + secret + "@127.0.0.1:1/x?connect_timeout=5", cli.ExitUnavailable},
		{"redis+sentinel://127.0.0.1:1/m?sentinel_password=" + secret, cli.ExitUnavailable},
		{"mysql://u:" + secret + "@127.0.0.1:1/x", cli.ExitUnavailable},
		{"postgres://u:" + secret + "@[::1/x", cli.ExitUsage},                     // does not parse
		{"host=127.0.0.1 port=1 password=" + secret + " dbname=x", cli.ExitUsage}, // a DSN, not a URL
		{"nosuch://u:" + secret + "@127.0.0.1:1/x?password=" + secret, cli.ExitUsage},
	} {
		for j, args := range [][]string{
			{"-v", "run", "--key", "k", "--", "true"},
			{"-v", "ls"},
			{"-v", "release", "--force", "k"},
			{"-v", "schema"},
			{"-v", "run", "--key", "k"}, // and a usage error of its own
		} {
			// Both sources of the URL for every subcommand, on
			// different URLs (each run can take seconds).
			for _, viaEnv := range []bool{(i+j)%2 == 0} {
				e := newEnv(t, defaultStore)
				a := args
				if viaEnv {
					e.env = append(e.env, "DLOCK_URL="+tt.url)
				} else {
					a = append([]string{args[0], args[1], "--url", tt.url}, args[2:]...)
				}
				want := tt.want
				if len(args) == 4 && args[1] == "run" {
					want = cli.ExitUsage // no command: refused before the store is opened
				}
				r := e.run(a...)
				if r.code != want {
					t.Errorf("dlock %q (DLOCK_URL: %v): exit status %d, want %d", args, viaEnv, r.code, want)
				}
				if strings.Contains(r.stdout+r.stderr, secret) {
					t.Errorf("dlock %q with %s (DLOCK_URL: %v) shows the secret:\nstdout: %s\nstderr: %s", args, tt.url, viaEnv, r.stdout, r.stderr)
				}
			}
		}
	}
}

func TestSchema(t *testing.T) {
	for _, s := range sqlStores {
		t.Run(s.name, func(t *testing.T) {
			e := newEnv(t, s.setup)
			for range 2 { // creating it is idempotent
				if r := e.run("schema"); r.code != 0 || r.stdout != "schema created\n" {
					t.Errorf("schema: exit status %d, stdout %q", r.code, r.stdout)
				}
			}
			if r := e.run("run", "--key", "k", "--", "true"); r.code != 0 {
				t.Errorf("run after schema: exit status %d", r.code)
			}
		})
	}
	for _, s := range stores[len(sqlStores):] {
		t.Run(s.name, func(t *testing.T) {
			e := newEnv(t, s.setup)
			r := e.run("schema")
			if r.code != 0 || !strings.Contains(r.stdout, "nothing to create") {
				t.Errorf("schema: exit status %d, stdout %q; want 0 and nothing to create", r.code, r.stdout)
			}
		})
	}
}

// TestLs lists a holder on every store that can list holders (all but
// memcached, which cannot enumerate its keys).
func TestLs(t *testing.T) {
	for _, s := range stores {
		if s.name == "memcached" {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			e := newEnv(t, s.setup)
			holder := e.start("run", "--key", "listed/one", "--", "sh", "-c", holdScript)
			tok := holder.started()
			r := e.run("ls")
			if r.code != 0 {
				t.Fatalf("ls: exit status %d", r.code)
			}
			found := false
			for _, l := range strings.Split(r.stdout, "\n") {
				f := strings.Fields(l)
				if len(f) >= 2 && f[0] == "listed/one" && f[1] == strconv.FormatUint(tok, 10) {
					found = true
				}
			}
			if !found {
				t.Errorf("ls output %q does not list listed/one with token %d", r.stdout, tok)
			}
			r = e.run("ls", "--json", "listed/")
			if want := fmt.Sprintf(`"key":"listed/one","token":%d,`, tok); r.code != 0 || !strings.Contains(r.stdout, want) {
				t.Errorf("ls --json: exit status %d, output %q; want %s", r.code, r.stdout, want)
			}
			if r := e.run("ls", "nothing/"); r.code != 0 || strings.Count(r.stdout, "\n") != 1 {
				t.Errorf("ls nothing/: exit status %d, output %q; want only the header", r.code, r.stdout)
			}
			holder.stdin.Close()
			if code, _ := holder.wait(); code != 0 {
				t.Errorf("holder: exit status %d", code)
			}
		})
	}
}

// TestWaitingNotice checks that a dlock run waiting on a terminal says, once,
// what it waits for and who holds it. The terminal is script(1)'s.
func TestWaitingNotice(t *testing.T) {
	scriptBin, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script(1) is not installed")
	}
	e := newEnv(t, sqliteStore)
	holder := e.start("run", "--key", "busy", "--", "sh", "-c", holdScript)
	holder.started()

	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	defer cancel()
	waiter := e.command(ctx, "run", "--key", "busy", "--", "echo", "ran")
	cmd := exec.CommandContext(ctx, scriptBin, "-qec", strings.Join(waiter.Args, " "), "/dev/null")
	cmd.Env = waiter.Env
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(out)
	line, err := rd.ReadString('\n')
	if err != nil || !strings.Contains(line, `waiting for "busy", held by`) || !strings.Contains(line, "token") {
		t.Errorf("first line on the terminal %q (%v); want the waiting notice naming the holder", line, err)
	}
	holder.stdin.Close() // the holder releases; the waiter runs
	rest, _ := io.ReadAll(rd)
	if err := cmd.Wait(); err != nil {
		t.Errorf("waiter: %v", err)
	}
	if !strings.Contains(string(rest), "ran") || strings.Contains(string(rest), "waiting for") {
		t.Errorf("after the notice: %q; want the command's output and no second notice", rest)
	}
	if code, _ := holder.wait(); code != 0 {
		t.Errorf("holder: exit status %d", code)
	}
}
