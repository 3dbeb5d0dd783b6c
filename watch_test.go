package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	_ "github.com/dlockhq/dlock/etcddlock"
	"github.com/dlockhq/dlock/internal/dlocktest"
	"github.com/dlockhq/dlock/internal/testsrv"
	_ "github.com/dlockhq/dlock/memcachedlock"
	"github.com/dlockhq/dlock/memdlock"
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

// TestWatchEnds ends watches by their context and by closing their Client:
// the channel is closed, and a closed Client refuses to watch.
func TestWatchEnds(t *testing.T) {
	c, err := dlock.New(memdlock.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(dlocktest.Ctx(t))
	released, err := c.Watch(ctx, "k", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Watch(dlocktest.Ctx(t), "k", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	watchEnded(t, released, "the watch whose context ended")
	c.Close()
	watchEnded(t, other, "the watch of a closed Client")
	if _, err := c.Watch(dlocktest.Ctx(t), "k", time.Hour); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Watch on a closed Client = %v; want ErrClosed", err)
	}
}

// watchEnded waits for the watch's channel to close, taking the values before.
func watchEnded(t *testing.T, released <-chan struct{}, what string) {
	t.Helper()
	timeout := time.After(30 * time.Second) // a bound, not a measurement
	for {
		select {
		case _, ok := <-released:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatalf("%s did not end", what)
		}
	}
}

func TestWatchBadInput(t *testing.T) {
	c, err := dlock.New(memdlock.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := dlocktest.Ctx(t)
	for _, tc := range []struct {
		name, arg string
		ctx       context.Context
		key       string
		poll      time.Duration
	}{
		{"nil context", "ctx", nil, "k", time.Second},
		{"empty key", "key", ctx, "", time.Second},
		{"key with NUL", "key", ctx, "a\x00", time.Second},
		{"zero poll", "poll", ctx, "k", 0},
		{"negative poll", "poll", ctx, "k", -time.Second},
	} {
		var ae *dlock.ArgError
		if _, err := c.Watch(tc.ctx, tc.key, tc.poll); !errors.As(err, &ae) || ae.Name != tc.arg {
			t.Errorf("%s: %v; want an *ArgError for %s", tc.name, err, tc.arg)
		}
	}
}

// Wait until another holder of a key releases it, without taking it.
func ExampleClient_Watch() {
	ctx := context.Background()
	client, err := dlock.New(memdlock.New())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	l, err := client.Lock(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	released, err := client.Watch(wctx, "report", time.Second)
	if err != nil {
		log.Fatal(err)
	}
	go l.Release(ctx) // elsewhere, the holder is done
	for range released {
		// Look again: a value may also mean "poll now".
		if hs, err := client.Holders(ctx, "report"); err == nil && len(hs) == 0 {
			fmt.Println("report is free")
			break
		}
	}
	// Output: report is free
}
