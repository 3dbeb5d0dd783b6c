package integration_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	_ "github.com/dlockhq/dlock/etcddlock"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	_ "github.com/dlockhq/dlock/memcachedlock"
	_ "github.com/dlockhq/dlock/redisdlock"
	_ "github.com/dlockhq/dlock/sqldlock/sqlite"
)

// watchServer starts a server for the test and returns its URL; it skips
// the test with -short, or when the server is not installed unless $CI is
// set.
func watchServer(t *testing.T, start func(context.Context) (*testsrv.Server, error)) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no database servers")
	}
	srv, err := start(dlocktest.Ctx(t))
	if errors.Is(err, testsrv.ErrMissing) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	return srv.URL
}

// nextValue waits for a value from a watch; the bound is a bound, not a
// measurement.
func nextValue(t *testing.T, released <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-released:
		if !ok {
			t.Fatalf("%s: the watch ended", what)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: nothing from the watch", what)
	}
}

// TestWatchTellsOfReleases releases a key held by another Client, three
// times over, while a Client watches it with a poll interval of an hour:
// the store's notifications alone bring word of each release, on etcd too,
// whose subscriptions end with their first signal.
func TestWatchTellsOfReleases(t *testing.T) {
	stores := []dlocktest.Store{
		{Name: "mem", URL: func(t *testing.T) string { return "mem://watch-releases" }},
		{Name: "redis", URL: func(t *testing.T) string { return watchServer(t, testsrv.StartRedis) }},
		{Name: "etcd", URL: func(t *testing.T) string { return watchServer(t, testsrv.StartEtcd) }},
	}
	dlocktest.EachStore(t, stores, func(t *testing.T, url string) {
		ctx, key := dlocktest.Ctx(t), dlocktest.Key(t, "watch")
		holder, watcher := dlocktest.Open(t, url), dlocktest.Open(t, url)
		var released <-chan struct{}
		for round := range 3 {
			l, err := holder.Lock(ctx, key, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if released == nil {
				if released, err = watcher.Watch(ctx, key, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			for len(released) > 0 { // a value from the last round
				<-released
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			nextValue(t, released, fmt.Sprintf("release %d", round+1))
			if hs, err := watcher.Holders(ctx, key); err != nil || len(hs) != 0 {
				t.Fatalf("holders after the release = %+v, %v; want none", hs, err)
			}
		}
	})
}

// TestWatchPolls watches keys on stores that cannot notify (memcached has
// no notifications, SQLite refuses subscriptions): the watch tells its
// caller to look again every poll.
func TestWatchPolls(t *testing.T) {
	stores := []dlocktest.Store{
		{Name: "memcached", URL: func(t *testing.T) string { return testsrv.Get(t, testsrv.Memcached).URL }},
		{Name: "sqlite", URL: func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "dlock.db") }},
	}
	dlocktest.EachStore(t, stores, func(t *testing.T, url string) {
		c := dlocktest.Open(t, url)
		released, err := c.Watch(dlocktest.Ctx(t), dlocktest.Key(t, "watch"), 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		nextValue(t, released, "first poll")
		nextValue(t, released, "second poll")
	})
}
