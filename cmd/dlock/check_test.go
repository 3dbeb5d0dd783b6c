//go:build unix

package main_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/cmd/dlock/internal/check"
	"github.com/dlockhq/dlock/cmd/dlock/internal/cli"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// checkArgs are the arguments of a brief check with every fault: holds of
// 100ms, so that a fault strikes inside one however slow the host.
func checkArgs(ttl string) []string {
	return []string{"check", "--json", "--workers", "3", "--duration", "2s", "--ttl", ttl, "--hold", "100ms"}
}

// parseReport parses the JSON report of dlock check.
func parseReport(t *testing.T, out string) *check.Report {
	t.Helper()
	var rep check.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("the report is not JSON: %v\n%s", err, out)
	}
	return &rep
}

func TestCheckEveryStore(t *testing.T) {
	// The embedded default stands for SQLite.
	all := append([]store{{name: "default", setup: defaultStore, shortTTL: "1s"}}, stores...)
	all = slices.DeleteFunc(all, func(s store) bool { return s.name == "sqlite" })
	for _, s := range all {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, s.setup)
			marker := e.markWorkers()
			r := e.run(checkArgs(s.shortTTL)...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("exit status %d, stderr %q; want 0 and nothing (no progress line when stderr is not a terminal)", r.code, r.stderr)
			}
			rep := parseReport(t, r.stdout)
			checkSaneReport(t, rep)
			if s.name == "default" {
				if len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0], check.FaultCut) {
					t.Errorf("skipped faults %q, want cut and latency named", rep.Skipped)
				}
			} else {
				// A store named by host:port: the proxy faults ran.
				if f := fault(rep, check.FaultCut); f == nil || f.Token == 0 {
					t.Errorf("cut fault %+v, want one that struck a holder", f)
				}
				if f := fault(rep, check.FaultLatency); f == nil {
					t.Errorf("no latency fault")
				}
			}
			noWorkersLeft(t, marker)
			url := e.url
			if url == "" {
				url = cli.SQLiteURL(filepath.Join(strings.TrimPrefix(e.env[0], "XDG_STATE_HOME="), "dlock", "dlock.db"))
			}
			noHoldsLeft(t, url)
			noResourceLeft(t, s.name, url)
		})
	}
}

// checkSaneReport checks the report of a run on a store that keeps its
// promises.
func checkSaneReport(t *testing.T, rep *check.Report) {
	t.Helper()
	if !rep.OK {
		t.Errorf("report not OK: %+v", rep.Checks)
	}
	for _, c := range rep.Checks {
		if c.Promised && !c.OK {
			t.Errorf("check %q failed: %s", c.Name, c.Detail)
		}
	}
	if rep.Acquisitions < 3 || rep.Acknowledged < 1 || rep.FencedAccepted < 1 {
		t.Errorf("%d acquisitions, %d increments, %d fenced writes: the workload hardly ran", rep.Acquisitions, rep.Acknowledged, rep.FencedAccepted)
	}
	// Tokens strictly increase across holders: at least one per hold.
	if rep.HighestToken < uint64(rep.Acquisitions) {
		t.Errorf("highest token %d below the %d acquisitions", rep.HighestToken, rep.Acquisitions)
	}
	// The counter cannot gain increments nobody made, and the register
	// holds an accepted token.
	if rep.Final < 0 || rep.Final > rep.Acknowledged+rep.Unknown || rep.LostUpdates != max(0, rep.Acknowledged-rep.Final) {
		t.Errorf("counter %d after %d acknowledged and %d unknown increments, %d lost", rep.Final, rep.Acknowledged, rep.Unknown, rep.LostUpdates)
	}
	if rep.Register == 0 || rep.Register > rep.HighestToken {
		t.Errorf("register %d, highest token %d", rep.Register, rep.HighestToken)
	}
	if rep.Violations != 0 || rep.StaleAccepted != 0 || rep.TokenRegressions != 0 {
		t.Errorf("%d overlaps while valid, %d stale writes accepted, %d tokens went back", rep.Violations, rep.StaleAccepted, rep.TokenRegressions)
	}
	if rep.LostUpdates > 0 && rep.Overlaps == 0 && rep.Unknown == 0 {
		t.Errorf("%d lost updates with no overlapping hold and no write of unknown outcome", rep.LostUpdates)
	}
	for _, kind := range []string{check.FaultPause, check.FaultKill} {
		f := fault(rep, kind)
		if f == nil || f.Token == 0 {
			t.Errorf("%s fault %+v, want one that struck a holder", kind, f)
			continue
		}
		if kind == check.FaultKill && f.TakenOver <= 0 {
			t.Errorf("kill fault %+v: no takeover", f)
		}
	}
}

