package redisdlock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/redisdlock"
)

// modeServers are the servers the mode tests run on: the scripts must keep
// every key of a lock in one Cluster slot.
var modeServers = []string{testsrv.Redis, testsrv.RedisCluster}

func queued(r driver.Request, m driver.Mode, limit int) driver.Request {
	r.Mode, r.Limit, r.Queue = m, limit, true
	return r
}

func mustAcquire(t *testing.T, d driver.Driver, req driver.Request, want bool) driver.Result {
	t.Helper()
	res, err := d.Acquire(testCtx(t), req)
	if err != nil || res.Acquired != want {
		t.Fatalf("Acquire(%s, queue %v) = %+v, %v; want acquired %v", req.Mode, req.Queue, res, err, want)
	}
	return res
}

// hashFields returns the fields of the lock hash of key.
func hashFields(t *testing.T, d *redisdlock.Driver, prefix, key string) []string {
	t.Helper()
	m, err := d.Client().HGetAll(testCtx(t), "{"+prefix+key+"}").Result()
	if err != nil {
		t.Fatal(err)
	}
	var fs []string
	for f := range m {
		fs = append(fs, f)
	}
	slices.Sort(fs)
	return fs
}

// TestSimpleForm checks that an uncontended exclusive lock stays in the
// simple form the fast path handles (one hash, three fields, no other
// keys), and that a lock returns to it once its queue has drained.
func TestSimpleForm(t *testing.T) {
	for _, name := range modeServers {
		t.Run(name, func(t *testing.T) {
			srv := testsrv.Get(t, name)
			prefix := testPrefix(t)
			d := openURL(t, withParams(srv.URL, "prefix", prefix))
			defer d.Close()
			ctx := testCtx(t)
			simple := []string{"info", "owner", "token"}
			check := func(when string, simple []string) {
				t.Helper()
				if fs := hashFields(t, d, prefix, "k"); !slices.Equal(fs, simple) {
					t.Errorf("%s: hash fields %v; want %v", when, fs, simple)
				}
				for _, suffix := range []string{":holders", ":queue"} {
					if n, err := d.Client().Exists(ctx, "{"+prefix+"k}"+suffix).Result(); err != nil || n != 0 {
						t.Errorf("%s: %s exists (%d, %v)", when, suffix, n, err)
					}
				}
			}
			a := queued(request("k", time.Minute), driver.Exclusive, 0)
			mustAcquire(t, d, a, true)
			check("uncontended", simple)
			b := queued(request("k", time.Minute), driver.Exclusive, 0)
			mustAcquire(t, d, b, false) // queues: the general form
			if fs := hashFields(t, d, prefix, "k"); slices.Contains(fs, "token") {
				t.Errorf("with a waiter: hash fields %v; want the general form", fs)
			}
			if n, err := d.Count(ctx, ""); err != nil || n != 2 {
				t.Errorf("Count with a holder and a waiter = %d, %v; want 2", n, err)
			}
			if err := d.Refresh(ctx, a); err != nil {
				t.Errorf("Refresh of the holder in the general form: %v", err)
			}
			if hs, err := d.List(ctx, ""); err != nil || len(hs) != 1 || hs[0].Owner != a.Owner || hs[0].Mode != driver.Exclusive {
				t.Errorf("List = %+v, %v; want the exclusive holder", hs, err)
			}
			if err := d.Release(ctx, a); err != nil {
				t.Fatal(err)
			}
			// A newcomer does not pass the waiter.
			mustAcquire(t, d, request("k", time.Minute), false)
			mustAcquire(t, d, b, true)
			// Waiters that do not queue may have come by unseen while
			// the lock was in the general form: l makes the release
			// publish for them.
			check("after the queue drained", []string{"info", "l", "owner", "token"})
			if err := d.Release(ctx, b); err != nil {
				t.Fatal(err)
			}
			if n, err := d.Count(ctx, ""); err != nil || n != 0 {
				t.Errorf("Count = %d, %v; want 0", n, err)
			}
		})
	}
}

