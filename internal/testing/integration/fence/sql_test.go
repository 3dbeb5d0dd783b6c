package fence_test

import (
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/fence"
	_ "github.com/dlockhq/dlock/sqldlock/mysql"    // the mysql:// store
	_ "github.com/dlockhq/dlock/sqldlock/postgres" // the postgres:// store
	_ "github.com/dlockhq/dlock/sqldlock/sqlite"   // the sqlite:// store
)

// newFence returns the guards of s's dialect with the fence table table
// (the default if empty), created.
func newFence(t *testing.T, s sqlStore, table string) *fence.SQL {
	t.Helper()
	f, err := fence.NewSQL(s.d, table)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.CreateTable(testCtx(t), s.db); err != nil {
		t.Fatal(err)
	}
	return f
}

// checkTx runs Check in a transaction of its own, which it commits
// whatever Check returned: a refusal that changed something would show.
func checkTx(t *testing.T, s sqlStore, f *fence.SQL, resource string, token uint64) error {
	t.Helper()
	ctx := testCtx(t)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Check(ctx, tx, resource, token)
	if cerr := tx.Commit(); cerr != nil {
		t.Fatalf("commit after Check (%v): %v", err, cerr)
	}
	return err
}

func highest(t *testing.T, s sqlStore, f *fence.SQL, resource string) uint64 {
	t.Helper()
	h, err := f.Highest(testCtx(t), s.db, resource)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func count(t *testing.T, s sqlStore, table string) int {
	t.Helper()
	var n int
	if err := s.db.QueryRowContext(testCtx(t), "SELECT count(*) FROM "+quote(s.d, table)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A token is recorded if it is at least the highest one, and a lower one is
// refused without a change, through a transaction or the pool alike.
func TestCheck(t *testing.T) {
	eachDialect(t, func(t *testing.T, s sqlStore) {
		ctx := testCtx(t)
		// A reserved word as the table name: every statement quotes it.
		f := newFence(t, s, "order")
		if err := f.CreateTable(ctx, s.db); err != nil {
			t.Fatalf("second CreateTable: %v", err)
		}
		const r = "phone:13800000000"
		if h := highest(t, s, f, r); h != 0 {
			t.Fatalf("highest of an unseen resource = %d, want 0", h)
		}
		for _, st := range []struct {
			token, want uint64
			stale       bool
		}{
			{5, 5, false}, // the first token
			{5, 5, false}, // the same holder writes again
			{4, 5, true},
			{1, 5, true},
			{6, 6, false},
			{5, 6, true},
			{math.MaxInt64, math.MaxInt64, false},
			{math.MaxInt64 - 1, math.MaxInt64, true},
		} {
			err := checkTx(t, s, f, r, st.token)
			if st.stale {
				wantStale(t, err, r, st.token, st.want)
			} else if err != nil {
				t.Fatalf("Check(%d): %v", st.token, err)
			}
			if h := highest(t, s, f, r); h != st.want {
				t.Fatalf("after Check(%d): highest %d, want %d", st.token, h, st.want)
			}
		}

		// Resources are apart, and a rolled back Check leaves nothing.
		const r2 = "phone:13900000000"
		if err := checkTx(t, s, f, r2, 2); err != nil {
			t.Fatal(err)
		}
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Check(ctx, tx, r2, 9); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if h := highest(t, s, f, r2); h != 2 {
			t.Fatalf("after a rolled back Check(9): highest %d, want 2", h)
		}
		if h := highest(t, s, f, r); h != math.MaxInt64 {
			t.Fatalf("the other resource: highest %d, want %d", h, int64(math.MaxInt64))
		}

		// Outside a transaction.
		if err := f.Check(ctx, s.db, r2, 3); err != nil {
			t.Fatal(err)
		}
		wantStale(t, f.Check(ctx, s.db, r2, 2), r2, 2, 3)
		if n := count(t, s, "order"); n != 2 {
			t.Fatalf("the fence table has %d rows, want 2", n)
		}
	})
}

// waitBlocked returns true once a transaction of the database waits for a
// row lock, or false once done has a result (the second transaction did not
// wait). SQLite serializes writers in BEGIN IMMEDIATE, where no waiter can
// be seen: it returns true at once.
func waitBlocked(t *testing.T, s sqlStore, done chan error) bool {
	t.Helper()
	ctx := testCtx(t)
	for {
		select {
		case err := <-done:
			done <- err
			return false
		default:
		}
		var waiting bool
		switch s.d {
		case fence.Postgres:
			q := `SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`
			if err := s.db.QueryRowContext(ctx, q).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
		case fence.MySQL:
			// The InnoDB monitor, read live (information_schema.innodb_trx is a
			// cache that polling keeps from being refreshed): a transaction
			// waiting for a lock shows "LOCK WAIT" in its TRANSACTIONS section.
			var typ, name, status string
			if err := s.db.QueryRowContext(ctx, `SHOW ENGINE INNODB STATUS`).Scan(&typ, &name, &status); err != nil {
				t.Fatal(err)
			}
			_, txs, _ := strings.Cut(status, "\nTRANSACTIONS\n")
			txs, _, _ = strings.Cut(txs, "\nFILE I/O\n")
			waiting = strings.Contains(txs, "LOCK WAIT")
		default:
			return true
		}
		if waiting {
			return true
		}
	}
}

// Two transactions race on one resource: the second checks while the first
// has checked and not yet ended. The second waits for the first (as the
// server shows) and decides on its outcome.
func TestCheckRace(t *testing.T) {
	cases := []struct {
		name          string
		first, second uint64
		commit        bool // the first commits, or rolls back
		stale         bool // the second is refused
		want          uint64
	}{
		{"6 committed then 5", 6, 5, true, true, 6},
		{"6 rolled back then 5", 6, 5, false, false, 5},
		{"5 committed then 6", 5, 6, true, false, 6},
		{"6 committed then 6", 6, 6, true, false, 6},
	}
	eachDialect(t, func(t *testing.T, s sqlStore) {
		f := newFence(t, s, "")
		for i, c := range cases {
			for _, seeded := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s seeded %v", c.name, seeded), func(t *testing.T) {
					ctx := testCtx(t)
					r := fmt.Sprintf("r%d-%v", i, seeded)
					if seeded { // the row exists: an update, not an insert
						if err := checkTx(t, s, f, r, 3); err != nil {
							t.Fatal(err)
						}
					}
					tx1, err := s.db.BeginTx(ctx, nil)
					if err != nil {
						t.Fatal(err)
					}
					defer tx1.Rollback()
					if err := f.Check(ctx, tx1, r, c.first); err != nil {
						t.Fatal(err)
					}
					done := make(chan error, 1)
					go func() {
						tx2, err := s.db.BeginTx(ctx, nil)
						if err != nil {
							done <- err
							return
						}
						err = f.Check(ctx, tx2, r, c.second)
						if cerr := tx2.Commit(); err == nil {
							err = cerr
						}
						done <- err
					}()
					if !waitBlocked(t, s, done) {
						t.Errorf("Check(%d) did not wait for the transaction that checked %d", c.second, c.first)
					}
					if c.commit {
						err = tx1.Commit()
					} else {
						err = tx1.Rollback()
					}
					if err != nil {
						t.Fatal(err)
					}
					err = <-done
					if c.stale {
						wantStale(t, err, r, c.second, c.first)
					} else if err != nil {
						t.Fatalf("the second Check(%d): %v", c.second, err)
					}
					if h := highest(t, s, f, r); h != c.want {
						t.Fatalf("highest %d, want %d", h, c.want)
					}
				})
			}
		}
	})
}

