package sqldlock_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock/driver"
	. "github.com/dlockhq/dlock/sqldlock"
)

// forEach runs fn as a parallel subtest per dialect, on a fresh database.
func forEach(t *testing.T, fn func(t *testing.T, s store)) {
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			fn(t, newStore(t, d))
		})
	}
}

func req(key string, ttl time.Duration) driver.Request {
	return driver.Request{Key: key, Owner: rand.Text(), TTL: ttl, Mode: driver.Exclusive, Info: "sqldlock test"}
}

func tctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t *testing.T, d driver.Driver, r driver.Request) uint64 {
	t.Helper()
	res, err := d.Acquire(tctx(t), r)
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire(%q) = %+v, %v; want acquired", r.Key, res, err)
	}
	return res.Token
}

// TestTokens checks at the driver level that tokens strictly increase per key
// across release, expiry, takeover, forced release and a same-owner
// re-acquire after expiry, and that a live owner's re-acquire keeps its token.
func TestTokens(t *testing.T) {
	forEach(t, func(t *testing.T, s store) {
		a, b := s.open(t), s.open(t)
		ctx := tctx(t)
		const key = "tokens"
		var last uint64
		next := func(d driver.Driver, r driver.Request, how string) {
			t.Helper()
			tok := mustAcquire(t, d, r)
			if tok <= last {
				t.Errorf("%s: token %d after %d", how, tok, last)
			}
			last = tok
		}
		r1 := req(key, time.Minute)
		next(a, r1, "first")
		if tok := mustAcquire(t, b, r1); tok != last {
			t.Errorf("live owner's re-acquire: token %d, want %d", tok, last)
		}
		if err := a.Release(ctx, r1); err != nil {
			t.Fatal(err)
		}
		short := req(key, 50*time.Millisecond)
		next(b, short, "after release")
		time.Sleep(100 * time.Millisecond)
		next(b, short, "same owner after its expiry")
		time.Sleep(100 * time.Millisecond)
		r3 := req(key, time.Minute)
		next(a, r3, "takeover after expiry")
		if err := b.Release(ctx, short); !errors.Is(err, driver.ErrNotOwner) {
			t.Errorf("Release by the expired owner = %v; want ErrNotOwner", err)
		}
		if n, err := b.ForceRelease(ctx, key); err != nil || n != 1 {
			t.Fatalf("ForceRelease = %d, %v; want 1", n, err)
		}
		next(b, req(key, time.Minute), "after forced release")
		// Another key shares the counter: its tokens are larger still.
		next(a, req("other", time.Minute), "other key")
	})
}

