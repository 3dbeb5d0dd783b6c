package main_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/cmd/dlock/internal/cli"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	_ "github.com/dlockhq/dlock/memdlock" // mem:// for the table of lock types
)

// supports reports whether the store at url (empty: the default store of
// env) implements mode m natively.
func supports(t *testing.T, e *env, m driver.Mode) bool {
	t.Helper()
	url := e.url
	if url == "" { // the default store: a SQLite file
		url = cli.SQLiteURL(filepath.Join(t.TempDir(), "caps.db"))
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
	for _, s := range append([]store{{name: "default", setup: defaultStore}}, stores...) {
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
	for _, s := range append([]store{{name: "default", setup: defaultStore}}, stores...) {
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

// readmeStores maps the rows of the table of lock types in docs/lock-types.md to the
// stores they describe.
var readmeStores = map[string]func(t *testing.T) (string, []string){
	"SQLite":                sqliteStore,
	"PostgreSQL":            serverStore(testsrv.Postgres),
	"MySQL / MariaDB":       serverStore(testsrv.MariaDB),
	"Redis":                 keyValueStore(testsrv.Redis, 0),
	"Redis `?mode=tx`":      withQuery(keyValueStore(testsrv.Redis, 0), "mode=tx"),
	"Redis `?mode=legacy`":  withQuery(keyValueStore(testsrv.Redis, 0), "mode=legacy"),
	"Redlock":               keyValueStore(testsrv.RedisQuorum, 3),
	"memcached":             keyValueStore(testsrv.Memcached, 0),
	"etcd":                  consensusStore(testsrv.Etcd),
	"ZooKeeper":             consensusStore(testsrv.ZooKeeper),
	"in-process (`mem://`)": func(*testing.T) (string, []string) { return "mem://readme", nil },
}

func withQuery(setup func(t *testing.T) (string, []string), q string) func(t *testing.T) (string, []string) {
	return func(t *testing.T) (string, []string) {
		url, env := setup(t)
		return url + "&" + q, env
	}
}

// TestReadmeModeTable checks the table of lock types in docs/lock-types.md against the
// capability flags each backend declares.
func TestReadmeModeTable(t *testing.T) {
	b, err := os.ReadFile("../../docs/lock-types.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "<!-- modes table: cmd/dlock/modes_test.go checks it -->\n")
	if !ok {
		t.Fatal("docs/lock-types.md has no modes table marker")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	rows := strings.Split(strings.TrimSpace(table), "\n")
	if len(rows) < 3 {
		t.Fatalf("modes table %q: want a header, a rule and rows", table)
	}
	cells := func(row string) []string {
		f := strings.Split(strings.Trim(row, "|"), "|")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		return f
	}
	header := cells(rows[0])
	seen := map[string]bool{}
	for _, row := range rows[2:] {
		c := cells(row)
		if len(c) != len(header) {
			t.Errorf("row %q has %d cells; want %d", row, len(c), len(header))
			continue
		}
		name := c[0]
		setup, ok := readmeStores[name]
		if !ok {
			t.Errorf("docs/lock-types.md lists backend %q, which this test does not know", name)
			continue
		}
		seen[name] = true
		url, _ := setup(t)
		want, err := readmeCells(name, url)
		if err != nil {
			t.Error(err)
			continue
		}
		for i := 1; i < len(header); i++ {
			param, ok := optionCell(c[i])
			if !ok {
				if c[i] != want[i] {
					t.Errorf("docs/lock-types.md: %s, %s = %q; the driver declares %q", name, header[i], c[i], want[i])
				}
				continue
			}
			// "native (`?param`)": native when the URL carries param,
			// and only then.
			if want[i] != "—" {
				t.Errorf("docs/lock-types.md: %s, %s = %q; the driver declares %q without %s", name, header[i], c[i], want[i], param)
			}
			sep := "?"
			if strings.Contains(url, "?") {
				sep = "&"
			}
			with, err := readmeCells(name, url+sep+param)
			if err != nil {
				t.Error(err)
				continue
			}
			if with[i] != "native" {
				t.Errorf("docs/lock-types.md: %s, %s = %q; with %s the driver declares %q", name, header[i], c[i], param, with[i])
			}
		}
	}
	for name := range readmeStores {
		if !seen[name] {
			t.Errorf("the modes table of docs/lock-types.md has no row for %s", name)
		}
	}
}

// readmeCells opens the store at url and returns the cells of its row of the
// table of lock types in docs/lock-types.md, as its capability flags make them.
func readmeCells(name, url string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	client, err := dlock.Open(ctx, url)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%s: open %s: %v", name, url, err)
	}
	defer client.Close()
	caps := client.Capabilities()
	native := func(b bool) string {
		if b {
			return "native"
		}
		return "—"
	}
	multi, err := multiCell(client.Driver())
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	return []string{name, native(caps.Modes.Has(driver.Exclusive)), native(caps.Modes.Has(driver.Shared)),
		native(caps.Modes.Has(driver.Semaphore)), native(caps.FIFO), "portable", multi}, nil
}

// multiCell returns the multi-lock cell of a driver's row: "native" if it
// takes two keys with one hash tag in one AcquireAll, "portable" if it has
// no AcquireAll or declines them.
func multiCell(d driver.Driver) (string, error) {
	ma, ok := d.(driver.MultiAcquirer)
	if !ok {
		return "portable", nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	defer cancel()
	reqs := []driver.Request{
		{Key: "readme:{t}a", Owner: rand.Text(), TTL: time.Minute},
		{Key: "readme:{t}b", Owner: rand.Text(), TTL: time.Minute},
	}
	res, err := ma.AcquireAll(ctx, reqs)
	switch {
	case errors.Is(err, driver.ErrUnsupported):
		return "portable", nil
	case err != nil:
		return "", fmt.Errorf("AcquireAll: %v", err)
	case !res.Acquired:
		return "", fmt.Errorf("AcquireAll of free keys was refused: %+v", res)
	}
	for _, req := range reqs {
		if err := d.Release(ctx, req); err != nil {
			return "", fmt.Errorf("Release(%s): %v", req.Key, err)
		}
	}
	return "native", nil
}

// optionCell reports whether a cell of the table of lock types in docs/lock-types.md
// reads "native (`?param`)", and returns param.
func optionCell(cell string) (string, bool) {
	rest, ok := strings.CutPrefix(cell, "native (`?")
	if !ok {
		return "", false
	}
	param, ok := strings.CutSuffix(rest, "`)")
	return param, ok && param != ""
}
