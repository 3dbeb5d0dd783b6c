//go:build unix

package cli_test

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/cmd/dlock/internal/cli"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/holdid"
	"github.com/dlockhq/dlock/memdlock"
)

// sessionDriver is an in-process store whose holds are declared bound to
// the driver's session, as etcd's and ZooKeeper's are.
type sessionDriver struct{ *memdlock.Driver }

func (s sessionDriver) Capabilities() driver.Capabilities {
	caps := s.Driver.Capabilities()
	caps.PortableHolds = false
	return caps
}

func init() {
	dlock.Register("session", func(ctx context.Context, u *url.URL) (driver.Driver, error) {
		return sessionDriver{memdlock.New()}, nil
	})
}

// runMainIn is runMain with stdin.
func runMainIn(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Main(args, strings.NewReader(stdin), &stdout, &stderr)
	t.Logf("dlock %q: exit %d\nstdout: %s\nstderr: %s", args, code, stdout.String(), stderr.String())
	return result{code, stdout.String(), stderr.String()}
}

// lease returns the time left on the lease of key's only holder.
func lease(t *testing.T, c *dlock.Client, key string) time.Duration {
	t.Helper()
	hs, err := c.List(context.Background(), key)
	if err != nil || len(hs) != 1 {
		t.Fatalf("holders of %q: %+v, %v; want one", key, hs, err)
	}
	return hs[0].TTL
}

func TestHoldExtendReleaseInProcess(t *testing.T) {
	url := memURL(t)
	c := openClient(t, url)
	r := runMain(t, "hold", "--url", url, "--key", "phone", "--ttl", "15m", "--wait", "0")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(id, "dlh1.") || strings.Count(r.stdout, "\n") != 1 || r.stderr != "" {
		t.Fatalf("hold: exit status %d, stdout %q, stderr %q; want 0 and the hold ID alone", r.code, r.stdout, r.stderr)
	}
	if left := lease(t, c, "phone"); left < 14*time.Minute {
		t.Errorf("lease left after dlock hold exited: %v; want about 15m", left)
	}
	var shown []string // everything dlock printed but the hold's own ID
	shows := func(r result) {
		shown = append(shown, r.stderr)
		if !strings.HasPrefix(r.stdout, "dlh1.") {
			shown = append(shown, r.stdout)
		}
	}

	r = runMain(t, "hold", "--url", url, "--key", "phone", "--ttl", "15m", "--wait", "0")
	shows(r)
	if r.code != cli.ExitNotAcquired || !strings.Contains(r.stderr, "no hold taken") {
		t.Errorf("hold of a held key: exit status %d, stderr %q; want %d", r.code, r.stderr, cli.ExitNotAcquired)
	}

	r = runMainIn(t, id+"\n", "extend", "--url", url, "--hold", "-", "--ttl", "1h")
	shows(r)
	if r.code != 0 || !strings.Contains(r.stdout, `extended "phone" (token 1): held for 1h0m0s`) {
		t.Errorf("extend --hold -: exit status %d, stdout %q", r.code, r.stdout)
	}
	if left := lease(t, c, "phone"); left < 59*time.Minute {
		t.Errorf("lease left after extend --ttl 1h: %v", left)
	}
	t.Setenv("DLOCK_HOLD", id)
	r = runMain(t, "extend", "--url", url)
	shows(r)
	if r.code != 0 || !strings.Contains(r.stdout, "held for 15m0s") {
		t.Errorf("extend with $DLOCK_HOLD and no --ttl: exit status %d, stdout %q; want the hold's own 15m", r.code, r.stdout)
	}
	r = runMain(t, "release", "--url", url)
	shows(r)
	if r.code != 0 || !strings.Contains(r.stdout, `released "phone" (token 1)`) {
		t.Errorf("release with $DLOCK_HOLD: exit status %d, stdout %q", r.code, r.stdout)
	}
	t.Setenv("DLOCK_HOLD", "")
	if hs, err := c.List(context.Background(), ""); err != nil || len(hs) != 0 {
		t.Errorf("holders after release: %+v, %v", hs, err)
	}

	// Spent: refused with 76, and a new holder keeps the key.
	next, err := c.TryLock(context.Background(), "phone", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"release", "--hold", id}, {"extend", "--hold", id, "--ttl", "1h"}} {
		r = runMain(t, append(args, "--url", url)...)
		shows(r)
		if r.code != cli.ExitLost || !strings.Contains(r.stderr, "lock not held") {
			t.Errorf("%s of a spent hold: exit status %d, stderr %q; want %d", args[0], r.code, r.stderr, cli.ExitLost)
		}
	}
	if left := lease(t, c, "phone"); left > time.Minute {
		t.Errorf("the new holder's lease after refused hold IDs: %v; want at most its minute", left)
	}
	if err := next.Release(context.Background()); err != nil {
		t.Error(err)
	}

	// Malformed: a usage error that does not show the ID.
	for _, bad := range []string{id[:len(id)-4], "x" + id[1:], id + "AAAA"} {
		r = runMain(t, "release", "--url", url, "--hold", bad)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "hold ID") || strings.Contains(r.stderr, bad[8:40]) {
			t.Errorf("release of a malformed hold ID: exit status %d, stderr %q; want %d, not showing it", r.code, r.stderr, cli.ExitUsage)
		}
	}
	for _, s := range shown {
		if strings.Contains(s, id[8:40]) {
			t.Errorf("dlock printed the hold ID: %q", s)
		}
	}
}

