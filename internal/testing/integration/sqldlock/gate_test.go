package sqldlock_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	. "github.com/dlockhq/dlock/sqldlock"
)

// Child processes of TestGateDeadHead run waiterMain (see TestMain).
const waiterEnv = "SQLDLOCK_TEST_WAITER"

// waiterMain waits for the lock DLOCK_KEY of DLOCK_URL until it is killed,
// without polling (the holder's lease is long, the backoff longer).
func waiterMain() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := dlock.Open(ctx, os.Getenv("DLOCK_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer c.Close()
	if _, err := c.Lock(ctx, os.Getenv("DLOCK_KEY"), dlock.WithTTL(time.Minute), dlock.WithBackoff(time.Hour, time.Hour)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// settle waits until the database's backends show heads connections at
// the head of a line (holding a gate and listening) and waiting
// connections waiting for a gate, and fails the test with what it shows
// if they do not within 10s. Nothing signals the state of other backends:
// it polls the server.
func settle(t *testing.T, admin *sql.DB, heads, waiting int) {
	t.Helper()
	var listening, gated, queued int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := admin.QueryRowContext(tctx(t), `SELECT
	(SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle'
		AND query ~ '(^|; )LISTEN '),
	count(*) FILTER (WHERE granted), count(*) FILTER (WHERE NOT granted)
FROM pg_locks WHERE locktype = 'advisory'
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&listening, &gated, &queued)
		if err != nil {
			t.Fatal(err)
		}
		if listening == heads && gated == heads && queued == waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d listening connections, %d holding a gate, %d waiting for one; want %d, %d and %d",
				listening, gated, queued, heads, heads, waiting)
		}
	}
}

// TestGateWakesOne checks that on PostgreSQL, of several processes that
// wait for one key (Exclusive, a driver that is not fair), one alone
// listens for releases: the head of the line, which holds the key's gate;
// the others wait for the gate in the server's lock manager, and hear
// nothing. So a release wakes one process. Once the head holds the key and
// closes its subscription, exactly one waiter takes its place, and is
// signalled (a release may have come before it listened); at the end
// nobody holds a gate or listens.
func TestGateWakesOne(t *testing.T) {
	s := newStore(t, Postgres)
	ctx := tctx(t)
	admin := s.appDB(t)
	type waiter struct {
		d   *Driver
		r   driver.Request
		sub driver.Subscription
	}
	const n = 5
	var ws []*waiter
	holder := &waiter{d: s.open(t), r: req("hot", time.Minute)}
	mustAcquire(t, holder.d, holder.r)
	for range n {
		w := &waiter{d: s.open(t), r: req("hot", time.Minute)}
		w.r.Queue = true
		if res, err := w.d.Acquire(ctx, w.r); err != nil || res.Acquired {
			t.Fatalf("queued Acquire = %+v, %v; want a wait", res, err)
		}
		sub, err := w.d.Subscribe(ctx, w.r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Close() })
		w.sub = sub
		ws = append(ws, w)
	}
	// signalled returns the waiters with a pending signal, after waiting
	// for one.
	signalled := func() []int {
		t.Helper()
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(10 * time.Second))}}
		for _, w := range ws {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.sub.C())})
		}
		i, _, _ := reflect.Select(cases)
		if i == 0 {
			t.Fatal("no waiter signalled")
		}
		got := []int{i - 1}
		for j, w := range ws {
			select {
			case <-w.sub.C():
				got = append(got, j)
			default:
			}
		}
		return got
	}
	for len(ws) > 0 {
		settle(t, admin, 1, len(ws)-1)
		woken := signalled()
		if len(woken) != 1 {
			t.Fatalf("waiters %v signalled on taking the gate; want one", woken)
		}
		head := ws[woken[0]]
		if res, err := head.d.Acquire(ctx, head.r); err != nil || res.Acquired {
			t.Fatalf("the head's Acquire while held = %+v, %v; want a wait", res, err)
		}
		if err := holder.d.Release(ctx, holder.r); err != nil {
			t.Fatal(err)
		}
		if woken = signalled(); len(woken) != 1 || ws[woken[0]] != head {
			t.Fatalf("waiters %v signalled by the release; want the head alone", woken)
		}
		mustAcquire(t, head.d, head.r)
		head.sub.Close()
		ws = append(ws[:woken[0]], ws[woken[0]+1:]...)
		holder = head
	}
	settle(t, admin, 0, 0)
	if err := holder.d.Release(ctx, holder.r); err != nil {
		t.Fatal(err)
	}
}

// TestGateDeadHead checks that on PostgreSQL the death of the process at
// the head of a key's line (kill -9: its connection ends) hands the gate to
// the next waiter, which is signalled, listens, and hears the release.
func TestGateDeadHead(t *testing.T) {
	s := newStore(t, Postgres)
	ctx := tctx(t)
	admin := s.appDB(t)
	holder := s.open(t)
	h := req("dead", time.Minute)
	mustAcquire(t, holder, h)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), waiterEnv+"=1", "DLOCK_URL="+s.url, "DLOCK_KEY=dead")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	settle(t, admin, 1, 0) // the child heads the line

	b := s.open(t)
	w := req("dead", time.Minute)
	w.Queue = true
	if res, err := b.Acquire(ctx, w); err != nil || res.Acquired {
		t.Fatalf("queued Acquire = %+v, %v; want a wait", res, err)
	}
	sub, err := b.Subscribe(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	settle(t, admin, 1, 1)
	noSignal(t, sub, "subscribing behind a head")

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	waitSignal(t, sub, "the head's death")
	settle(t, admin, 1, 0)
	if err := holder.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, sub, "the release")
	mustAcquire(t, b, w)
}

// TestGateLeave checks that on PostgreSQL a waiter that stops waiting
// before it heads the line (its subscription closed: it took the key by a
// poll, or gave up) leaves the line at once, on the server, and keeps its
// connection for its next wait, which the head's leaving then heads.
func TestGateLeave(t *testing.T) {
	s := newStore(t, Postgres)
	ctx := tctx(t)
	admin := s.appDB(t)
	holder, a, b := s.open(t), s.open(t), s.open(t)
	h := req("leave", time.Minute)
	mustAcquire(t, holder, h)
	subscribe := func(d *Driver) (driver.Request, driver.Subscription) {
		t.Helper()
		r := req("leave", time.Minute)
		r.Queue = true
		if res, err := d.Acquire(ctx, r); err != nil || res.Acquired {
			t.Fatalf("queued Acquire = %+v, %v; want a wait", res, err)
		}
		sub, err := d.Subscribe(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Close() })
		return r, sub
	}
	// waiting returns the process IDs of the backends waiting for a gate.
	waiting := func() (pids []int) {
		t.Helper()
		rows, err := admin.QueryContext(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY pid`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var pid int
			if err := rows.Scan(&pid); err != nil {
				t.Fatal(err)
			}
			pids = append(pids, pid)
		}
		return pids
	}
	_, subA := subscribe(a)
	settle(t, admin, 1, 0)
	waitSignal(t, subA, "taking the gate")
	_, subB := subscribe(b)
	settle(t, admin, 1, 1)
	first := waiting()

	subB.Close()
	settle(t, admin, 1, 0)
	rb, subB := subscribe(b)
	settle(t, admin, 1, 1)
	if again := waiting(); len(again) != 1 || again[0] != first[0] {
		t.Errorf("the waiter's connection after waiting again: backend %v; want %v, the same", again, first)
	}
	noSignal(t, subB, "waiting behind a head")
	subA.Close()
	settle(t, admin, 1, 0)
	waitSignal(t, subB, "the head's leaving")
	if err := holder.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, subB, "the release")
	mustAcquire(t, b, rb)
}

// TestGateSemaphore checks that on PostgreSQL the waiters of a semaphore
// wait in line too, and that permits freed at once are all taken: the head
// takes one and hands the gate on, and the next head, signalled on taking
// it, takes the next.
func TestGateSemaphore(t *testing.T) {
	s := newStore(t, Postgres)
	ctx := tctx(t)
	admin := s.appDB(t)
	permit := func() driver.Request {
		r := req("sem", time.Minute)
		r.Mode, r.Limit = driver.Semaphore, 2
		return r
	}
	holder := s.open(t)
	held := []driver.Request{permit(), permit()}
	for _, r := range held {
		mustAcquire(t, holder, r)
	}
	type waiter struct {
		d   *Driver
		r   driver.Request
		sub driver.Subscription
	}
	var ws []*waiter
	for range 3 {
		w := &waiter{d: s.open(t), r: permit()}
		w.r.Queue = true
		if res, err := w.d.Acquire(ctx, w.r); err != nil || res.Acquired {
			t.Fatalf("queued Acquire = %+v, %v; want a wait", res, err)
		}
		sub, err := w.d.Subscribe(ctx, w.r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Close() })
		w.sub = sub
		ws = append(ws, w)
	}
	settle(t, admin, 1, 2)
	for _, r := range held {
		if err := holder.Release(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// Each waiter tries when it is signalled, as package dlock's do.
	for acquired := 0; acquired < 2; {
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(10 * time.Second))}}
		for _, w := range ws {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.sub.C())})
		}
		i, _, _ := reflect.Select(cases)
		if i == 0 {
			t.Fatalf("%d of the 2 freed permits taken, and no waiter signalled", acquired)
		}
		w := ws[i-1]
		res, err := w.d.Acquire(ctx, w.r)
		if err != nil {
			t.Fatal(err)
		}
		if res.Acquired {
			acquired++
			w.sub.Close()
			ws = append(ws[:i-1], ws[i:]...)
		}
	}
	settle(t, admin, 1, 0) // the third waiter heads the line
	if res, err := ws[0].d.Acquire(ctx, ws[0].r); err != nil || res.Acquired {
		t.Fatalf("the third waiter's Acquire = %+v, %v; want a wait", res, err)
	}
}
