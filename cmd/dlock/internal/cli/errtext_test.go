//go:build unix

package cli_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/cmd/dlock/internal/cli"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/memdlock"
)

// failing is a store whose requests fail as a store's do when the network
// does: fail://NAME?fail=acquire,refresh,release,force names the requests
// that fail. Clients opened on the same NAME share one store, whatever
// fails for each.
type failing struct {
	*memdlock.Driver
	fail map[string]bool
}

var failingStores sync.Map // NAME -> *memdlock.Driver

func init() {
	dlock.Register("fail", func(ctx context.Context, u *url.URL) (driver.Driver, error) {
		s, _ := failingStores.LoadOrStore(u.Host, memdlock.New())
		f := &failing{Driver: s.(*memdlock.Driver).Share(), fail: map[string]bool{}}
		for op := range strings.SplitSeq(u.Query().Get("fail"), ",") {
			f.fail[op] = true
		}
		return f, nil
	})
}

// failURL returns the URL of the failing store of test t whose requests ops
// fail: a subtest's store is not its siblings' (the host of
// fail://Test/sub would be Test), so that no lock left by one delays another.
func failURL(t *testing.T, ops string) string {
	return "fail://" + strings.ReplaceAll(t.Name(), "/", "_") + "?fail=" + ops
}

// errReset is the store's error of a failing request.
var errReset = errors.New("connection reset by peer")

func (f *failing) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	if f.fail["acquire"] {
		return driver.Result{}, fmt.Errorf("failing: acquire %q: %w", req.Key, errReset)
	}
	return f.Driver.Acquire(ctx, req)
}

func (f *failing) Refresh(ctx context.Context, req driver.Request) error {
	if f.fail["refresh"] {
		return fmt.Errorf("failing: refresh %q: %w", req.Key, errReset)
	}
	return f.Driver.Refresh(ctx, req)
}

func (f *failing) Release(ctx context.Context, req driver.Request) error {
	if f.fail["release"] {
		return fmt.Errorf("failing: release %q: %w", req.Key, errReset)
	}
	return f.Driver.Release(ctx, req)
}

func (f *failing) ForceRelease(ctx context.Context, key string) (int, error) {
	if f.fail["force"] {
		return 0, fmt.Errorf("failing: force release %q: %w", key, errReset)
	}
	return f.Driver.ForceRelease(ctx, key)
}

// dlockPrefix matches dlock's "dlock:" as a word ("memdlock:" is another).
var dlockPrefix = regexp.MustCompile(`(^|[^a-z])dlock:`)

