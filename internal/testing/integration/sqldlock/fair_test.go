package sqldlock_test

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/dlockhq/dlock/driver"
	. "github.com/dlockhq/dlock/sqldlock"
)

// forEachMode runs fn as a parallel subtest per dialect and driver mode
// (default and fair), on a fresh database; open returns a new driver of the
// mode over it.
func forEachMode(t *testing.T, fn func(t *testing.T, fair bool, open func() *Driver)) {
	for _, d := range dialects {
		for _, m := range driverModes {
			t.Run(d.String()+m.suffix, func(t *testing.T) {
				t.Parallel()
				s := newStore(t, d)
				fn(t, m.params != nil, func() *Driver { return s.open(t, m.params...) })
			})
		}
	}
}

// forEachFair is forEachMode for fair drivers only.
func forEachFair(t *testing.T, fn func(t *testing.T, open func() *Driver)) {
	forEachMode(t, func(t *testing.T, fair bool, open func() *Driver) {
		if !fair {
			return
		}
		if d := open(); !d.Capabilities().FIFO {
			t.Fatal("a fair driver does not declare FIFO")
		}
		fn(t, open)
	})
}

// queued returns a request of key that waits in the queue.
func queued(key string, ttl time.Duration, m driver.Mode, limit int) driver.Request {
	r := req(key, ttl)
	r.Mode, r.Limit, r.Queue = m, limit, true
	return r
}

// mustWait checks that r is not acquired (and, with r.Queue, that its owner
// now has its place in the queue).
func mustWait(t *testing.T, d driver.Driver, r driver.Request, who string) {
	t.Helper()
	if res, err := d.Acquire(tctx(t), r); err != nil || res.Acquired {
		if res.Acquired {
			d.Release(tctx(t), r)
		}
		t.Fatalf("%s: Acquire = %+v, %v; want not acquired", who, res, err)
	}
}

// mustRelease releases r and fails t if that fails.
func mustRelease(t *testing.T, d driver.Driver, r driver.Request) {
	t.Helper()
	if err := d.Release(tctx(t), r); err != nil {
		t.Fatalf("Release(%q): %v", r.Key, err)
	}
}

// mustBeEmpty checks that the store keeps no row for key.
func mustBeEmpty(t *testing.T, d *Driver, key string) {
	t.Helper()
	if n, err := d.Count(tctx(t), key); err != nil || n != 0 {
		t.Errorf("Count(%q) = %d, %v; want 0", key, n, err)
	}
}

// entry is a row of the lock table or the holds table: its owner and
// whether its lease is live.
type entry struct {
	owner string
	live  bool
}