func fault(rep *check.Report, kind string) *check.Fault {
	for i := range rep.Faults {
		if rep.Faults[i].Kind == kind {
			return &rep.Faults[i]
		}
	}
	return nil
}

// markWorkers adds a variable to the environment of the dlock processes
// the test starts, which their workers inherit, and returns it.
func (e *env) markWorkers() string {
	marker := "DLOCK_CHECK_TEST=" + e.t.Name()
	e.env = append(e.env, marker)
	return marker
}

// noWorkersLeft checks that no worker process of dlock check started with
// the environment variable marker is running.
func noWorkersLeft(t *testing.T, marker string) {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(d + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(bytes.TrimRight(cmdline, "\x00")), "\x00")
		if len(args) != 2 || args[0] != dlockBin || args[1] != "check-worker" {
			continue
		}
		environ, err := os.ReadFile(d + "/environ")
		if err == nil && slices.Contains(strings.Split(string(environ), "\x00"), marker) {
			t.Errorf("a worker is still running: %s", d)
		}
	}
}

// noHoldsLeft checks that the check's lock keys have no holders.
func noHoldsLeft(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dlock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hs, err := c.List(ctx, "dlock-check")
	if err != nil {
		return // a store that cannot list (memcached)
	}
	if len(hs) > 0 {
		t.Errorf("holds left behind: %+v", hs)
	}
}

// noResourceLeft checks that the counter and register are gone, on the
// stores where the test can look easily.
func noResourceLeft(t *testing.T, name, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int64
	switch name {
	case "default":
		db, err := sql.Open("sqlite", strings.TrimPrefix(url, "sqlite://"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM dlock_check").Scan(&n); err != nil {
			t.Fatal(err)
		}
	case "redis":
		o, err := redis.ParseURL(strings.Split(url, "?")[0])
		if err != nil {
			t.Fatal(err)
		}
		c := redis.NewClient(o)
		defer c.Close()
		keys, err := c.Keys(ctx, "*dlock-check-resource*").Result()
		if err != nil {
			t.Fatal(err)
		}
		n = int64(len(keys))
	case "etcd":
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{testsrv.Get(t, testsrv.Etcd).Addr}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		keys, err := c.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range keys.Kvs {
			if strings.Contains(string(kv.Key), "-check-resource/") {
				n++
			}
		}
	default:
		return
	}
	if n != 0 {
		t.Errorf("%d rows or keys of the resource left behind", n)
	}
}

func TestCheckUsage(t *testing.T) {
	e := newEnv(t, sqliteStore)
	for _, args := range [][]string{
		{"check", "--workers", "1"},
		{"check", "--ttl", "0"},
		{"check", "--duration", "-1s"},
		{"check", "--hold", "-1s"},
		{"check", "--faults", "pause,flood"},
		{"check", "extra"},
	} {
		if r := e.run(args...); r.code != cli.ExitUsage || r.stdout != "" {
			t.Errorf("%q: exit status %d, stdout %q; want %d and nothing", args, r.code, r.stdout, cli.ExitUsage)
		}
	}
	// memcached takes leases of 2s at least.
	m := newEnv(t, keyValueStore(testsrv.Memcached, 0))
	if r := m.run("check", "--ttl", "1s"); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "--ttl") {
		t.Errorf("--ttl 1s on memcached: exit status %d, stderr %q; want %d naming --ttl", r.code, r.stderr, cli.ExitUsage)
	}
}