// TestMessagesNameKeyOnce runs dlock into the failures whose messages
// wrap an error of the library, which names the key already: every line
// dlock prints names the key at most once and says "dlock:" once, and the
// message names the key.
func TestMessagesNameKeyOnce(t *testing.T) {
	const key = "order:42"
	quoted := strconv.Quote(key)
	ctx := context.Background()
	check := func(t *testing.T, what string, stderr string) {
		t.Helper()
		t.Logf("%s: %s", what, stderr)
		if !strings.Contains(stderr, quoted) {
			t.Errorf("%s: %q does not name the key", what, stderr)
		}
		for line := range strings.Lines(stderr) {
			if n := strings.Count(line, quoted); n > 1 {
				t.Errorf("%s: %q names the key %d times; want once", what, line, n)
			}
			if n := len(dlockPrefix.FindAllString(line, -1)); n > 1 {
				t.Errorf("%s: %q says dlock: %d times; want once", what, line, n)
			}
		}
	}
	run := func(t *testing.T, what string, want int, args ...string) {
		t.Helper()
		r := runMain(t, args...)
		if r.code != want {
			t.Errorf("%s: exit status %d, want %d", what, r.code, want)
		}
		if r.code != 0 {
			check(t, what, r.stderr)
		}
	}

	// On SQLite too: the driver's errors name the key themselves.
	for _, store := range []struct{ name, url string }{
		{"mem", memURL(t)},
		{"sqlite", cli.SQLiteURL(filepath.Join(t.TempDir(), "locks.db"))},
	} {
		t.Run("held/"+store.name, func(t *testing.T) {
			url := store.url
			l, err := openClient(t, url).Lock(ctx, key, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			run(t, "run --wait 0 on a held lock", cli.ExitNotAcquired, "run", "--url", url, "--key", key, "--wait", "0", "--", "true")
			run(t, "hold --wait 20ms on a held lock", cli.ExitNotAcquired, "hold", "--url", url, "--key", key, "--ttl", "1m", "--wait", "20ms")
			run(t, "run --limit on a lock", cli.ExitNotAcquired, "run", "--url", url, "--key", key, "--limit", "3", "--wait", "0", "--", "true")
			run(t, "run --rate on a lock", cli.ExitNotAcquired, "run", "--url", url, "--key", key, "--rate", "3/1m", "--wait", "0", "--", "true")
			run(t, "run --rate waiting on a lock", cli.ExitNotAcquired, "run", "--url", url, "--key", key, "--rate", "3/1m", "--wait", "20ms", "--", "true")
		})
	}
	t.Run("rate", func(t *testing.T) {
		url := memURL(t)
		run(t, "run --rate", 0, "run", "--url", url, "--key", key, "--rate", "1/1h", "--", "true")
		run(t, "run --rate with no slot free", cli.ExitNotAcquired, "run", "--url", url, "--key", key, "--rate", "1/1h", "--wait", "0", "--", "true")
		run(t, "run --rate with another N", cli.ExitNotAcquired, "run", "--url", url, "--key", key, "--rate", "2/1h", "--wait", "0", "--", "true")
		run(t, "run on a rate limit", cli.ExitNotAcquired, "run", "--url", url, "--key", key, "--wait", "0", "--", "true")
	})
	t.Run("unavailable", func(t *testing.T) {
		url := failURL(t, "acquire,force")
		run(t, "run on a failing store", cli.ExitUnavailable, "run", "--url", url, "--key", key, "--wait", "0", "--", "true")
		run(t, "run waiting on a failing store", cli.ExitUnavailable, "run", "--url", url, "--key", key, "--wait", "20ms", "--", "true")
		run(t, "run --rate on a failing store", cli.ExitUnavailable, "run", "--url", url, "--key", key, "--rate", "3/1m", "--wait", "0", "--", "true")
		run(t, "hold on a failing store", cli.ExitUnavailable, "hold", "--url", url, "--key", key, "--ttl", "1m", "--wait", "0")
		run(t, "release --force on a failing store", cli.ExitUnavailable, "release", "--url", url, "--force", key)
		run(t, "release --force on a store without it", cli.ExitUnavailable, "release", "--url", "plain://", "--force", key)
		// The command ran; releasing its lock fails: a warning.
		r := runMain(t, "run", "--url", failURL(t, "release"), "--key", key, "--", "true")
		if r.code != 0 {
			t.Errorf("run whose release fails: exit status %d, want 0", r.code)
		}
		check(t, "run whose release fails", r.stderr)
	})
	t.Run("lost", func(t *testing.T) {
		// Renewals and the release fail: dlock warns, loses the lock
		// when its validity runs out and terminates the command.
		url := failURL(t, "refresh,release")
		run(t, "run losing its lock", cli.ExitLost, "run", "--url", url, "--key", key, "--ttl", "300ms", "--kill-after", "1m", "--", "sleep", "60")
	})
	t.Run("hold", func(t *testing.T) {
		url := memURL(t)
		r := runMain(t, "hold", "--url", url, "--key", key, "--ttl", "1m")
		if r.code != 0 {
			t.Fatalf("hold: exit status %d", r.code)
		}
		id := strings.TrimSpace(r.stdout)
		if n, err := openClient(t, url).ForceRelease(ctx, key); err != nil || n != 1 {
			t.Fatalf("ForceRelease: %d, %v", n, err)
		}
		run(t, "extend of a released hold", cli.ExitLost, "extend", "--url", url, "--hold", id)
		run(t, "release --hold of a released hold", cli.ExitLost, "release", "--url", url, "--hold", id)
	})
}