// Writers with tokens 1 to n race, each checking its token and then writing
// a value, unguarded, in one transaction. The value ends as the highest
// token's, and every refused writer had seen a higher token.
func TestCheckConcurrent(t *testing.T) {
	const n = 12
	eachDialect(t, func(t *testing.T, s sqlStore) {
		ctx := testCtx(t)
		f := newFence(t, s, "")
		if _, err := s.db.ExecContext(ctx, `CREATE TABLE account (id INTEGER PRIMARY KEY, val BIGINT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		if _, err := s.db.ExecContext(ctx, `INSERT INTO account (id, val) VALUES (1, 0)`); err != nil {
			t.Fatal(err)
		}
		write := func(token uint64) error {
			tx, err := s.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := f.Check(ctx, tx, "account:1", token); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE account SET val = `+ph(s.d, 1)+` WHERE id = 1`, int64(token)); err != nil {
				return err
			}
			return tx.Commit()
		}
		errs := race(n, write)
		accepted := 0
		for i, err := range errs {
			token := uint64(i + 1)
			var se *fence.StaleTokenError
			switch {
			case err == nil:
				accepted++
			case errors.As(err, &se):
				if se.Token != token || se.Seen <= token {
					t.Errorf("token %d refused with %+v", token, *se)
				}
			default:
				t.Errorf("token %d: %v", token, err)
			}
		}
		if errs[n-1] != nil {
			t.Errorf("the highest token was refused: %v", errs[n-1])
		}
		var val int64
		if err := s.db.QueryRowContext(ctx, `SELECT val FROM account WHERE id = 1`).Scan(&val); err != nil {
			t.Fatal(err)
		}
		if val != n || highest(t, s, f, "account:1") != n {
			t.Errorf("value %d, highest token %d, want %d", val, highest(t, s, f, "account:1"), n)
		}
		t.Logf("%d of %d writers accepted", accepted, n)
	})
}

