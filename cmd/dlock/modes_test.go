package main_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// supports reports whether the store at url (empty: the default store of
// env) implements mode m natively.
func supports(t *testing.T, e *env, m driver.Mode) bool {
	t.Helper()
	url := e.url
	if url == "" {
		return false // the default SQLite store: see sqldlock's capabilities
	}
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	defer cancel()
	c, err := dlock.Open(ctx, url)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	defer c.Close()
	return c.Capabilities().Modes.Has(m)
}

// gather is a command for `dlock run` that records how many commands are
// inside at once and, to prove that `want` of them can be, waits until the
// two commands after it have entered too (or all n have), so that a store
// admitting fewer than want at a time never lets the test finish.
const gather = `
dir=$1 want=$2 n=$3
mkdir "$dir/inside/$$"
inside=$(ls "$dir/inside" | wc -l)
[ "$inside" -gt "$want" ] && echo "$inside inside at once" >> "$dir/failures"
echo $$ >> "$dir/entered"
idx=$(grep -n "^$$\$" "$dir/entered" | cut -d: -f1)
target=$((idx + want - 1)); [ "$target" -gt "$n" ] && target=$n
tries=0
while [ "$(wc -l < "$dir/entered")" -lt "$target" ]; do
	tries=$((tries + 1)); [ "$tries" -gt 3000 ] && { echo "$$ waited in vain for $target" >> "$dir/failures"; break; }
	sleep 0.01
done
inside=$(ls "$dir/inside" | wc -l)
[ "$inside" -gt "$want" ] && echo "$inside inside at once" >> "$dir/failures"
rmdir "$dir/inside/$$"
`

// runGathered starts n `dlock run` processes with args and the gather
// command and checks that they all succeed with at most want inside at once.
func runGathered(t *testing.T, e *env, n, want int, args ...string) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	codes := make([]string, n)
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
			defer cancel()
			cmdArgs := append(append([]string{"run"}, args...), "--", "sh", "-c", gather, "sh", dir, fmt.Sprint(want), fmt.Sprint(n))
			cmd := e.command(ctx, cmdArgs...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				codes[i] = fmt.Sprintf("process %d: %v: %s", i, err, stderr.String())
			}
		})
	}
	wg.Wait()
	for _, c := range codes {
		if c != "" {
			t.Error(c)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "failures")); err == nil {
		t.Errorf("want at most and at least %d at once:\n%s", want, b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "entered")); len(strings.Fields(string(b))) != n {
		t.Errorf("%d commands entered; want %d", len(strings.Fields(string(b))), n)
	}
}

// TestLimit runs nine `dlock run --limit 3` processes on one key: exactly
// three hold it at a time.
func TestLimit(t *testing.T) {
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			e := newEnv(t, s.setup)
			if !supports(t, e, driver.Semaphore) {
				t.Skipf("%s has no native semaphores", s.name)
			}
			runGathered(t, e, 9, 3, "--key", "sem", "--limit", "3")
		})
	}
}

// TestShared runs readers (--shared) that must be inside together, then
// checks that a writer excludes them.
func TestShared(t *testing.T) {
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			e := newEnv(t, s.setup)
			if !supports(t, e, driver.Shared) {
				t.Skipf("%s has no native read-write locks", s.name)
			}
			runGathered(t, e, 4, 4, "--key", "rw", "--shared")
			// Writers alone: never two inside (want 1).
			runGathered(t, e, 3, 1, "--key", "rw")
		})
	}
}

func TestLimitFlags(t *testing.T) {
	e := newEnv(t, sqliteStore)
	for _, args := range [][]string{
		{"run", "--key", "k", "--limit", "0", "--", "true"},
		{"run", "--key", "k", "--limit", "2", "--shared", "--", "true"},
	} {
		if r := e.run(args...); r.code != 64 {
			t.Errorf("dlock %q: exit status %d; want 64 (usage)", args, r.code)
		}
	}
}
