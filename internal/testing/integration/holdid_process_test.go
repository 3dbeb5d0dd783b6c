//go:build unix

package integration_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	_ "github.com/dlockhq/dlock/memcachedlock"
	_ "github.com/dlockhq/dlock/quorum"
	_ "github.com/dlockhq/dlock/redisdlock"
	_ "github.com/dlockhq/dlock/sqldlock/mysql"
	_ "github.com/dlockhq/dlock/sqldlock/postgres"
	_ "github.com/dlockhq/dlock/sqldlock/sqlite"
)

// The environment of a test binary run as a second process by
// TestHoldAcrossProcesses: the operation, the store's URL and the hold ID
// (in the environment rather than the arguments, as a secret should be).
const (
	holdOpEnv  = "DLOCK_HOLD_TEST_OP"
	holdURLEnv = "DLOCK_HOLD_TEST_URL"
	holdIDEnv  = "DLOCK_HOLD_TEST_ID"
)

// holdKey is the key of the payment hold the processes share.
const holdKey = "hold:+15550100"

// TestHoldChildProcess is the second process of TestHoldAcrossProcesses;
// it prints "result: " and the outcome of its operation.
func TestHoldChildProcess(t *testing.T) {
	op := os.Getenv(holdOpEnv)
	if op == "" {
		t.Skip("a second process of TestHoldAcrossProcesses")
	}
	fmt.Println("result:", holdChild(op, os.Getenv(holdURLEnv), os.Getenv(holdIDEnv)))
}

// holdChild takes the hold and detaches it ("hold", which prints the hold
// ID), or resumes the hold ID and extends it by an hour ("extend") or
// releases it ("release").
func holdChild(op, url, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dlock.Open(ctx, url)
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	var l *dlock.Lock
	switch op {
	case "hold":
		l, err = c.TryLock(ctx, holdKey, dlock.WithTTL(time.Hour), dlock.WithoutRenewal())
	case "extend":
		l, err = c.Resume(ctx, id, dlock.WithTTL(2*time.Hour), dlock.WithoutRenewal())
	case "release":
		if l, err = c.Resume(ctx, id); err == nil {
			err = l.Release(ctx)
		}
	}
	switch {
	case errors.Is(err, dlock.ErrNotHeld):
		return "not held"
	case errors.Is(err, dlock.ErrInvalidArgument):
		return "invalid"
	case err != nil:
		return "error: " + err.Error()
	case op == "release":
		return "released"
	}
	if err := l.Detach(); err != nil {
		return "error: " + err.Error()
	}
	return "detached " + l.HoldID()
}

// holdStores are the stores TestHoldAcrossProcesses runs on: each returns
// the URL of a store of the test's own.
var holdStores = []struct {
	name string
	url  func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string {
		return "sqlite://" + filepath.Join(t.TempDir(), "locks.db")
	}},
	{"postgres", sqlServer(testsrv.StartPostgres)},
	{"mariadb", sqlServer(testsrv.StartMariaDB)},
	{"redis", func(t *testing.T) string { return startServer(t, testsrv.StartRedis).URL }},
	{"redlock", func(t *testing.T) string {
		srv := startServer(t, func(ctx context.Context) (*testsrv.Server, error) { return testsrv.StartRedisQuorum(ctx, 3) })
		return "redlock://" + strings.Join(srv.Addrs, ",")
	}},
	{"memcached", func(t *testing.T) string { return startServer(t, testsrv.StartMemcached).URL }},
}

// sqlServer returns the URL of a database on a server that start starts.
func sqlServer(start func(context.Context) (*testsrv.Server, error)) func(t *testing.T) string {
	return func(t *testing.T) string {
		url, _, err := startServer(t, start).NewDatabase(testCtx(t), "holds")
		if err != nil {
			t.Fatal(err)
		}
		return url
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// startServer starts a server for the test, which it skips with -short or
// when the server is not installed (unless $CI is set).
func startServer(t *testing.T, start func(context.Context) (*testsrv.Server, error)) *testsrv.Server {
	if testing.Short() {
		t.Skip("-short: no database servers")
	}
	srv, err := start(testCtx(t))
	if errors.Is(err, testsrv.ErrMissing) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	return srv
}

// runHoldChild runs op in a second process and returns its result line.
func runHoldChild(t *testing.T, op, url, id string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(testCtx(t), self, "-test.run=^TestHoldChildProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), holdOpEnv+"="+op, holdURLEnv+"="+url, holdIDEnv+"="+id, "GORACE=atexit_sleep_ms=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s process: %v\nstdout: %s\nstderr: %s", op, err, stdout.String(), stderr.String())
	}
	for line := range strings.Lines(stdout.String()) {
		if res, ok := strings.CutPrefix(strings.TrimSpace(line), "result: "); ok {
			return res
		}
	}
	t.Fatalf("%s process printed no result: %s", op, stdout.String())
	return ""
}

// A hold taken by one process outlives it, and other processes extend and
// release it with its hold ID; a stale or malformed hold ID is refused and
// changes nothing.
func TestHoldAcrossProcesses(t *testing.T) {
	for _, s := range holdStores {
		t.Run(s.name, func(t *testing.T) {
			url := s.url(t)
			ctx := testCtx(t)
			c, err := dlock.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, listErr := c.List(ctx, "")
			lists := listErr == nil
			leaseLeft := func() time.Duration {
				hs, err := c.List(ctx, holdKey)
				if err != nil || len(hs) != 1 {
					t.Fatalf("holders: %+v, %v; want one", hs, err)
				}
				return hs[0].TTL
			}

			// Taken, detached and closed by a process that has exited.
			res := runHoldChild(t, "hold", url, "")
			id, ok := strings.CutPrefix(res, "detached ")
			if !ok {
				t.Fatalf("hold: %s", res)
			}
			if _, err := c.TryLock(ctx, holdKey); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("TryLock after the holding process exited: %v; want ErrNotAcquired", err)
			}
			if lists {
				if left := leaseLeft(); left < 50*time.Minute {
					t.Errorf("lease left after the hold: %v; want about an hour", left)
				}
			}

			// Extended from another process.
			if res := runHoldChild(t, "extend", url, id); !strings.HasPrefix(res, "detached ") {
				t.Fatalf("extend: %s", res)
			}
			if lists {
				if left := leaseLeft(); left < 110*time.Minute {
					t.Errorf("lease left after the extension: %v; want about two hours", left)
				}
			}
			if _, err := c.TryLock(ctx, holdKey); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("TryLock after the extension: %v; want ErrNotAcquired", err)
			}

			// Released from a third: the key is free.
			if res := runHoldChild(t, "release", url, id); res != "released" {
				t.Fatalf("release: %s", res)
			}
			next, err := c.TryLock(ctx, holdKey, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatalf("TryLock after the release: %v", err)
			}

			// The hold ID is stale now, and a damaged one is no hold
			// ID: both are refused, and the new holder keeps the key.
			if res := runHoldChild(t, "release", url, id); res != "not held" {
				t.Errorf("release with a stale hold ID: %s; want not held", res)
			}
			if res := runHoldChild(t, "extend", url, id[:len(id)-2]+"!!"); res != "invalid" {
				t.Errorf("extend with a damaged hold ID: %s; want invalid", res)
			}
			if err := next.Refresh(ctx); err != nil {
				t.Errorf("the new holder after refused hold IDs: %v", err)
			}
			if lists {
				if left := leaseLeft(); left > time.Minute {
					t.Errorf("lease left of the new holder: %v; want at most a minute", left)
				}
			}
			if err := next.Release(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}
