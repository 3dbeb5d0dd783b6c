//go:build unix

package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/cmd/dlock/internal/cli"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/memdlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// result is the outcome of one in-process Main call.
type result struct {
	code           int
	stdout, stderr string
}

func runMain(t *testing.T, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Main(args, strings.NewReader(""), &stdout, &stderr)
	t.Logf("dlock %q: exit %d\nstdout: %s\nstderr: %s", args, code, stdout.String(), stderr.String())
	return result{code, stdout.String(), stderr.String()}
}

var memStores atomic.Int64

// memURL returns the URL of a new in-process store: clients opened with the
// same mem:// URL in this process share one store.
func memURL(t *testing.T) string {
	return fmt.Sprintf("mem://%s-%d", strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()), memStores.Add(1))
}

func openClient(t *testing.T, url string) *dlock.Client {
	t.Helper()
	c, err := dlock.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestUsageErrors(t *testing.T) {
	t.Setenv("DLOCK_URL", "mem://usage")
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"missing key", []string{"run", "--", "true"}, "--key is required"},
		{"empty key", []string{"run", "--key", "", "--", "true"}, `invalid --key ""`},
		{"zero ttl", []string{"run", "--key", "k", "--ttl", "0", "--", "true"}, "invalid --ttl 0s"},
		{"negative ttl", []string{"run", "--key", "k", "--ttl", "-5s", "--", "true"}, "invalid --ttl -5s"},
		{"bad ttl", []string{"run", "--key", "k", "--ttl", "5", "--", "true"}, `"5"`},
		{"negative wait", []string{"run", "--key", "k", "--wait", "-1s", "--", "true"}, "invalid --wait -1s"},
		{"negative hold", []string{"run", "--key", "k", "--hold-at-least", "-2s", "--", "true"}, "invalid --hold-at-least -2s"},
		{"negative kill-after", []string{"run", "--key", "k", "--kill-after", "-3s", "--", "true"}, "invalid --kill-after -3s"},
		{"no command", []string{"run", "--key", "k"}, "no command to run"},
		{"no command after dash", []string{"run", "--key", "k", "--"}, "no command to run"},
		{"ttl below backend minimum", []string{"run", "--key", "k", "--ttl", "1us", "--", "true"}, "invalid --ttl 1µs: is below"},
		{"ttl above backend maximum", []string{"run", "--key", "k", "--ttl", "100000h", "--", "true"}, "invalid --ttl 100000h0m0s: is above this backend's maximum of 168h0m0s"},
		{"negative lock delay", []string{"run", "--key", "k", "--lock-delay", "-1s", "--", "true"}, "invalid --lock-delay -1s: must not be negative"},
		{"lock delay above backend maximum", []string{"hold", "--key", "k", "--ttl", "1h", "--lock-delay", "168h"}, "invalid --lock-delay 168h0m0s: added to the ttl of 1h0m0s passes this backend's maximum lease of 168h0m0s"},
		{"bad lock_delay", []string{"run", "--url", "mem://usage?lock_delay=soon", "--key", "k", "--", "true"}, `lock_delay="soon" is not a duration`},
		{"negative check lock delay", []string{"check", "--lock-delay", "-1s"}, "invalid --lock-delay -1s: must not be negative"},
		{"limit above backend maximum", []string{"run", "--key", "k", "--limit", "3000000000", "--", "true"}, "invalid --limit 3000000000: "},
		{"empty url", []string{"run", "--url", "", "--key", "k", "--", "true"}, `invalid --url ""`},
		{"unknown scheme", []string{"run", "--url", "nosuch://x", "--key", "k", "--", "true"}, `unknown scheme "nosuch"`},
		{"unparsable url", []string{"ls", "--url", "::"}, `invalid --url "::": does not parse: missing protocol scheme`},
		{"unparsable url with a password", []string{"ls", "--url", "postgres://u:s3cret@[::1/x"}, `invalid --url "xxxxx@[::1/x": does not parse: missing ']' in host`},
		{"url without a scheme", []string{"ls", "--url", "host=h password=s3cret"}, "invalid --url (not shown): it has no scheme"},
		{"unknown flag", []string{"run", "--kee", "k", "--", "true"}, "--kee"},
		{"unknown command", []string{"lock"}, `unknown command "lock"`},
		{"ls two prefixes", []string{"ls", "a", "b"}, "at most 1 arg"},
		{"release without force", []string{"release", "k"}, `refusing to release lock "k" without --force`},
		{"release without key", []string{"release", "--force"}, "accepts 1 arg"},
		{"release empty key", []string{"release", "--force", ""}, `key=""`},
		// Options the store's client refuses are usage errors, even where
		// nothing listens (port 1).
		{"redis client", []string{"run", "--url", "redis://127.0.0.1:1/?client=rueidis", "--key", "k", "--", "true"}, `client="rueidis": dlock runs on go-redis`},
		{"redlock client", []string{"ls", "--url", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?client=rueidis"}, `client="rueidis": dlock runs on go-redis`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runMain(t, tt.args...)
			if r.code != cli.ExitUsage {
				t.Errorf("exit status %d, want %d", r.code, cli.ExitUsage)
			}
			if !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr %q does not mention %q", r.stderr, tt.want)
			}
		})
	}
}