// race runs write with the tokens 1 to n in goroutines started together,
// in random order, running a write again after a deadlock or serialization
// failure, and returns the results by token.
func race(n int, write func(token uint64) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, i := range rand.Perm(n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				errs[i] = write(uint64(i + 1))
				if !retryable(errs[i]) {
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// The scenario fencing is for, on a lock of the same database: holder A's
// lease runs out while it is paused, B takes the lock with a higher token
// and writes; A's late write is refused.
func TestLateHolderRefused(t *testing.T) {
	eachDialect(t, func(t *testing.T, s sqlStore) {
		ctx := testCtx(t)
		f := newFence(t, s, "")
		if _, err := s.db.ExecContext(ctx, `CREATE TABLE payments (phone VARCHAR(32), token BIGINT)`); err != nil {
			t.Fatal(err)
		}
		pay := func(token uint64) error {
			tx, err := s.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := f.Check(ctx, tx, "phone:1", token); err != nil {
				return err
			}
			q := `INSERT INTO payments (phone, token) VALUES (` + ph(s.d, 1) + `, ` + ph(s.d, 2) + `)`
			if _, err := tx.ExecContext(ctx, q, "1", int64(token)); err != nil {
				return err
			}
			return tx.Commit()
		}
		a, b := openClient(t, s.url), openClient(t, s.url)
		la, err := a.Lock(ctx, "phone:1", dlock.WithTTL(100*time.Millisecond), dlock.WithoutRenewal())
		if err != nil {
			t.Fatal(err)
		}
		<-la.Done() // A is paused past its lease
		lb, err := b.Lock(ctx, "phone:1")
		if err != nil {
			t.Fatal(err)
		}
		defer lb.Release(ctx)
		if lb.Token() <= la.Token() {
			t.Fatalf("B's token %d is not above A's %d", lb.Token(), la.Token())
		}
		if err := pay(lb.Token()); err != nil {
			t.Fatal(err)
		}
		wantStale(t, pay(la.Token()), "phone:1", la.Token(), lb.Token())
		var n int
		var tok int64
		if err := s.db.QueryRowContext(ctx, `SELECT count(*), max(token) FROM payments`).Scan(&n, &tok); err != nil {
			t.Fatal(err)
		}
		if n != 1 || uint64(tok) != lb.Token() {
			t.Fatalf("%d payments, the last with token %d; want 1, with token %d", n, tok, lb.Token())
		}
	})
}

// openClient opens a client of its own on url, as another process would.
func openClient(t *testing.T, url string) *dlock.Client {
	t.Helper()
	c, err := dlock.Open(testCtx(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// itemRow reads the quantity and token of an item.
func itemRow(t *testing.T, s sqlStore, id int) (qty int, token sql.NullInt64) {
	t.Helper()
	q := `SELECT qty, fence_token FROM ` + quote(s.d, "select") + ` WHERE id = ` + ph(s.d, 1)
	if err := s.db.QueryRowContext(testCtx(t), q, id).Scan(&qty, &token); err != nil {
		t.Fatal(err)
	}
	return qty, token
}

func createItems(t *testing.T, s sqlStore) {
	t.Helper()
	ctx := testCtx(t)
	for _, q := range []string{
		`CREATE TABLE ` + quote(s.d, "select") + ` (id INTEGER PRIMARY KEY, ` + quote(s.d, "group") + ` VARCHAR(16) NOT NULL, qty INTEGER NOT NULL, fence_token BIGINT)`,
		`INSERT INTO ` + quote(s.d, "select") + ` VALUES (1, 'a', 10, NULL), (2, 'a', 10, NULL)`,
	} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}

// A guarded UPDATE writes a row whose token is not higher, refuses a lower
// token without a change, and tells a missing row apart.
func TestUpdate(t *testing.T) {
	eachDialect(t, func(t *testing.T, s sqlStore) {
		ctx := testCtx(t)
		createItems(t, s) // reserved words as table and column names
		f, err := fence.NewSQL(s.d, "")
		if err != nil {
			t.Fatal(err)
		}
		set := func(q Querier, id, qty int, token uint64) error {
			return f.Update(ctx, q, fence.Update{
				Table: "select",
				Set:   map[string]any{"qty": qty, "group": "b"},
				Where: map[string]any{"id": id},
			}, token)
		}
		for _, st := range []struct {
			qty       int
			token     uint64
			stale     bool
			wantQty   int
			wantToken int64
		}{
			{9, 3, false, 9, 3}, // a row never written under a token (NULL)
			{9, 3, false, 9, 3}, // the same values again (MySQL reports no row changed)
			{8, 3, false, 8, 3},
			{7, 2, true, 8, 3},
			{6, 4, false, 6, 4},
		} {
			err := set(s.db, 1, st.qty, st.token)
			if st.stale {
				wantStale(t, err, "select id=1", st.token, 3)
			} else if err != nil {
				t.Fatalf("Update(qty %d, token %d): %v", st.qty, st.token, err)
			}
			if qty, tok := itemRow(t, s, 1); qty != st.wantQty || tok.Int64 != st.wantToken {
				t.Fatalf("after Update(qty %d, token %d): qty %d, token %v; want %d, %d", st.qty, st.token, qty, tok, st.wantQty, st.wantToken)
			}
		}
		if qty, tok := itemRow(t, s, 2); qty != 10 || tok.Valid {
			t.Fatalf("the other row: qty %d, token %v; want 10, NULL", qty, tok)
		}

		err = set(s.db, 99, 1, 5)
		if !errors.Is(err, sql.ErrNoRows) || errors.Is(err, fence.ErrStaleToken) {
			t.Fatalf("a missing row: %v", err)
		}

		// In a transaction that rolls back.
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := set(tx, 1, 0, 5); err != nil {
			t.Fatal(err)
		}
		tx.Rollback()
		if qty, tok := itemRow(t, s, 1); qty != 6 || tok.Int64 != 4 {
			t.Fatalf("after a rolled back Update: qty %d, token %v; want 6, 4", qty, tok)
		}

		// Several conditions, and a token column of another name.
		if _, err := s.db.ExecContext(ctx, `CREATE TABLE kv (k VARCHAR(16) NOT NULL, n INTEGER NOT NULL, v VARCHAR(16), ver BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (k, n))`); err != nil {
			t.Fatal(err)
		}
		if _, err := s.db.ExecContext(ctx, `INSERT INTO kv (k, n, v) VALUES ('x', 1, 'old'), ('x', 2, 'old')`); err != nil {
			t.Fatal(err)
		}
		kv := func(v string, token uint64) error {
			return f.Update(ctx, s.db, fence.Update{Table: "kv", Set: map[string]any{"v": v}, Where: map[string]any{"n": 1, "k": "x"}, TokenColumn: "ver"}, token)
		}
		if err := kv("new", 5); err != nil {
			t.Fatal(err)
		}
		wantStale(t, kv("stale", 4), "kv k=x n=1", 4, 5)
		rows := map[int]string{}
		for n := range 2 {
			var v string
			if err := s.db.QueryRowContext(ctx, `SELECT v FROM kv WHERE k = 'x' AND n = `+ph(s.d, 1), n+1).Scan(&v); err != nil {
				t.Fatal(err)
			}
			rows[n+1] = v
		}
		if rows[1] != "new" || rows[2] != "old" {
			t.Fatalf("kv rows %v, want 1: new, 2: old", rows)
		}
	})
}

// Querier is fence.Querier, for the tests' helpers.
type Querier = fence.Querier

// Writers with tokens 1 to n race on one row, each with a guarded UPDATE
// of its own: the row ends with the highest token's value.
func TestUpdateConcurrent(t *testing.T) {
	const n = 12
	eachDialect(t, func(t *testing.T, s sqlStore) {
		ctx := testCtx(t)
		createItems(t, s)
		f, err := fence.NewSQL(s.d, "")
		if err != nil {
			t.Fatal(err)
		}
		errs := race(n, func(token uint64) error {
			return f.Update(ctx, s.db, fence.Update{Table: "select", Set: map[string]any{"qty": int(token)}, Where: map[string]any{"id": 1}}, token)
		})
		for i, err := range errs {
			var se *fence.StaleTokenError
			if err != nil && (!errors.As(err, &se) || se.Seen <= uint64(i+1)) {
				t.Errorf("token %d: %v", i+1, err)
			}
		}
		if qty, tok := itemRow(t, s, 1); qty != n || tok.Int64 != n {
			t.Fatalf("qty %d, token %v; want %d, %d", qty, tok, n, n)
		}
	})
}

// Bad names and tokens are refused before anything reaches the database.
func TestSQLBadArguments(t *testing.T) {
	eachDialect(t, func(t *testing.T, s sqlStore) {
		ctx := testCtx(t)
		f := newFence(t, s, "")
		createItems(t, s)
		for _, bad := range []string{"bad-name", "1abc", "x; DROP TABLE x", `a"b`, "a`b", "naïve", strings.Repeat("a", 64)} {
			_, err := fence.NewSQL(s.d, bad)
			wantArg(t, err, "table", bad)
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
				t.Errorf("the message %q does not name %q", err, bad)
			}
		}
		if _, err := fence.NewSQL(s.d, strings.Repeat("a", 63)); err != nil {
			t.Errorf("a 63-byte name: %v", err)
		}
		_, err := fence.NewSQL(fence.Dialect(0), "")
		wantArg(t, err, "dialect", fence.Dialect(0))

		for _, tok := range []uint64{0, math.MaxInt64 + 1, math.MaxUint64} {
			wantArg(t, f.Check(ctx, s.db, "r", tok), "token", tok)
		}
		wantArg(t, f.Check(ctx, s.db, "", 1), "resource", "")
		long := strings.Repeat("r", 256)
		wantArg(t, f.Check(ctx, s.db, long, 1), "resource", long)
		if n := count(t, s, fence.DefaultTable); n != 0 {
			t.Fatalf("the fence table has %d rows after refused arguments", n)
		}
		if err := f.Check(ctx, s.db, strings.Repeat("r", 255), 1); err != nil {
			t.Errorf("a 255-byte resource: %v", err)
		}

		good := func() fence.Update {
			return fence.Update{Table: "select", Set: map[string]any{"qty": 0}, Where: map[string]any{"id": 1}}
		}
		for _, c := range []struct {
			edit  func(*fence.Update)
			name  string
			value any
		}{
			{func(u *fence.Update) { u.Table = "select; DELETE FROM x" }, "table", "select; DELETE FROM x"},
			{func(u *fence.Update) { u.Set["qty = 0, id"] = 1 }, "set column", "qty = 0, id"},
			{func(u *fence.Update) { u.Where["1 = 1 OR id"] = 1 }, "where column", "1 = 1 OR id"},
			{func(u *fence.Update) { u.TokenColumn = "fence token" }, "token column", "fence token"},
			{func(u *fence.Update) { u.Set["fence_token"] = 1 }, "set column", "fence_token"},
			{func(u *fence.Update) { u.Where = nil }, "where", nil},
			{func(u *fence.Update) { u.Where["id"] = nil }, "where id", nil},
		} {
			u := good()
			c.edit(&u)
			wantArg(t, f.Update(ctx, s.db, u, 1), c.name, c.value)
		}
		for _, tok := range []uint64{0, math.MaxInt64 + 1} {
			wantArg(t, f.Update(ctx, s.db, good(), tok), "token", tok)
		}
		if qty, tok := itemRow(t, s, 1); qty != 10 || tok.Valid {
			t.Fatalf("after refused arguments: qty %d, token %v; want 10, NULL", qty, tok)
		}
		if n := count(t, s, "select"); n != 2 {
			t.Fatalf("%d rows, want 2", n)
		}
	})
}

// The message of a refusal names the resource and both tokens, and the
// error is found through wrapping.
func TestStaleTokenError(t *testing.T) {
	err := fmt.Errorf("paying: %w", &fence.StaleTokenError{Resource: "phone:1", Token: 4, Seen: 5})
	if got, want := err.Error(), `paying: fence: stale token 4 for "phone:1": token 5 was accepted`; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if !errors.Is(err, fence.ErrStaleToken) {
		t.Error("does not match ErrStaleToken")
	}
	if errors.Is(err, dlock.ErrInvalidArgument) || errors.Is(&fence.StaleTokenError{}, dlock.ErrLost) {
		t.Error("matches another sentinel")
	}
	unknown := &fence.StaleTokenError{Resource: "r", Token: 4}
	if got, want := unknown.Error(), `fence: stale token 4 for "r": a higher token was accepted`; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}

// A transaction that read before it writes (the usual read-modify-write,
// which takes a snapshot at MySQL's REPEATABLE READ) is refused if a higher
// token was written after its read: the guards compare with the rows as
// they are, not as the snapshot saw them. SQLite lets no writer in between.
func TestAfterSnapshot(t *testing.T) {
	eachDialect(t, func(t *testing.T, s sqlStore) {
		if s.d == fence.SQLite {
			t.Skip("SQLite serializes the transactions")
		}
		ctx := testCtx(t)
		createItems(t, s)
		f := newFence(t, s, "")
		update := func(q Querier, qty int, token uint64) error {
			return f.Update(ctx, q, fence.Update{Table: "select", Set: map[string]any{"qty": qty}, Where: map[string]any{"id": 1}}, token)
		}
		if err := update(s.db, 9, 2); err != nil {
			t.Fatal(err)
		}
		if err := f.Check(ctx, s.db, "r", 2); err != nil {
			t.Fatal(err)
		}

		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		var qty int
		if err := tx.QueryRowContext(ctx, `SELECT qty FROM `+quote(s.d, "select")+` WHERE id = 1`).Scan(&qty); err != nil {
			t.Fatal(err)
		}
		// Another holder writes with a higher token.
		if err := update(s.db, qty-1, 5); err != nil {
			t.Fatal(err)
		}
		if err := f.Check(ctx, s.db, "r", 5); err != nil {
			t.Fatal(err)
		}

		wantStale(t, update(tx, qty-1, 3), "select id=1", 3, 5)
		wantStale(t, f.Check(ctx, tx, "r", 3), "r", 3, 5)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if qty, tok := itemRow(t, s, 1); qty != 8 || tok.Int64 != 5 {
			t.Fatalf("qty %d, token %v; want 8, 5", qty, tok)
		}
		if h := highest(t, s, f, "r"); h != 5 {
			t.Fatalf("highest %d, want 5", h)
		}
	})
}

// At PostgreSQL's REPEATABLE READ, a Check that waited for a transaction
// which then committed fails with a serialization error, and the
// transaction run again is refused.
func TestCheckRepeatableRead(t *testing.T) {
	ctx := testCtx(t)
	s := newStore(t, fence.Postgres)
	f := newFence(t, s, "")
	if err := checkTx(t, s, f, "r", 3); err != nil {
		t.Fatal(err)
	}
	tx1, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback()
	if err := f.Check(ctx, tx1, "r", 6); err != nil {
		t.Fatal(err)
	}
	check := func() error {
		tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := f.Check(ctx, tx, "r", 5); err != nil {
			return err
		}
		return tx.Commit()
	}
	done := make(chan error, 1)
	go func() { done <- check() }()
	if !waitBlocked(t, s, done) {
		t.Error("Check(5) did not wait")
	}
	if err := tx1.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !retryable(err) {
		t.Fatalf("err = %v, want a serialization failure", err)
	}
	wantStale(t, check(), "r", 5, 6)
}