// TestContention hammers one key from several drivers at the driver level:
// at most one holder at a time, and every new hold has a larger token. On
// PostgreSQL it also runs with SERIALIZABLE as the default isolation, where
// contention shows as serialization failures, which must be reported as
// "not acquired"; on SQLite also over pools the caller opened (several
// connections each, rollback journal, deferred transactions).
func TestContention(t *testing.T) {
	run := func(t *testing.T, open func() *Driver) {
		drivers := []*Driver{open(), open(), open()}
		var (
			mu     sync.Mutex
			inside bool
			last   uint64
			wins   int
			wg     sync.WaitGroup
		)
		ctx := tctx(t)
		// Contenders spin until the lock has changed hands target times:
		// progress, not speed, is what this checks (the test's context
		// bounds it).
		const target = 30
		more := func() bool {
			mu.Lock()
			defer mu.Unlock()
			return wins < target && ctx.Err() == nil
		}
		for g := range 12 {
			d := drivers[g%len(drivers)]
			wg.Go(func() {
				for more() {
					r := req("hot", time.Minute)
					res, err := d.Acquire(ctx, r)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					if !res.Acquired {
						continue
					}
					mu.Lock()
					if inside {
						t.Errorf("two holders at once")
					}
					if res.Token <= last {
						t.Errorf("token %d after %d", res.Token, last)
					}
					inside, last = true, res.Token
					wins++
					mu.Unlock()
					mu.Lock()
					inside = false
					mu.Unlock()
					if err := d.Release(ctx, r); err != nil {
						t.Errorf("Release: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		if wins < target {
			t.Errorf("only %d acquisitions before the test's deadline; want %d", wins, target)
		}
		if n, err := drivers[0].Count(ctx, ""); err != nil || n != 0 {
			t.Errorf("Count = %d, %v; want 0", n, err)
		}
	}
	forEach(t, func(t *testing.T, s store) {
		run(t, func() *Driver { return s.open(t) })
		switch s.dialect {
		case Postgres:
			t.Run("serializable", func(t *testing.T) {
				s := newStore(t, Postgres)
				run(t, func() *Driver { return s.open(t, "default_transaction_isolation=serializable") })
			})
		case SQLite:
			t.Run("caller pools", func(t *testing.T) {
				s := newStore(t, SQLite)
				run(t, func() *Driver {
					db, err := sql.Open(s.sqlName, s.dsn)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { db.Close() })
					d, err := New(db, SQLite)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { d.Close() })
					return d
				})
			})
		}
	})
}

// TestDatabaseClock checks that leases are measured by the database: a
// foreign owner is told how long the lease has left, the lease ends after
// that long, and on MySQL and PostgreSQL, sessions in different time zones
// agree.
func TestDatabaseClock(t *testing.T) {
	forEach(t, func(t *testing.T, s store) {
		var ea, eb []string
		switch s.dialect {
		case MySQL:
			ea, eb = []string{"time_zone=%27%2B09%3A00%27"}, []string{"time_zone=%27-07%3A00%27"}
		case Postgres:
			ea, eb = []string{"timezone=Asia/Tokyo"}, []string{"timezone=America/Los_Angeles"}
		}
		a, b := s.open(t, ea...), s.open(t, eb...)
		ctx := tctx(t)
		const ttl = 500 * time.Millisecond
		r := req("clock", ttl)
		mustAcquire(t, a, r)
		start := time.Now()
		res, err := b.Acquire(ctx, req("clock", ttl))
		if err != nil || res.Acquired {
			t.Fatalf("foreign Acquire = %+v, %v; want not acquired", res, err)
		}
		if res.RetryAfter <= 0 || res.RetryAfter > ttl {
			t.Errorf("RetryAfter = %v; want within (0, %v]", res.RetryAfter, ttl)
		}
		hs, err := b.List(ctx, "clock")
		if err != nil || len(hs) != 1 {
			t.Fatalf("List = %+v, %v", hs, err)
		}
		if hs[0].TTL <= 0 || hs[0].TTL > ttl || hs[0].Owner != r.Owner || hs[0].Info != r.Info {
			t.Errorf("List = %+v; want owner %s, info %q, TTL within (0, %v]", hs[0], r.Owner, r.Info, ttl)
		}
		if err := a.Refresh(ctx, r); err != nil {
			t.Errorf("Refresh of a live lease: %v", err)
		}
		time.Sleep(time.Until(start.Add(ttl + 100*time.Millisecond)))
		if err := a.Refresh(ctx, r); !errors.Is(err, driver.ErrNotOwner) {
			t.Errorf("Refresh after the lease = %v; want ErrNotOwner", err)
		}
		if hs, err := b.List(ctx, "clock"); err != nil || len(hs) != 0 {
			t.Errorf("List after the lease = %+v, %v; want none", hs, err)
		}
		mustAcquire(t, b, req("clock", ttl))
	})
}

// TestNothingLeftBehind checks Count after releases, expiries and the
// opportunistic cleanup of rows of crashed holders.
func TestNothingLeftBehind(t *testing.T) {
	forEach(t, func(t *testing.T, s store) {
		d := s.open(t)
		ctx := tctx(t)
		var reqs []driver.Request
		for i := range 5 {
			r := req(fmt.Sprintf("held/%d", i), time.Minute)
			mustAcquire(t, d, r)
			reqs = append(reqs, r)
		}
		if n, err := d.Count(ctx, "held/"); err != nil || n != 5 {
			t.Fatalf("Count = %d, %v; want 5", n, err)
		}
		for _, r := range reqs {
			if err := d.Release(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := d.Count(ctx, "held/"); err != nil || n != 0 {
			t.Errorf("Count after release = %d, %v; want 0", n, err)
		}

		// Crashed holders: their rows stay until cleaned up.
		crashed := req("crashed/0", 20*time.Millisecond)
		for i := range 3 {
			r := req(fmt.Sprintf("crashed/%d", i), 20*time.Millisecond)
			if i == 0 {
				r = crashed
			}
			mustAcquire(t, d, r)
		}
		time.Sleep(60 * time.Millisecond)
		if n, err := d.Count(ctx, "crashed/"); err != nil || n != 3 {
			t.Fatalf("Count of expired rows = %d, %v; want 3", n, err)
		}
		if err := d.Release(ctx, crashed); !errors.Is(err, driver.ErrNotOwner) {
			t.Errorf("Release of an expired hold = %v; want ErrNotOwner", err)
		}
		if n, err := d.Count(ctx, "crashed/"); err != nil || n != 2 {
			t.Fatalf("Count after releasing an expired hold = %d, %v; want 2", n, err)
		}
		kept := req("crashed/live", time.Minute)
		mustAcquire(t, d, kept)
		sweeper := s.open(t)
		trigger := req("trigger", time.Minute)
		for deadline := time.Now().Add(10 * time.Second); ; {
			mustAcquire(t, sweeper, trigger) // starts a cleanup
			n, err := d.Count(ctx, "crashed/")
			if err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d rows left 10s after a cleanup was due; want only the live one", n)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := d.Refresh(ctx, kept); err != nil {
			t.Errorf("the live hold after cleanup: %v", err)
		}
	})
}

// TestKeys checks that keys are compared byte by byte (case matters, in
// MySQL too) and that List prefixes are literal (LIKE wildcards and the
// escape character match only themselves).
func TestKeys(t *testing.T) {
	forEach(t, func(t *testing.T, s store) {
		d := s.open(t)
		ctx := tctx(t)
		keys := []string{"Key", "key", "KEY", "a_b", "axb", "a%c", "aXc", "a!d", "é", "e\u0301", strings.Repeat("€", d.Capabilities().MaxKeyLen/3)}
		for _, k := range keys {
			mustAcquire(t, d, req(k, time.Minute))
		}
		for _, tc := range []struct {
			prefix string
			want   []string
		}{
			{"a_", []string{"a_b"}},
			{"a%", []string{"a%c"}},
			{"a!", []string{"a!d"}},
			{"k", []string{"key"}},
			{"é", []string{"é"}},
			{"€€", []string{strings.Repeat("€", d.Capabilities().MaxKeyLen/3)}},
		} {
			hs, err := d.List(ctx, tc.prefix)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range hs {
				got = append(got, h.Key)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("List(%q) = %q; want %q", tc.prefix, got, tc.want)
			}
		}
		hs, err := d.List(ctx, "")
		if err != nil || len(hs) != len(keys) {
			t.Fatalf("List(\"\") = %d holders, %v; want %d", len(hs), err, len(keys))
		}
		for i := 1; i < len(hs); i++ {
			if hs[i-1].Key >= hs[i].Key {
				t.Errorf("List not sorted bytewise: %q before %q", hs[i-1].Key, hs[i].Key)
			}
		}
		if n, err := d.Count(ctx, "a"); err != nil || n != 5 {
			t.Errorf("Count(\"a\") = %d, %v; want 5", n, err)
		}
	})
}

// TestContext checks that a done context makes every call fail with an
// error wrapping the context's error.
func TestContext(t *testing.T) {
	forEach(t, func(t *testing.T, s store) {
		d := s.open(t)
		mustAcquire(t, d, req("warm", time.Minute)) // the schema exists
		cctx, cancel := context.WithCancel(context.Background())
		cancel()
		dctx, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel2()
		for _, c := range []struct {
			ctx  context.Context
			want error
		}{{cctx, context.Canceled}, {dctx, context.DeadlineExceeded}} {
			r := req("ctx", time.Minute)
			_, err := d.Acquire(c.ctx, r)
			errs := []error{err, d.Refresh(c.ctx, r), d.Release(c.ctx, r)}
			_, err = d.List(c.ctx, "")
			errs = append(errs, err)
			_, err = d.ForceRelease(c.ctx, "ctx")
			errs = append(errs, err)
			_, err = d.Count(c.ctx, "")
			errs = append(errs, err, d.CreateSchema(c.ctx))
			_, err = d.Subscribe(c.ctx, r)
			errs = append(errs, err)
			for i, err := range errs {
				if !errors.Is(err, c.want) {
					t.Errorf("call %d with a done context = %v; want %v", i, err, c.want)
				}
			}
		}
		if n, err := d.Count(tctx(t), "ctx"); err != nil || n != 0 {
			t.Errorf("Count = %d, %v; want 0", n, err)
		}
	})
}

// TestCallerDB uses New with a *sql.DB the caller opened (with the plain DSN,
// no dlock settings): the driver works, notifies on PostgreSQL, and Close
// leaves the database open.
func TestCallerDB(t *testing.T) {
	forEach(t, func(t *testing.T, s store) {
		db, err := sql.Open(s.sqlName, s.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		d, err := New(db, s.dialect, WithTable("caller_locks"))
		if err != nil {
			t.Fatal(err)
		}
		if d.Dialect() != s.dialect {
			t.Errorf("Dialect = %v; want %v", d.Dialect(), s.dialect)
		}
		ctx := tctx(t)
		if schemaExists(ctx, db, s.dialect, "caller_locks") == nil {
			t.Error("schemaExists before CreateSchema")
		}
		if err := d.CreateSchema(ctx); err != nil {
			t.Fatalf("CreateSchema: %v", err)
		}
		if err := schemaExists(ctx, db, s.dialect, "caller_locks"); err != nil {
			t.Errorf("schemaExists after CreateSchema = %v", err)
		}
		if err := d.CreateSchema(ctx); err != nil {
			t.Fatalf("second CreateSchema: %v", err)
		}
		r := req("k", time.Minute)
		mustAcquire(t, d, r)
		if s.dialect == Postgres {
			sub, err := d.Subscribe(ctx, req("k", time.Minute))
			if err != nil {
				t.Fatalf("Subscribe: %v", err)
			}
			defer sub.Close()
			if err := d.Release(ctx, r); err != nil {
				t.Fatal(err)
			}
			waitSignal(t, sub, "release")
		} else if err := d.Release(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Errorf("second Close = %v; want nil", err)
		}
		if _, err := d.Acquire(ctx, r); err == nil {
			t.Error("Acquire after Close succeeded")
		}
		if err := db.PingContext(ctx); err != nil {
			t.Errorf("the caller's db after Close: %v", err)
		}
		// The lock table is the one named: the default one does not exist.
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM caller_locks").Scan(&n); err != nil || n != 0 {
			t.Errorf("rows in caller_locks = %d, %v; want 0", n, err)
		}
	})
}

// TestURLOwnsDB checks that a driver opened by URL closes its pool: on
// PostgreSQL and MySQL, the server ends its sessions.
func TestURLOwnsDB(t *testing.T) {
	forEach(t, func(t *testing.T, s store) {
		d := s.open(t)
		ctx := tctx(t)
		mustAcquire(t, d, req("k", time.Minute))
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if q := map[Dialect]string{
			Postgres: `SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`,
			MySQL:    `SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID()`,
		}[s.dialect]; q != "" {
			admin := s.appDB(t)
			waitUntil(t, "the driver's sessions to end", func() bool {
				var n int
				if err := admin.QueryRowContext(ctx, q).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n == 0
			})
		}
		if _, err := d.List(ctx, ""); err == nil {
			t.Error("List after Close succeeded")
		}
	})
}

// TestSchemaRace creates the schema from many drivers at once, explicitly
// and lazily.
func TestSchemaRace(t *testing.T) {
	forEach(t, func(t *testing.T, s store) {
		var wg sync.WaitGroup
		for i := range 8 {
			d := s.open(t)
			wg.Go(func() {
				var err error
				if i%2 == 0 {
					err = d.CreateSchema(tctx(t))
				} else {
					_, err = d.Acquire(tctx(t), req(fmt.Sprint("lazy", i), time.Minute))
				}
				if err != nil {
					t.Errorf("driver %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		if n, err := s.open(t).Count(tctx(t), "lazy"); err != nil || n != 4 {
			t.Errorf("Count = %d, %v; want 4", n, err)
		}
	})
}

// TestTables checks that two tables in one database are independent.
func TestTables(t *testing.T) {
	forEach(t, func(t *testing.T, s store) {
		a, b := s.open(t), s.open(t, "table=other_locks")
		mustAcquire(t, a, req("k", time.Minute))
		mustAcquire(t, b, req("k", time.Minute))
		if hs, err := b.List(tctx(t), ""); err != nil || len(hs) != 1 {
			t.Errorf("List of the other table = %+v, %v; want 1 holder", hs, err)
		}
	})
}

func waitSignal(t *testing.T, sub driver.Subscription, what string) {
	t.Helper()
	select {
	case <-sub.C():
	case <-time.After(10 * time.Second):
		t.Fatalf("no signal after %s", what)
	}
}

func noSignal(t *testing.T, sub driver.Subscription, what string) {
	t.Helper()
	select {
	case <-sub.C():
		t.Errorf("signal after %s", what)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestNotify checks LISTEN/NOTIFY: releases and forced releases by another
// client wake subscribers of the key only, right after Subscribe returns,
// and a broken listening connection is replaced, with every subscription
// signalled.
func TestNotify(t *testing.T) {
	s := newStore(t, Postgres)
	a, b := s.open(t), s.open(t)
	ctx := tctx(t)
	n := a
	// Without notifications, Subscribe says so (package dlock then polls).
	for _, d := range []Dialect{SQLite, MySQL} {
		if _, err := newStore(t, d).open(t).Subscribe(ctx, req("n", time.Minute)); !errors.Is(err, driver.ErrUnsupported) {
			t.Errorf("%v: Subscribe = %v; want ErrUnsupported", d, err)
		}
	}

	r := req("n", time.Minute)
	mustAcquire(t, b, r)
	sub, err := n.Subscribe(ctx, req("n", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	other, err := n.Subscribe(ctx, req("other", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := b.Release(ctx, r); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, sub, "Release")
	noSignal(t, other, "a release of another key")

	mustAcquire(t, b, r)
	noSignal(t, sub, "Acquire")
	if n, err := b.ForceRelease(ctx, "n"); err != nil || n != 1 {
		t.Fatalf("ForceRelease = %d, %v", n, err)
	}
	waitSignal(t, sub, "ForceRelease")
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}

	// Kill the listening connection: the listener reconnects and signals
	// everyone, then works as before.
	sub, err = n.Subscribe(ctx, req("n", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	admin := s.appDB(t)
	var killed int
	if err := admin.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND query LIKE 'LISTEN%'`).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminated %d listening connections, %v; want 1", killed, err)
	}
	waitSignal(t, sub, "reconnecting")
	waitSignal(t, other, "reconnecting")
	mustAcquire(t, b, r)
	if err := b.Release(ctx, r); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, sub, "Release after reconnecting")

	// Subscribe on a closed driver fails.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Subscribe(ctx, req("n", time.Minute)); err == nil {
		t.Error("Subscribe after Close succeeded")
	}
}

// TestListenerLingers checks that on PostgreSQL the listening connection
// outlives its last subscription by listenLinger only: a Subscribe within
// the linger keeps the connection, one after it opens a new one, which
// notifies as before.
func TestListenerLingers(t *testing.T) {
	s := newStore(t, Postgres)
	d, b := s.open(t), s.open(t)
	ctx := tctx(t)
	admin := s.appDB(t)
	// listening returns the process IDs of the database's backends whose
	// last statement was a LISTEN (the listening connections).
	listening := func() []int {
		t.Helper()
		rows, err := admin.QueryContext(ctx, `SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND query LIKE 'LISTEN%' ORDER BY pid`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var pids []int
		for rows.Next() {
			var pid int
			if err := rows.Scan(&pid); err != nil {
				t.Fatal(err)
			}
			pids = append(pids, pid)
		}
		return pids
	}
	if got := listening(); len(got) != 0 {
		t.Fatalf("listening before any Subscribe: %v", got)
	}
	sub, err := d.Subscribe(ctx, req("n", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	first := listening()
	if len(first) != 1 {
		t.Fatalf("listening after Subscribe: %v; want one connection", first)
	}
	// Closed and subscribed again at once: the same connection.
	sub.Close()
	if sub, err = d.Subscribe(ctx, req("n", time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := listening(); !slices.Equal(got, first) {
		t.Errorf("listening after a Subscribe within the linger: %v; want %v", got, first)
	}
	sub.Close()
	sub.Close() // idempotent: counts once
	// After listenLinger (10s), within listenIdle (30s), which would
	// replace the LISTEN with a ping as the connection's last statement.
	deadline := time.Now().Add(25 * time.Second)
	for len(listening()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("still listening 25s after the last subscription closed: %v", listening())
		}
		time.Sleep(50 * time.Millisecond) // polling the server: nothing signals a closed backend
	}
	// A new listener notifies as before.
	sub, err = d.Subscribe(ctx, req("n", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if got := listening(); len(got) != 1 {
		t.Fatalf("listening after a new Subscribe: %v; want one connection", got)
	}
	r := req("n", time.Minute)
	mustAcquire(t, b, r)
	if err := b.Release(ctx, r); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, sub, "Release after the listener was replaced")
}

// TestNotifyWakesNext checks that on PostgreSQL the release of an Exclusive
// hold by a driver that is not fair wakes only the queued readers that can
// take the key next: those before the first queued writer; subscribers
// that do not queue hear of every release, and with nobody queued every
// subscriber does. (Queued writers wait in line for the key's gate: see
// TestGateWakesOne.) Notifications arrive in the
// order of their transactions' commits, so once the signal of a marker
// notified after the release is in, the release's signals, if any, are
// there too.
func TestNotifyWakesNext(t *testing.T) {
	s := newStore(t, Postgres)
	d, holder := s.open(t), s.open(t)
	ctx := tctx(t)
	admin := s.appDB(t)
	subscribe := func(r driver.Request) driver.Subscription {
		t.Helper()
		sub, err := d.Subscribe(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Close() })
		return sub
	}
	// queue queues r, and subscribes it if it is a reader.
	queue := func(r driver.Request) driver.Subscription {
		t.Helper()
		r.Queue = true
		if res, err := d.Acquire(ctx, r); err != nil || res.Acquired {
			t.Fatalf("queued Acquire of %s = %+v, %v; want a wait", r.Key, res, err)
		}
		if r.Mode != driver.Shared {
			return nil
		}
		return subscribe(r)
	}
	signalled := func(sub driver.Subscription) bool {
		select {
		case <-sub.C():
			return true
		default:
			return false
		}
	}
	release := func(h driver.Request) {
		t.Helper()
		observer := subscribe(req(h.Key, time.Minute))
		marker := subscribe(req(h.Key+"/marker", time.Minute))
		if err := holder.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.ExecContext(ctx, `SELECT pg_notify($1, $2)`, DefaultTable, h.Key+"/marker"); err != nil {
			t.Fatal(err)
		}
		waitSignal(t, marker, "the marker after the release of "+h.Key)
		if !signalled(observer) {
			t.Errorf("the release of %s did not wake a subscriber that does not queue", h.Key)
		}
	}
	mode := func(m driver.Mode, r driver.Request) driver.Request { r.Mode = m; return r }

	for _, tc := range []struct {
		name  string
		modes []driver.Mode // of the queued waiters, in queue order
		woken []bool        // of the readers
	}{
		{"readers", []driver.Mode{driver.Shared, driver.Shared, driver.Exclusive, driver.Shared}, []bool{true, true, false, false}},
		{"writer first", []driver.Mode{driver.Exclusive, driver.Shared}, []bool{false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := req(tc.name, time.Minute)
			mustAcquire(t, holder, h)
			var subs []driver.Subscription
			for _, m := range tc.modes {
				subs = append(subs, queue(mode(m, req(tc.name, time.Minute))))
			}
			release(h)
			for i, sub := range subs {
				if sub == nil {
					continue
				}
				if got := signalled(sub); got != tc.woken[i] {
					t.Errorf("waiter %d (%s): woken %v; want %v", i, tc.modes[i], got, tc.woken[i])
				}
			}
		})
	}

	// With nobody queued, a reader that would queue is woken too.
	h := req("alone", time.Minute)
	mustAcquire(t, holder, h)
	w := mode(driver.Shared, req("alone", time.Minute))
	w.Queue = true
	sub := subscribe(w)
	release(h)
	if !signalled(sub) {
		t.Error("with nobody queued, the release did not wake a subscriber")
	}
}