// TestCommandNotFound checks the statuses of a command that cannot run, as
// shells report them: 127 when it does not exist, 126 when it exists but is
// not an executable file.
func TestCommandNotFound(t *testing.T) {
	url := memURL(t)
	dir := t.TempDir()
	notExec := filepath.Join(dir, "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		command string
		want    int
	}{
		{"/nonexistent/dlock-test-command", cli.ExitNotFound},
		{"dlock-test-no-such-command", cli.ExitNotFound},
		{notExec, cli.ExitCannotRun},
		{dir, cli.ExitCannotRun},
		{notExec + "/sub", cli.ExitCannotRun}, // a path through a file: ENOTDIR
	} {
		r := runMain(t, "run", "--url", url, "--key", "k", "--", tt.command)
		if r.code != tt.want || !strings.Contains(r.stderr, tt.command) {
			t.Errorf("%s: exit status %d, stderr %q; want %d and a message naming it", tt.command, r.code, r.stderr, tt.want)
		}
	}
	// Nothing stays held.
	if hs, err := openClient(t, url).List(context.Background(), ""); err != nil || len(hs) != 0 {
		t.Errorf("holders after failed runs: %v, %v", hs, err)
	}
}

func TestRunInProcess(t *testing.T) {
	url := memURL(t)
	r := runMain(t, "run", "--url", url, "--key", "job", "sh", "-c", `echo "$DLOCK_KEY $DLOCK_TOKEN"; exit 3`)
	if r.code != 3 {
		t.Errorf("exit status %d, want 3", r.code)
	}
	if got := strings.TrimSpace(r.stdout); got != "job 1" {
		t.Errorf("child printed %q, want %q", got, "job 1")
	}
	// Released: a new holder gets the next token.
	l, err := openClient(t, url).TryLock(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() != 2 {
		t.Errorf("token %d after the run, want 2", l.Token())
	}
}

func TestNotAcquired(t *testing.T) {
	url := memURL(t)
	c, err := dlock.Open(context.Background(), url, dlock.WithOwnerInfo("holder-host:42"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Lock(context.Background(), "busy")
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	for _, wait := range []string{"0", "20ms"} {
		r := runMain(t, "run", "--url", url, "--key", "busy", "--wait", wait, "--", "touch", marker)
		if r.code != cli.ExitNotAcquired {
			t.Errorf("--wait %s: exit status %d, want %d", wait, r.code, cli.ExitNotAcquired)
		}
		if !strings.Contains(r.stderr, `lock "busy"`) || !strings.Contains(r.stderr, "holder-host:42") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("--wait %s: stderr %q: want one line naming the key and the holder", wait, r.stderr)
		}
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran: %v", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestLsAndForceRelease(t *testing.T) {
	url := memURL(t)
	c, err := dlock.Open(context.Background(), url, dlock.WithOwnerInfo("web\t1:99"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var locks []*dlock.Lock
	for _, k := range []string{"app/a", "app/b", "other"} {
		l, err := c.Lock(ctx, k, dlock.WithTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}

	r := runMain(t, "ls", "--url", url, "app/")
	if r.code != 0 {
		t.Fatalf("ls: exit status %d", r.code)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "KEY") {
		t.Fatalf("ls output %q: want a header and two locks", r.stdout)
	}
	for i, l := range locks[:2] {
		f := strings.Fields(lines[i+1])
		if f[0] != l.Key() || f[1] != strconv.FormatUint(l.Token(), 10) || f[2] != "exclusive" || f[3] != `"web\t1:99"` {
			t.Errorf("ls line %q: want key %s, token %d, exclusive, quoted owner info", lines[i+1], l.Key(), l.Token())
		}
	}

	r = runMain(t, "ls", "--url", url, "--json")
	if r.code != 0 {
		t.Fatalf("ls --json: exit status %d", r.code)
	}
	var got []cli.Holder
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	for sc.Scan() {
		var h cli.Holder
		if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
			t.Fatalf("ls --json line %q: %v", sc.Text(), err)
		}
		got = append(got, h)
	}
	if len(got) != 3 || got[2].Key != "other" || got[2].Token != locks[2].Token() || got[2].Info != "web\t1:99" ||
		got[2].Mode != "exclusive" || got[2].TimeLeftMS <= 0 || got[2].TimeLeftMS > time.Hour.Milliseconds() {
		t.Errorf("ls --json: %+v", got)
	}

	r = runMain(t, "release", "--url", url, "--force", "app/a")
	if r.code != 0 || !strings.Contains(r.stdout, "1 hold removed") {
		t.Errorf("release --force: exit status %d, stdout %q", r.code, r.stdout)
	}
	r = runMain(t, "release", "--url", url, "--force", "app/a")
	if r.code != 0 || !strings.Contains(r.stdout, "0 holds removed") {
		t.Errorf("second release --force: exit status %d, stdout %q", r.code, r.stdout)
	}
	if hs, err := c.List(ctx, "app/"); err != nil || len(hs) != 1 || hs[0].Key != "app/b" {
		t.Errorf("holders after forced release: %v, %v", hs, err)
	}
}

func TestHoldAtLeastInProcess(t *testing.T) {
	url := memURL(t)
	r := runMain(t, "run", "--url", url, "--key", "cron", "--hold-at-least", "1h", "--", "true")
	if r.code != 0 {
		t.Fatalf("exit status %d", r.code)
	}
	c := openClient(t, url)
	hs, err := c.List(context.Background(), "cron")
	if err != nil || len(hs) != 1 {
		t.Fatalf("holders: %v, %v", hs, err)
	}
	if hs[0].TTL <= 30*time.Minute {
		t.Errorf("the lock is held for %v more, want about an hour", hs[0].TTL)
	}
	r = runMain(t, "run", "--url", url, "--key", "cron", "--wait", "0", "--", "true")
	if r.code != cli.ExitNotAcquired {
		t.Errorf("second run: exit status %d, want %d", r.code, cli.ExitNotAcquired)
	}
}

// TestLostInProcess forces the release of a running command's lock: dlock
// must notice at its next renewal, terminate the command and exit 76.
func TestLostInProcess(t *testing.T) {
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
		done <- cli.Main([]string{"run", "--url", url, "--key", "lost", "--ttl", "300ms", "--kill-after", "1m", "--",
			"sh", "-c", `trap 'echo x > "$1"; exit 9' TERM; echo started; sleep 1000 & wait`, "sh", marker},
			nil, pw, &stderr)
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || line != "started\n" {
		t.Fatalf("child output %q, %v", line, err)
	}
	n, err := openClient(t, url).ForceRelease(context.Background(), "lost")
	if err != nil || n != 1 {
		t.Fatalf("ForceRelease: %d, %v", n, err)
	}
	code := <-done
	t.Logf("stderr: %s", stderr.String())
	if code != cli.ExitLost {
		t.Errorf("exit status %d, want %d", code, cli.ExitLost)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the command did not get SIGTERM: %v", err)
	}
	if !strings.Contains(stderr.String(), `lock "lost" was lost`) {
		t.Errorf("stderr %q does not report the loss", stderr.String())
	}
}

func TestDefaultStorePath(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_STATE_HOME", "")
	p, err := cli.DefaultStorePath()
	if want := filepath.Join(home, ".local/state/dlock/dlock.db"); err != nil || p != want {
		t.Errorf("without XDG_STATE_HOME: %q, %v; want %q", p, err, want)
	}
	t.Setenv("XDG_STATE_HOME", "relative/ignored")
	if p2, err := cli.DefaultStorePath(); err != nil || p2 != p {
		t.Errorf("with a relative XDG_STATE_HOME: %q, %v; want %q", p2, err, p)
	}
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	p, err = cli.DefaultStorePath()
	if want := filepath.Join(state, "dlock/dlock.db"); err != nil || p != want {
		t.Errorf("with XDG_STATE_HOME: %q, %v; want %q", p, err, want)
	}
	if got, want := cli.SQLiteURL("/var/lib/a b/x?.db"), "sqlite:///var/lib/a%20b/x%3F.db"; got != want {
		t.Errorf("SQLiteURL: %q, want %q", got, want)
	}
}

// plainDriver hides the optional interfaces of the driver it wraps.
type plainDriver struct{ driver.Driver }

func init() {
	dlock.Register("plain", func(ctx context.Context, u *url.URL) (driver.Driver, error) {
		return plainDriver{memdlock.New()}, nil
	})
}

func TestUnsupported(t *testing.T) {
	for _, args := range [][]string{{"ls"}, {"release", "--force", "k"}} {
		r := runMain(t, append(args, "--url", "plain://")...)
		if r.code != cli.ExitUnavailable || !strings.Contains(r.stderr, "not support") {
			t.Errorf("%s: exit status %d, stderr %q; want %d and a message", args[0], r.code, r.stderr, cli.ExitUnavailable)
		}
	}
}

func TestStoreUnavailable(t *testing.T) {
	for _, url := range []string{
		"postgres://nobody@127.0.0.1:1/none?connect_timeout=5",
		"mysql://nobody@127.0.0.1:1/none",
		cli.SQLiteURL(filepath.Join(t.TempDir(), "missing-dir", "locks.db")),
	} {
		for _, args := range [][]string{{"run", "--key", "k", "--", "true"}, {"ls"}, {"release", "--force", "k"}} {
			r := runMain(t, append([]string{args[0], "--url", url}, args[1:]...)...)
			if r.code != cli.ExitUnavailable || !strings.Contains(r.stderr, "cannot open the store") {
				t.Errorf("%s %s: exit status %d, stderr %q; want %d", args[0], url, r.code, r.stderr, cli.ExitUnavailable)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := runMain(t, args...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "dlock ") || !strings.Contains(r.stdout, "mem") || !strings.Contains(r.stdout, "postgres") {
			t.Errorf("%s: exit status %d, stdout %q", args[0], r.code, r.stdout)
		}
	}
}

// TestHelpListsStores checks that dlock --help gives a URL example for every
// store the CLI is built with.
func TestHelpListsStores(t *testing.T) {
	r := runMain(t, "--help")
	for _, scheme := range []string{"sqlite", "postgres", "mysql", "redis", "redis+sentinel", "redis+cluster", "redlock", "memcached", "etcd", "zk", "nats"} {
		if !slices.Contains(dlock.Schemes(), scheme) {
			t.Errorf("the CLI is not built with %s://", scheme)
		}
		if !strings.Contains(r.stdout, "  "+scheme+"://") {
			t.Errorf("dlock --help has no URL example of %s://", scheme)
		}
	}
}

func TestHelpListsExitStatuses(t *testing.T) {
	r := runMain(t, "run", "--help")
	for _, s := range []string{"64", "69", "75", "76", "128+N", "--hold-at-least", "default 30s"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("run --help does not mention %q", s)
		}
	}
}

// TestConflictExitCode checks that a run that does not get the lock exits
// with --conflict-exit-code's status and, with --quiet, says nothing: what
// cron needs so that the hosts that skip send no mail.
func TestConflictExitCode(t *testing.T) {
	url := memURL(t)
	l, err := openClient(t, url).TryLock(context.Background(), "cron")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	r := runMain(t, "run", "--url", url, "--key", "cron", "--wait", "0", "--quiet", "--conflict-exit-code", "0", "--", "true")
	if r.code != 0 || r.stderr != "" || r.stdout != "" {
		t.Errorf("--quiet --conflict-exit-code 0 on a held lock: exit %d, stdout %q, stderr %q; want 0 and nothing printed", r.code, r.stdout, r.stderr)
	}
	r = runMain(t, "run", "--url", url, "--key", "cron", "--wait", "0", "-E", "3", "--", "true")
	if r.code != 3 || !strings.Contains(r.stderr, "held") {
		t.Errorf("-E 3 on a held lock: exit %d, stderr %q; want 3 and the reason", r.code, r.stderr)
	}
	r = runMain(t, "hold", "--url", url, "--key", "cron", "--ttl", "1m", "--wait", "0", "-q")
	if r.code != cli.ExitNotAcquired || r.stderr != "" {
		t.Errorf("hold -q on a held lock: exit %d, stderr %q; want %d and nothing printed", r.code, r.stderr, cli.ExitNotAcquired)
	}
	r = runMain(t, "run", "--url", url, "--key", "free", "-E", "300", "--", "true")
	if r.code != cli.ExitUsage {
		t.Errorf("-E 300: exit %d; want a usage error", r.code)
	}
	// A store that cannot be reached is no conflict: its status stays.
	r = runMain(t, "run", "--url", "redis://127.0.0.1:1", "--key", "k", "--wait", "0", "-q", "-E", "0", "--", "true")
	if r.code != cli.ExitUnavailable {
		t.Errorf("unreachable store with -E 0: exit %d; want %d", r.code, cli.ExitUnavailable)
	}
}

// TestUsageMistakes checks the usage errors that name what was probably
// meant: a duration without its unit, a key given twice.
func TestUsageMistakes(t *testing.T) {
	url := memURL(t)
	r := runMain(t, "run", "--url", url, "-w", "10", "--key", "k", "--", "true")
	if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "10s") {
		t.Errorf("-w 10: exit %d, stderr %q; want a usage error suggesting 10s", r.code, r.stderr)
	}
	r = runMain(t, "hold", "--url", url, "--ttl", "30", "--key", "k")
	if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "30s") {
		t.Errorf("--ttl 30: exit %d, stderr %q; want a usage error suggesting 30s", r.code, r.stderr)
	}
	r = runMain(t, "run", "--url", url, "--key", "a", "-k", "b", "--", "true")
	if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "twice") {
		t.Errorf("--key twice: exit %d, stderr %q; want a usage error", r.code, r.stderr)
	}
}

// TestCompletionAfterKey checks that shell completion still completes flags
// once --key is on the line (cobra parses the flags twice), and that --key
// given twice is still refused when the command runs.
func TestCompletionAfterKey(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--key", "k", "--wa"}, "--wait\t"},
		{[]string{"run", "-k", "k", "--shared", "--li"}, "--limit\t"},
		{[]string{"hold", "--key", "k", "--tt"}, "--ttl\t"},
		{[]string{"run", "--key", "a", "--key", "b", "--qu"}, "--quiet\t"},
	} {
		r := runMain(t, append([]string{"__complete"}, tt.args...)...)
		if r.code != 0 || !strings.Contains(r.stdout, tt.want) {
			t.Errorf("completing %q: exit %d, stdout %q; want %q offered", tt.args, r.code, r.stdout, tt.want)
		}
	}
}

// TestSchemaWithoutSchema checks that dlock schema on a store that keeps no
// table succeeds with a note.
func TestSchemaWithoutSchema(t *testing.T) {
	r := runMain(t, "schema", "--url", memURL(t))
	if r.code != 0 || !strings.Contains(r.stdout, "nothing to create") {
		t.Errorf("schema on mem://: exit %d, stdout %q; want 0 and a note", r.code, r.stdout)
	}
}

// TestSchemaPrint checks that dlock schema --print prints the statements of
// the URL's dialect with its table's name, without connecting to the store,
// and that a store that keeps no table has none to print.
func TestSchemaPrint(t *testing.T) {
	file := filepath.Join(t.TempDir(), "locks.db")
	r := runMain(t, "schema", "--print", "--url", "sqlite://"+file+"?table=printed")
	if r.code != 0 || !strings.Contains(r.stdout, `CREATE TABLE IF NOT EXISTS "printed_holds"`) || strings.Contains(r.stdout, "dlock_locks") {
		t.Errorf("schema --print: exit %d, stdout %q; want the statements of table printed", r.code, r.stdout)
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("schema --print opened the store: %v", err)
	}
	if r := runMain(t, "schema", "--print", "--url", memURL(t)); r.code != 0 || !strings.Contains(r.stdout, "nothing to create") {
		t.Errorf("schema --print on mem://: exit %d, stdout %q; want 0 and a note", r.code, r.stdout)
	}
	if r := runMain(t, "schema", "--print", "--url", "sqlite://"+file+"?table=bad-name"); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "bad-name") {
		t.Errorf("schema --print with a bad table: exit %d, stderr %q; want a usage error naming it", r.code, r.stderr)
	}
}

// TestMan checks that dlock man writes a page for dlock and for each
// command, and that --dir is required.
func TestMan(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "man1")
	r := runMain(t, "man", "--dir", dir)
	if r.code != 0 {
		t.Fatalf("man: exit %d", r.code)
	}
	for _, page := range []string{"dlock.1", "dlock-run.1", "dlock-hold.1", "dlock-check.1"} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil || !bytes.Contains(b, []byte(".TH \"DLOCK\" \"1\"")) {
			t.Errorf("%s: %v; want a section 1 page", page, err)
		}
	}
	if r := runMain(t, "man"); r.code != cli.ExitUsage {
		t.Errorf("man without --dir: exit %d; want a usage error", r.code)
	}
}