// A hold ID whose fencing token was edited is refused as a usage error:
// dlock extend and dlock release report the store's token or nothing, and
// leave the hold as it was.
func TestHoldEditedToken(t *testing.T) {
	url := memURL(t)
	c := openClient(t, url)
	r := runMain(t, "hold", "--url", url, "--key", "phone", "--ttl", "15m", "--wait", "0")
	id := strings.TrimSpace(r.stdout)
	ref, err := holdid.Decode(id)
	if err != nil {
		t.Fatal(err)
	}
	ref.Token += 1000
	edited := ref.Encode()
	for _, args := range [][]string{{"extend", "--ttl", "1h"}, {"release"}} {
		r = runMain(t, append(args, "--url", url, "--hold", edited)...)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "hold ID") || strings.Contains(r.stdout+r.stderr, "1001") {
			t.Errorf("%s with an edited token: exit status %d, stdout %q, stderr %q; want %d", args[0], r.code, r.stdout, r.stderr, cli.ExitUsage)
		}
	}
	if left := lease(t, c, "phone"); left > 15*time.Minute {
		t.Errorf("lease left after refused hold IDs: %v; want at most the 15m it was taken with", left)
	}
	r = runMain(t, "release", "--url", url, "--hold", id)
	if r.code != 0 || !strings.Contains(r.stdout, `released "phone" (token 1)`) {
		t.Errorf("release with the hold's own ID: exit status %d, stdout %q", r.code, r.stdout)
	}
}

func TestHoldUnsupported(t *testing.T) {
	r := runMain(t, "hold", "--url", "session://", "--key", "k", "--ttl", "1m")
	if r.code != cli.ExitUnavailable || !strings.Contains(r.stderr, "session") || r.stdout != "" {
		t.Errorf("hold on a session-bound store: exit status %d, stderr %q; want %d", r.code, r.stderr, cli.ExitUnavailable)
	}
	url := memURL(t)
	r = runMain(t, "hold", "--url", url, "--key", "k", "--ttl", "1m")
	r = runMain(t, "extend", "--url", "session://", "--hold", strings.TrimSpace(r.stdout))
	if r.code != cli.ExitUnavailable || !strings.Contains(r.stderr, "not supported") {
		t.Errorf("extend on a session-bound store: exit status %d, stderr %q; want %d", r.code, r.stderr, cli.ExitUnavailable)
	}
}

func TestHoldUsageErrors(t *testing.T) {
	url := memURL(t)
	t.Setenv("DLOCK_URL", url)
	t.Setenv("DLOCK_HOLD", "")
	tests := []struct {
		name  string
		stdin string
		args  []string
		want  string // in stderr
	}{
		{"hold without key", "", []string{"hold", "--ttl", "1m"}, "--key is required"},
		{"hold without ttl", "", []string{"hold", "--key", "k"}, "--ttl is required"},
		{"hold zero ttl", "", []string{"hold", "--key", "k", "--ttl", "0s"}, "invalid --ttl 0s"},
		{"hold ttl above maximum", "", []string{"hold", "--key", "k", "--ttl", "100000h"}, "invalid --ttl 100000h0m0s: is above"},
		{"hold limit and shared", "", []string{"hold", "--key", "k", "--ttl", "1m", "--limit", "2", "--shared"}, "exclude each other"},
		{"hold with a command", "", []string{"hold", "--key", "k", "--ttl", "1m", "true"}, "unknown command"},
		{"release nothing", "", []string{"release"}, "nothing to release"},
		{"release force and hold", "", []string{"release", "--force", "k", "--hold", "x"}, "--force and --hold exclude each other"},
		{"release hold and key", "", []string{"release", "--hold", "x", "k"}, `refusing to release lock "k" without --force`},
		{"release empty hold", "", []string{"release", "--hold", ""}, "invalid --hold"},
		{"release empty stdin", "", []string{"release", "--hold", "-"}, "no hold ID on stdin"},
		{"extend without hold", "", []string{"extend"}, "no hold ID"},
		{"extend zero ttl", "", []string{"extend", "--hold", "x", "--ttl", "0s"}, "invalid --ttl 0s"},
		{"extend bad hold", "", []string{"extend", "--hold", "x"}, "hold ID"},
		{"extend bad hold on stdin", "not-an-id\n", []string{"extend", "--hold", "-"}, "is not a dlock hold ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runMainIn(t, tt.stdin, tt.args...)
			if r.code != cli.ExitUsage || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit status %d, stderr %q; want %d and %q", r.code, r.stderr, cli.ExitUsage, tt.want)
			}
		})
	}
	// An extension above the store's maximum names --ttl.
	r := runMain(t, "hold", "--key", "k", "--ttl", "1m")
	r = runMain(t, "extend", "--hold", strings.TrimSpace(r.stdout), "--ttl", "100000h")
	if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "invalid --ttl 100000h0m0s: is above") {
		t.Errorf("extend --ttl 100000h: exit status %d, stderr %q; want %d", r.code, r.stderr, cli.ExitUsage)
	}
}
