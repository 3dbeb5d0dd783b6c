package redisdlock_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// commandStats returns the calls of each command on a server since its
// stats were last reset (INFO commandstats; commands that scripts run are
// counted too), and resets them.
func commandStats(ctx context.Context, t testing.TB, rdb *redis.Client) map[string]int {
	t.Helper()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for line := range strings.SplitSeq(info, "\n") {
		// cmdstat_get:calls=1,usec=2,...
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for f := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.Atoi(v)
				calls[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	// The INFO and CONFIG RESETSTAT of the previous call, if any.
	delete(calls, "info")
	delete(calls, "config|resetstat")
	return calls
}

// TestFastPathCommands counts the commands an uncontended Lock and Release
// run on the server, scripts' commands included: the fast path of the
// simple form (see "Scripts" in the package documentation) reads the
// owner, takes a token and writes the hash with its lease to lock, and
// compares the owner, deletes the hash and publishes the release to
// unlock, looking up no queue entry for a waiter that has never queued. A
// server of its own keeps other tests' commands out.
func TestFastPathCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := testsrv.StartRedis(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	rdb := newClient(srv.Addr)
	defer rdb.Close()
	c, err := dlock.New(openURL(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const pairs = 20
	pair := func(i int) {
		l, err := c.Lock(ctx, fmt.Sprintf("fast-%d", i%4))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pair(-1) // loads the scripts
	commandStats(ctx, t, rdb)
	for i := range pairs {
		pair(i)
	}
	got := commandStats(ctx, t, rdb)
	want := map[string]int{
		"evalsha": 2 * pairs,
		"hget":    2 * pairs, // acquire and release: the owner
		"incr":    pairs,     // acquire: the token
		"hset":    pairs,
		"pexpire": pairs,
		"del":     pairs, // release
		"publish": pairs, // release: for waiters that do not queue and for observers
	}
	total := 0
	for name, n := range got {
		total += n
		if n != want[name] {
			t.Errorf("%s: %d calls for %d lock/unlock pairs, want %d", name, n, pairs, want[name])
		}
	}
	t.Logf("%d commands for %d lock/unlock pairs (%.1f a pair, scripts included): %v", total, pairs, float64(total)/pairs, got)
}

// TestRaiseToken checks that RaiseToken raises the fencing counter of a
// lock, so that the next hold's token is larger, never lowers it, and
// leaves a hold alone, in every protocol.
func TestRaiseToken(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	for _, mode := range []string{"script", "tx", "legacy"} {
		t.Run(mode, func(t *testing.T) {
			d := openURL(t, withParams(srv.URL, "prefix", testPrefix(t), "mode", mode))
			defer d.Close()
			ctx := testCtx(t)
			a := request("k", time.Minute)
			first := mustAcquire(t, d, a, true).Token
			if err := d.RaiseToken(ctx, "k", first+10); err != nil {
				t.Fatal(err)
			}
			// The hold is untouched.
			if res := mustAcquire(t, d, a, true); res.Token != first {
				t.Errorf("the holder's token after the raise = %d; want %d", res.Token, first)
			}
			if err := d.Refresh(ctx, a); err != nil {
				t.Errorf("Refresh after the raise: %v", err)
			}
			if err := d.Release(ctx, a); err != nil {
				t.Fatal(err)
			}
			// A smaller value changes nothing.
			if err := d.RaiseToken(ctx, "k", first+1); err != nil {
				t.Fatal(err)
			}
			b := request("k", time.Minute)
			if res := mustAcquire(t, d, b, true); res.Token != first+11 {
				t.Errorf("token after raising to %d = %d; want %d", first+10, res.Token, first+11)
			}
			d.Release(ctx, b)

			// Past 2^53, where doubles no longer tell neighbours apart,
			// the counter is still compared exactly.
			const big = 1 << 53
			for _, raise := range []uint64{big, big + 1, big} {
				if err := d.RaiseToken(ctx, "k", raise); err != nil {
					t.Fatal(err)
				}
			}
			if res := mustAcquire(t, d, b, true); res.Token != big+2 {
				t.Errorf("token after raising to %d, %d and %d = %d; want %d", uint64(big), uint64(big+1), uint64(big), res.Token, uint64(big+2))
			}
			d.Release(ctx, b)
		})
	}
}

// TestReleaseCommands counts the commands of a release of a lock in the
// general form (see "Scripts" in the package documentation), scripts'
// commands included: one that hands the lock to the only waiter, and one
// that leaves nobody holding or waiting (the waiter gave up). Neither
// removes a hold that the next step deletes with its keys, nor looks for
// holders or waiters it knows are not there.
func TestReleaseCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := testsrv.StartRedis(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	rdb := newClient(srv.Addr)
	defer rdb.Close()
	d := openURL(t, srv.URL)
	defer d.Close()
	warm := request("warm-up", time.Minute) // loads the scripts
	mustAcquire(t, d, queued(warm, driver.Exclusive, 0), true)
	if err := d.Release(ctx, warm); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name   string
		giveUp bool // the waiter releases its queue entry first
		holder string
		want   map[string]int
	}{
		{"handoff", false, "b", map[string]int{
			"evalsha": 1, "hget": 1, "time": 1,
			"zrange":        2,             // the holds that end first, the head of the queue
			"zscore":        2,             // the releaser's queue entry, the head's
			"zrangebyscore": 1, "hmget": 1, // expired queue entries, the head's fields
			"incr": 1, "zrem": 1, "del": 1, "hset": 1, "pexpire": 1, "publish": 1,
		}},
		{"nobody-left", true, "", map[string]int{
			"evalsha": 1, "hget": 1, "time": 1,
			"zrange": 2, "zscore": 1, "zrangebyscore": 1, "del": 1, "publish": 1,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "general-" + c.name
			a, b := request(key, time.Minute), queued(request(key, time.Minute), driver.Exclusive, 0)
			a.Owner, b.Owner = "a", "b"
			mustAcquire(t, d, queued(a, driver.Exclusive, 0), true)
			mustAcquire(t, d, b, false)
			if c.giveUp {
				if err := d.Release(ctx, b); err != nil {
					t.Fatal(err)
				}
			}
			commandStats(ctx, t, rdb)
			if err := d.Release(ctx, a); err != nil {
				t.Fatal(err)
			}
			got := commandStats(ctx, t, rdb)
			for name := range got {
				if _, ok := c.want[name]; !ok {
					c.want[name] = 0
				}
			}
			for name, n := range c.want {
				if got[name] != n {
					t.Errorf("%s: %d calls, want %d (all: %v)", name, got[name], n, got)
				}
			}
			hs, err := d.List(ctx, key)
			var owners []string
			for _, h := range hs {
				owners = append(owners, h.Owner)
			}
			if want := strings.Fields(c.holder); err != nil || !slices.Equal(owners, want) {
				t.Errorf("the holders after the release: %q, %v; want %q", owners, err, want)
			}
			if c.holder != "" {
				d.Release(ctx, b)
			}
		})
	}
}
