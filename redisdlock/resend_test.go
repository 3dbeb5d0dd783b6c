package redisdlock_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/redisdlock"
)

// TestScriptNotResent checks that a script whose reply comes too late is not
// sent again, even by a client that resends commands after a network error
// (go-redis's defaults: MaxRetries 3, and MaxRedirects 3 on a Cluster): the
// server has run it, and a release run twice reports "not held" for the
// lock it released. The reply of a Release is held back past the client's
// read timeout, and the server counts the scripts it ran.
func TestScriptNotResent(t *testing.T) {
	const readTimeout = time.Second
	for _, kind := range []string{testsrv.Redis, testsrv.RedisCluster} {
		t.Run(kind, func(t *testing.T) {
			srv := testsrv.Get(t, kind)
			ctx := testCtx(t)
			prefix := testPrefix(t)
			dial, ps := proxies(t, srv.Addrs)
			var c redis.UniversalClient
			if kind == testsrv.RedisCluster {
				c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: srv.Addrs, Dialer: dial, ReadTimeout: readTimeout})
			} else {
				c = redis.NewClient(&redis.Options{Addr: srv.Addr, Dialer: dial, ReadTimeout: readTimeout})
			}
			d, err := redisdlock.New(c, redisdlock.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			defer ownedDriver{d, c}.Close()
			// A driver that runs no scripts watches the lock.
			watcher := openURL(t, withParams(srv.URL, "prefix", prefix, "mode", "tx"))
			defer watcher.Close()
			direct := make([]*redis.Client, len(srv.Addrs))
			for i, addr := range srv.Addrs {
				direct[i] = newClient(addr)
				defer direct[i].Close()
			}
			// The server learns the scripts, so that a Release is one
			// EVALSHA.
			warm := request("k", time.Minute)
			if _, err := d.Acquire(ctx, warm); err != nil {
				t.Fatal(err)
			}
			if err := d.Release(ctx, warm); err != nil {
				t.Fatal(err)
			}
			for attempt := 1; ; attempt++ {
				req := request("k", time.Minute)
				if res, err := d.Acquire(ctx, req); err != nil || !res.Acquired {
					t.Fatalf("Acquire = %+v, %v", res, err)
				}
				for _, dc := range direct {
					if err := dc.ConfigResetStat(ctx).Err(); err != nil {
						t.Fatal(err)
					}
				}
				// Every byte is delivered 0.7 read timeouts late: the
				// release reaches the server in time, and its reply
				// would come back after the client gave up. Once the
				// server has released the lock, what follows is no
				// longer delayed.
				for _, p := range ps {
					p.SetDelay(readTimeout * 7 / 10)
				}
				released := make(chan error, 1)
				go func() { released <- d.Release(ctx, req) }()
				var err error
				for gone := false; !gone; {
					select {
					case err = <-released:
						gone = true
					case <-time.After(5 * time.Millisecond):
						_, rerr := watcher.ReadHold(ctx, "k", req.Owner)
						gone = errors.Is(rerr, driver.ErrNotOwner)
					}
				}
				for _, p := range ps {
					p.SetDelay(0)
				}
				if err == nil {
					err = <-released
				}
				if err == nil {
					// The proxy read the reply after the delay was
					// lifted: it came in time.
					if attempt == 3 {
						t.Fatal("Release returned in time three times; want a late reply")
					}
					continue
				}
				runs := 0
				for _, dc := range direct {
					info, err := dc.Info(ctx, "commandstats").Result()
					if err != nil {
						t.Fatal(err)
					}
					runs += calls(info, "evalsha") + calls(info, "eval")
				}
				if runs != 1 {
					t.Errorf("the server ran the release script %d times (Release = %v); want once", runs, err)
				}
				return
			}
		})
	}
}

// calls returns the number of calls of cmd in an INFO commandstats reply.
func calls(info, cmd string) int {
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}