// TestCheckRedisRestart runs a check on a Redis server that is restarted
// without persistence while a worker holds the lock: the restarted server
// has forgotten the hold, another worker acquires it at once, and the check
// must say that mutual exclusion was broken.
func TestCheckRedisRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := testsrv.StartRedis(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	e := &env{t: t, url: srv.URL}
	marker := e.markWorkers()
	// Long leases and holds: the restart strikes inside a hold, well
	// within its lease.
	p := e.start("check", "--json", "--faults", "none", "--workers", "3", "--duration", "4s", "--ttl", "5s", "--hold", "200ms")

	c, err := dlock.Open(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seen := map[string]bool{}
	for range 2 {
		waitForHolder(t, ctx, c, p, seen, 3)
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
	}
	out, err := readAll(p)
	if err != nil {
		t.Fatal(err)
	}
	code, stderr := p.wait()
	t.Logf("report: %s", out)
	if code != cli.ExitCheckFailed {
		t.Fatalf("exit status %d, want %d; stderr: %s", code, cli.ExitCheckFailed, stderr)
	}
	rep := parseReport(t, out)
	if rep.OK || rep.Violations == 0 {
		t.Errorf("report OK %v with %d overlaps while valid, want a violation", rep.OK, rep.Violations)
	}
	for _, ch := range rep.Checks {
		if ch.Name == "mutual exclusion" && ch.OK {
			t.Errorf("mutual exclusion reported as kept: %s", ch.Detail)
		}
	}
	noWorkersLeft(t, marker)
}

// waitForHolder waits until a worker of the check p holds its lock, once
// n workers have been seen holding it (all are running).
func waitForHolder(t *testing.T, ctx context.Context, c *dlock.Client, p *proc, seen map[string]bool, n int) {
	t.Helper()
	for {
		hs, err := c.List(ctx, "dlock-check")
		if err == nil {
			for _, h := range hs {
				if h.Key == "dlock-check" {
					seen[h.Info] = true
					if len(seen) >= n {
						return
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			p.signal(syscall.SIGKILL)
			code, stderr := p.wait()
			t.Fatalf("no worker acquired the lock; dlock check exited %d: %s", code, stderr)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// readAll reads the rest of p's standard output.
func readAll(p *proc) (string, error) {
	p.out.SetReadDeadline(time.Now().Add(processTimeout))
	b, err := io.ReadAll(p.stdout)
	return string(b), err
}

func TestCheckSecretsNotShown(t *testing.T) {
	const secret = "s3cret"
	e := newEnv(t, defaultStore)
	for _, tt := range []struct {
		args []string
		want int
	}{
		{[]string{"check", "--url", "postgres://u:" + secret + "@127.0.0.1:1/x?connect_timeout=5"}, cli.ExitUnavailable},
		{[]string{"check", "--url", "nosuch://u:" + secret + "@127.0.0.1:1/x"}, cli.ExitUsage},
		{[]string{"check", "--resource", "mysql://u:" + secret + "@127.0.0.1:1/x"}, cli.ExitUnavailable},
		{[]string{"check", "--resource", "nosuch://u:" + secret + "@127.0.0.1:1/x"}, cli.ExitUsage},
		{[]string{"check", "--resource", "postgres://u:" + secret + "@[::1/x"}, cli.ExitUsage},
	} {
		r := e.run(tt.args...)
		if r.code != tt.want {
			t.Errorf("dlock %q: exit status %d, want %d", tt.args, r.code, tt.want)
		}
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("dlock %q shows the secret:\nstdout: %s\nstderr: %s", tt.args, r.stdout, r.stderr)
		}
	}
}

// TestCheckSeparateResource keeps the counter and the register in another
// store than the locks: a holder cut off from the lock store still reaches
// the resource, and the register turns its late writes away.
func TestCheckSeparateResource(t *testing.T) {
	e := newEnv(t, keyValueStore(testsrv.Redis, 0))
	marker := e.markWorkers()
	resource, _ := serverStore(testsrv.Postgres)(t)
	r := e.run("check", "--json", "--workers", "3", "--duration", "2s", "--ttl", "1s", "--hold", "100ms",
		"--faults", "cut,kill", "--resource", resource)
	if r.code != 0 {
		t.Fatalf("exit status %d, want 0; stderr: %s", r.code, r.stderr)
	}
	rep := parseReport(t, r.stdout)
	if rep.Resource == "" || !rep.OK || rep.FencedAccepted == 0 {
		t.Errorf("report: resource %q, OK %v, %d fenced writes accepted", rep.Resource, rep.OK, rep.FencedAccepted)
	}
	if f := fault(rep, check.FaultCut); f == nil || f.Token == 0 || fault(rep, check.FaultPause) != nil {
		t.Errorf("faults %+v, want a cut that struck a holder and no pause", rep.Faults)
	}
	noWorkersLeft(t, marker)
}