// TestQueueOrder checks the FIFO queue across modes: a reader queued behind
// a writer waits for it, a writer queued behind readers waits for them
// all, and a semaphore admits in order.
func TestQueueOrder(t *testing.T) {
	for _, name := range modeServers {
		t.Run(name, func(t *testing.T) {
			srv := testsrv.Get(t, name)
			d := openURL(t, withParams(srv.URL, "prefix", testPrefix(t)))
			defer d.Close()
			ctx := testCtx(t)
			r1 := queued(request("k", time.Minute), driver.Shared, 0)
			w1 := queued(request("k", time.Minute), driver.Exclusive, 0)
			r2 := queued(request("k", time.Minute), driver.Shared, 0)
			r3 := queued(request("k", time.Minute), driver.Shared, 0)
			w2 := queued(request("k", time.Minute), driver.Exclusive, 0)
			t1 := mustAcquire(t, d, r1, true).Token
			mustAcquire(t, d, w1, false)
			mustAcquire(t, d, r2, false) // behind the writer
			mustAcquire(t, d, r3, false)
			mustAcquire(t, d, w2, false)
			if err := d.Release(ctx, r1); err != nil {
				t.Fatal(err)
			}
			mustAcquire(t, d, r2, false) // still behind the writer
			tw := mustAcquire(t, d, w1, true).Token
			if tw <= t1 {
				t.Errorf("writer's token %d after reader's %d", tw, t1)
			}
			if err := d.Release(ctx, w1); err != nil {
				t.Fatal(err)
			}
			mustAcquire(t, d, w2, false) // behind the readers
			mustAcquire(t, d, r3, true)  // readers do not wait for readers
			mustAcquire(t, d, r2, true)
			mustAcquire(t, d, w2, false)
			for _, r := range []driver.Request{r2, r3} {
				if err := d.Release(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			mustAcquire(t, d, w2, true)
			if err := d.Release(ctx, w2); err != nil {
				t.Fatal(err)
			}

			s := make([]driver.Request, 4)
			for i := range s {
				s[i] = queued(request("s", time.Minute), driver.Semaphore, 2)
			}
			mustAcquire(t, d, s[0], true)
			mustAcquire(t, d, s[1], true)
			mustAcquire(t, d, s[2], false)
			mustAcquire(t, d, s[3], false)
			if err := d.Release(ctx, s[0]); err != nil {
				t.Fatal(err)
			}
			mustAcquire(t, d, s[3], false) // behind s[2]
			mustAcquire(t, d, s[2], true)
			if n, err := d.ForceRelease(ctx, "s"); err != nil || n != 2 {
				t.Errorf("ForceRelease = %d, %v; want the 2 permits", n, err)
			}
			if n, err := d.Count(ctx, ""); err != nil || n != 0 {
				t.Errorf("Count = %d, %v; want 0", n, err)
			}
		})
	}
}

// TestLostPlace checks that a waiter whose queue entry expired learns it
// instead of queueing again at the back.
func TestLostPlace(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	d := openURL(t, withParams(srv.URL, "prefix", testPrefix(t)))
	defer d.Close()
	ctx := testCtx(t)
	holder := request("k", time.Minute)
	mustAcquire(t, d, holder, true)
	w := queued(request("k", 50*time.Millisecond), driver.Exclusive, 0)
	mustAcquire(t, d, w, false)
	// The entry's lease ends on the server's clock; nothing signals it.
	time.Sleep(100 * time.Millisecond)
	if res, err := d.Acquire(ctx, w); !errors.Is(err, driver.ErrNotOwner) {
		t.Fatalf("Acquire after the queue entry expired = %+v, %v; want ErrNotOwner", res, err)
	}
	if err := d.Release(ctx, w); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("Release of the expired entry = %v; want ErrNotOwner", err)
	}
	// The same when the lock is free by the time the waiter returns.
	w2 := queued(request("k", 50*time.Millisecond), driver.Exclusive, 0)
	mustAcquire(t, d, w2, false)
	time.Sleep(100 * time.Millisecond)
	if err := d.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	if res, err := d.Acquire(ctx, w2); !errors.Is(err, driver.ErrNotOwner) {
		t.Fatalf("Acquire of a free lock after the queue entry expired = %+v, %v; want ErrNotOwner", res, err)
	}
	if n, err := d.Count(ctx, ""); err != nil || n != 0 {
		t.Errorf("Count = %d, %v; want 0", n, err)
	}
	// Once released, the owner may queue afresh.
	mustAcquire(t, d, w, true)
	d.Release(ctx, w)
}

// TestTransactionInGeneralForm checks that a hold taken in Transaction
// mode stays refreshable and releasable after a Script waiter queued behind
// it, and that Transaction mode sees readers as holders.
func TestTransactionInGeneralForm(t *testing.T) {
	for _, name := range modeServers {
		t.Run(name, func(t *testing.T) {
			srv := testsrv.Get(t, name)
			prefix := testPrefix(t)
			script := openURL(t, withParams(srv.URL, "prefix", prefix))
			defer script.Close()
			tx := openURL(t, withParams(srv.URL, "prefix", prefix, "mode", "tx"))
			defer tx.Close()
			ctx := testCtx(t)
			h := request("k", time.Minute)
			tok := mustAcquire(t, tx, h, true).Token
			w := queued(request("k", time.Minute), driver.Exclusive, 0)
			mustAcquire(t, script, w, false)
			if res := mustAcquire(t, tx, h, true); res.Token != tok {
				t.Errorf("re-acquire in the general form: token %d; want %d", res.Token, tok)
			}
			if err := tx.Refresh(ctx, h); err != nil {
				t.Errorf("Refresh in Transaction mode: %v", err)
			}
			if err := tx.Release(ctx, h); err != nil {
				t.Fatalf("Release in Transaction mode: %v", err)
			}
			mustAcquire(t, tx, request("k", time.Minute), false) // the waiter's turn
			mustAcquire(t, script, w, true)
			if err := script.Release(ctx, w); err != nil {
				t.Fatal(err)
			}

			r := request("k", time.Minute)
			r.Mode = driver.Shared
			mustAcquire(t, script, r, true)
			mustAcquire(t, tx, request("k", time.Minute), false)
			if n, err := tx.ForceRelease(ctx, "k"); err != nil || n != 1 {
				t.Errorf("ForceRelease in Transaction mode = %d, %v; want 1", n, err)
			}
			if n, err := script.Count(ctx, ""); err != nil || n != 0 {
				t.Errorf("Count = %d, %v; want 0", n, err)
			}
		})
	}
}

// TestReadWriteContention runs readers and writers of several clients on
// one key: a writer is never inside with anyone else, and readers do get in
// together.
func TestReadWriteContention(t *testing.T) {
	for _, name := range modeServers {
		t.Run(name, func(t *testing.T) {
			srv := testsrv.Get(t, name)
			prefix := testPrefix(t)
			ctx := testCtx(t)
			var (
				readers, writers atomic.Int32
				mostReaders      atomic.Int32
				wg               sync.WaitGroup
			)
			for c := range 3 {
				cl, err := dlock.New(openURL(t, withParams(srv.URL, "prefix", prefix)))
				if err != nil {
					t.Fatal(err)
				}
				defer cl.Close()
				for g := range 4 {
					write := (c+g)%3 == 0
					wg.Go(func() {
						for range 10 {
							var opts []dlock.LockOption
							if !write {
								opts = append(opts, dlock.Shared())
							}
							l, err := cl.Lock(ctx, "k", append(opts, dlock.WithTTL(time.Minute))...)
							if err != nil {
								t.Error(err)
								return
							}
							if write {
								if writers.Add(1) != 1 || readers.Load() != 0 {
									t.Error("a writer is not alone")
								}
								time.Sleep(time.Millisecond)
								writers.Add(-1)
							} else {
								n := readers.Add(1)
								if writers.Load() != 0 {
									t.Error("a reader with a writer")
								}
								for m := mostReaders.Load(); n > m && !mostReaders.CompareAndSwap(m, n); m = mostReaders.Load() {
								}
								time.Sleep(time.Millisecond)
								readers.Add(-1)
							}
							if err := l.Release(ctx); err != nil {
								t.Error(err)
								return
							}
						}
					})
				}
			}
			wg.Wait()
			t.Logf("at most %d readers at once", mostReaders.Load())
			d := openURL(t, withParams(srv.URL, "prefix", prefix))
			defer d.Close()
			if n, err := d.Count(context.Background(), ""); err != nil || n != 0 {
				t.Errorf("Count = %d, %v; want 0", n, err)
			}
		})
	}
}