// rowsOf reads key's rows in d's table with the suffix ("" for the lock
// table, "_holds" for the holds table), on the database's clock.
func rowsOf(t *testing.T, d *Driver, suffix, key string) (es []entry) {
	t.Helper()
	v, ok := driverStores.Load(d)
	if !ok {
		t.Fatal("the driver was not opened by store.open")
	}
	s := v.(store)
	db, err := sql.Open(s.sqlName, s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := map[Dialect]string{
		SQLite:   `CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER)`,
		Postgres: `clock_timestamp()`,
		MySQL:    `UTC_TIMESTAMP(6)`,
	}[s.dialect]
	param := map[Dialect]string{Postgres: "$1"}[s.dialect]
	if param == "" {
		param = "?"
	}
	rows, err := db.QueryContext(tctx(t), `SELECT owner, expires_at > `+now+` FROM `+s.dialect.Quote(DefaultTable+suffix)+` WHERE lock_key = `+param, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var e entry
		if err := rows.Scan(&e.owner, &e.live); err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return es
}

// entries reads key's holds-table rows.
func entries(t *testing.T, d *Driver, key string) []entry {
	t.Helper()
	return rowsOf(t, d, "_holds", key)
}

// mainRow reads key's lock-table row: its owner and whether it is live.
func mainRow(t *testing.T, d *Driver, key string) (owner string, live bool) {
	t.Helper()
	if es := rowsOf(t, d, "", key); len(es) > 0 {
		return es[0].owner, es[0].live
	}
	return "(none)", false
}

// waitUntil polls cond until it holds: the tests below wait for leases to
// end on the database's clock.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSemaphoreWaitersKeepKey checks that a key that only semaphore waiters
// wait for (its permits have all been released) is still in use as a
// semaphore: an Exclusive or Shared request fails with ErrModeMismatch, as
// the driver contract and memdlock have it, and does not take the key.
func TestSemaphoreWaitersKeepKey(t *testing.T) {
	forEachMode(t, func(t *testing.T, fair bool, open func() *Driver) {
		a, b := open(), open()
		ctx := tctx(t)
		permit := queued("sem", time.Minute, driver.Semaphore, 1)
		permit.Queue = false
		mustAcquire(t, a, permit)
		waiter := queued("sem", time.Minute, driver.Semaphore, 1)
		mustWait(t, b, waiter, "semaphore waiter")
		mustRelease(t, a, permit)
		for _, r := range []driver.Request{req("sem", time.Minute), queued("sem", time.Minute, driver.Exclusive, 0),
			queued("sem", time.Minute, driver.Shared, 0)} {
			res, err := a.Acquire(ctx, r)
			if !errors.Is(err, driver.ErrModeMismatch) {
				if res.Acquired {
					a.Release(ctx, r)
				}
				t.Errorf("%s Acquire (queue %v) on a key only a semaphore waiter waits for = %+v, %v; want ErrModeMismatch",
					r.Mode, r.Queue, res, err)
			}
		}
		mustAcquire(t, b, waiter)
		mustRelease(t, b, waiter)
		mustBeEmpty(t, a, "sem")
	})
}

// TestFairOrder checks at the driver level that a fair driver admits
// waiters in the order they queued, in every mode, and that no newcomer,
// queued or not, passes them, not even while the key is free and the first
// waiter has not yet come back: the release of the hold leaves a live
// marker, which keeps out v1 clients too.
func TestFairOrder(t *testing.T) {
	forEachFair(t, func(t *testing.T, open func() *Driver) {
		d, other := open(), open()

		t.Run("exclusive", func(t *testing.T) {
			holder := req("x", time.Minute)
			mustAcquire(t, d, holder)
			w1, w2 := queued("x", time.Minute, driver.Exclusive, 0), queued("x", time.Minute, driver.Exclusive, 0)
			mustWait(t, d, w1, "first waiter")
			mustWait(t, other, w2, "second waiter")
			mustRelease(t, d, holder) // the key is free, but kept for w1
			if owner, live := mainRow(t, d, "x"); owner != "" || !live {
				t.Errorf("lock-table row after the release: owner %q, live %v; want a live marker", owner, live)
			}
			mustWait(t, other, w2, "second waiter after the release")
			mustWait(t, d, req("x", time.Minute), "newcomer")
			late := queued("x", time.Minute, driver.Exclusive, 0)
			mustWait(t, other, late, "queued newcomer")
			mustAcquire(t, d, w1)
			mustWait(t, other, w2, "second waiter while the first holds")
			mustRelease(t, d, w1)
			mustWait(t, other, late, "queued newcomer after the first waiter")
			mustAcquire(t, other, w2)
			mustRelease(t, other, w2)
			mustAcquire(t, other, late)
			mustRelease(t, other, late)
			mustBeEmpty(t, d, "x")
		})

		t.Run("semaphore", func(t *testing.T) {
			p1, p2 := queued("s", time.Minute, driver.Semaphore, 2), queued("s", time.Minute, driver.Semaphore, 2)
			mustAcquire(t, d, p1)
			mustAcquire(t, d, p2)
			w := queued("s", time.Minute, driver.Semaphore, 2)
			mustWait(t, other, w, "semaphore waiter")
			mustRelease(t, d, p1) // one permit free, kept for w
			newcomer := queued("s", time.Minute, driver.Semaphore, 2)
			newcomer.Queue = false
			mustWait(t, d, newcomer, "semaphore newcomer")
			mustAcquire(t, other, w)
			mustRelease(t, d, p2)
			mustAcquire(t, d, newcomer)
			mustRelease(t, d, newcomer)
			mustRelease(t, other, w)
			mustBeEmpty(t, d, "s")
		})

		t.Run("shared", func(t *testing.T) {
			writer := req("rw", time.Minute)
			mustAcquire(t, d, writer)
			r1 := queued("rw", time.Minute, driver.Shared, 0)
			w2 := queued("rw", time.Minute, driver.Exclusive, 0)
			r3 := queued("rw", time.Minute, driver.Shared, 0)
			mustWait(t, other, r1, "first reader")
			mustWait(t, other, w2, "second writer")
			mustWait(t, other, r3, "second reader")
			mustRelease(t, d, writer)
			mustWait(t, other, r3, "reader queued behind a writer")
			mustWait(t, other, w2, "writer queued behind a reader")
			mustAcquire(t, other, r1)
			mustWait(t, other, w2, "writer while a reader holds")
			mustRelease(t, other, r1)
			mustAcquire(t, other, w2)
			mustWait(t, other, r3, "reader while the writer holds")
			mustRelease(t, other, w2)
			mustAcquire(t, other, r3)
			mustRelease(t, other, r3)
			mustBeEmpty(t, d, "rw")
		})
	})
}

// TestFairTakeover checks that a fair driver's takeover of an expired
// hold respects the queue: a waiter queued behind a holder that stopped
// refreshing acquires before any newcomer.
func TestFairTakeover(t *testing.T) {
	forEachFair(t, func(t *testing.T, open func() *Driver) {
		d, other := open(), open()
		holder := req("k", 300*time.Millisecond)
		mustAcquire(t, d, holder)
		w := queued("k", time.Minute, driver.Exclusive, 0)
		mustWait(t, other, w, "waiter")
		waitUntil(t, "the holder's lease to end", func() bool {
			hs, err := d.List(tctx(t), "k")
			return err == nil && len(hs) == 0
		})
		mustWait(t, d, req("k", time.Minute), "newcomer after the holder's lease")
		mustWait(t, d, holder, "the expired holder")
		late := queued("k", time.Minute, driver.Exclusive, 0)
		mustWait(t, d, late, "queued newcomer after the holder's lease")
		mustAcquire(t, other, w)
		mustRelease(t, other, w)
		mustAcquire(t, d, late)
		mustRelease(t, d, late)
		if err := d.Release(tctx(t), holder); !errors.Is(err, driver.ErrNotOwner) {
			t.Errorf("Release by the expired holder = %v; want ErrNotOwner", err)
		}
		mustBeEmpty(t, d, "k")
	})
}

// TestPlaceLost checks that a waiter whose queue entry's lease ended is told
// so (ErrNotOwner) instead of being queued again at the back, on a fair
// driver even once the key has become free, that the record of its lost
// place holds nobody up, and that it goes with its owner's Release.
func TestPlaceLost(t *testing.T) {
	forEachMode(t, func(t *testing.T, fair bool, open func() *Driver) {
		d, other := open(), open()
		ctx := tctx(t)
		for _, first := range []string{"waiter", "holder"} {
			key := "lost-" + first + "-first"
			holder := req(key, time.Minute)
			mustAcquire(t, d, holder)
			w := queued(key, 300*time.Millisecond, driver.Exclusive, 0)
			mustWait(t, other, w, "short-lived waiter")
			next := queued(key, time.Minute, driver.Exclusive, 0)
			mustWait(t, d, next, "second waiter")
			waitUntil(t, "the waiter's entry to expire", func() bool {
				for _, e := range entries(t, d, key) {
					if e.owner == w.Owner {
						return !e.live
					}
				}
				t.Fatal("the waiter's entry vanished")
				return true
			})
			lost := func(when string) {
				t.Helper()
				for range 2 {
					if res, err := other.Acquire(ctx, w); !errors.Is(err, driver.ErrNotOwner) {
						t.Fatalf("Acquire with Queue after the entry's lease (%s) = %+v, %v; want ErrNotOwner", when, res, err)
					}
				}
			}
			switch first {
			case "waiter":
				lost("the key held")
				if err := other.Release(ctx, w); !errors.Is(err, driver.ErrNotOwner) {
					t.Errorf("Release of an expired entry = %v; want ErrNotOwner", err)
				}
				if n, err := d.Count(ctx, key); err != nil || n != 2 {
					t.Errorf("Count after the lost waiter's Release = %d, %v; want 2 (the holder and the waiter)", n, err)
				}
				mustRelease(t, d, holder)
				mustAcquire(t, d, next) // the lost place held nobody up
			case "holder":
				mustRelease(t, d, holder)
				if fair {
					// The key is kept for next: w is told of its
					// lost place, not admitted.
					lost("the key free")
				}
				mustAcquire(t, d, next)
				lost("the key held by the next waiter")
				if err := other.Release(ctx, w); !errors.Is(err, driver.ErrNotOwner) {
					t.Errorf("Release of an expired entry = %v; want ErrNotOwner", err)
				}
			}
			mustRelease(t, d, next)
			mustBeEmpty(t, d, key)
		}
		if !fair {
			return
		}
		// A fair driver tells the waiter even if nobody else wants the
		// key any more, as memdlock does.
		holder := req("lost-alone", time.Minute)
		mustAcquire(t, d, holder)
		w := queued("lost-alone", 300*time.Millisecond, driver.Exclusive, 0)
		mustWait(t, other, w, "short-lived waiter")
		waitUntil(t, "the waiter's entry to expire", func() bool {
			es := entries(t, d, "lost-alone")
			return len(es) == 1 && !es[0].live
		})
		mustRelease(t, d, holder)
		if res, err := other.Acquire(ctx, w); !errors.Is(err, driver.ErrNotOwner) {
			t.Fatalf("Acquire with Queue of a free key after the entry's lease = %+v, %v; want ErrNotOwner", res, err)
		}
		if err := other.Release(ctx, w); !errors.Is(err, driver.ErrNotOwner) {
			t.Errorf("Release of an expired entry = %v; want ErrNotOwner", err)
		}
		mustBeEmpty(t, d, "lost-alone")
	})
}

// TestSQLiteGate checks that two fair SQLite drivers a process opens by URL
// on one file, which share its write gate, queue a waiter of one behind the
// holder of the other, and that closing them, one twice, is clean.
func TestSQLiteGate(t *testing.T) {
	s := newStore(t, SQLite)
	a, b := s.open(t, "fair=1"), s.open(t, "fair=1")
	r := queued("k", time.Minute, driver.Exclusive, 0)
	mustAcquire(t, a, r)
	w := queued("k", time.Minute, driver.Exclusive, 0)
	mustWait(t, b, w, "waiter")
	mustRelease(t, a, r)
	mustAcquire(t, b, w)
	mustRelease(t, b, w)
	a.Close()
	b.Close()
	b.Close()
}
