package sqldlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	. "github.com/dlockhq/dlock/sqldlock"
)

var (
	_ Querier = (*sql.DB)(nil)
	_ Querier = (*sql.Tx)(nil)
	_ Querier = (*sql.Conn)(nil)
)

// appDB opens the store's database as an application would.
func (s store) appDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open(s.sqlName, s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t *testing.T, db Execer, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := db.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func TestVersioned(t *testing.T) {
	forEach(t, func(t *testing.T, s store) {
		db := s.appDB(t)
		ctx := tctx(t)
		mustExec(t, db,
			`CREATE TABLE accounts (id BIGINT PRIMARY KEY, holder VARCHAR(50) NOT NULL, balance BIGINT NOT NULL, version BIGINT NOT NULL)`,
			`INSERT INTO accounts VALUES (1, 'ann', 100, 1)`)
		v := Versioned{Table: "accounts", IDColumn: "id", VersionColumn: "version", Dialect: s.dialect}
		read := func() (holder string, balance, version int64) {
			t.Helper()
			if err := db.QueryRowContext(ctx, `SELECT holder, balance, version FROM accounts WHERE id = 1`).Scan(&holder, &balance, &version); err != nil {
				t.Fatal(err)
			}
			return
		}

		nv, err := v.Update(ctx, db, 1, 1, map[string]any{"balance": 90, "holder": "bob"})
		if err != nil || nv != 2 {
			t.Fatalf("Update = %d, %v; want 2", nv, err)
		}
		if h, b, ver := read(); h != "bob" || b != 90 || ver != 2 {
			t.Errorf("row = %s %d %d; want bob 90 2", h, b, ver)
		}
		// A stale version, a missing row: conflicts that change nothing.
		if _, err := v.Update(ctx, db, 1, 1, map[string]any{"balance": 0}); !errors.Is(err, ErrConflict) {
			t.Errorf("Update at a stale version = %v; want ErrConflict", err)
		}
		if _, err := v.Update(ctx, db, 2, 1, map[string]any{"balance": 0}); !errors.Is(err, ErrConflict) {
			t.Errorf("Update of a missing row = %v; want ErrConflict", err)
		}
		if h, b, ver := read(); h != "bob" || b != 90 || ver != 2 {
			t.Errorf("row after conflicts = %s %d %d; want bob 90 2", h, b, ver)
		}
		// An empty set only bumps the version; a transaction works too.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if nv, err := v.Update(ctx, tx, 1, 2, nil); err != nil || nv != 3 {
			t.Fatalf("Update in a transaction = %d, %v; want 3", nv, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}

		// Concurrent read-modify-write increments: conflicts are
		// detected, so none is lost.
		const workers, each = 6, 10
		var wg sync.WaitGroup
		var mu sync.Mutex
		conflicts := 0
		for range workers {
			wg.Go(func() {
				for done := 0; done < each; {
					var bal, ver int64
					if err := db.QueryRowContext(ctx, `SELECT balance, version FROM accounts WHERE id = 1`).Scan(&bal, &ver); err != nil {
						t.Error(err)
						return
					}
					_, err := v.Update(ctx, db, 1, ver, map[string]any{"balance": bal + 1})
					switch {
					case errors.Is(err, ErrConflict):
						mu.Lock()
						conflicts++
						mu.Unlock()
					case err != nil:
						t.Error(err)
						return
					default:
						done++
					}
				}
			})
		}
		wg.Wait()
		if _, b, ver := read(); b != 90+workers*each || ver != 3+workers*each {
			t.Errorf("after concurrent increments: balance %d version %d; want %d %d", b, ver, 90+workers*each, 3+workers*each)
		}
		t.Logf("%d conflicts", conflicts)
	})
}

func TestClaim(t *testing.T) {
	forEach(t, func(t *testing.T, s store) {
		db := s.appDB(t)
		ctx := tctx(t)
		const rows = 60
		mustExec(t, db, `CREATE TABLE tasks (id BIGINT PRIMARY KEY, state INT NOT NULL, assigned_to VARCHAR(20))`)
		for i := range rows {
			mustExec(t, db, fmt.Sprintf(`INSERT INTO tasks (id, state) VALUES (%d, 1)`, i+1))
		}
		c := Claim[int64]{Table: "tasks", IDColumn: "id", StateColumn: "state", Free: 1, Taken: 2, Dialect: s.dialect, Candidates: 4}
		var (
			mu        sync.Mutex
			claimed   []int64
			conflicts int
			wg        sync.WaitGroup
		)
		for range 8 {
			wg.Go(func() {
				for {
					id, err := c.One(ctx, db)
					switch {
					case errors.Is(err, ErrNoneFree):
						return
					case errors.Is(err, ErrConflict):
						mu.Lock()
						conflicts++
						mu.Unlock()
						continue
					case err != nil:
						t.Error(err)
						return
					}
					mu.Lock()
					claimed = append(claimed, id)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		slices.Sort(claimed)
		if len(claimed) != rows || len(slices.Compact(slices.Clone(claimed))) != rows {
			t.Errorf("claimed %d rows, %d distinct; want each of the %d once", len(claimed), len(slices.Compact(slices.Clone(claimed))), rows)
		}
		var free int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM tasks WHERE state = 1`).Scan(&free); err != nil || free != 0 {
			t.Errorf("free rows left = %d, %v; want 0", free, err)
		}
		if _, err := c.One(ctx, db); !errors.Is(err, ErrNoneFree) {
			t.Errorf("One with nothing free = %v; want ErrNoneFree", err)
		}
		t.Logf("%d rounds lost to other workers", conflicts)

		// NULL as the free state, a worker name as the taken one.
		w := Claim[int64]{Table: "tasks", IDColumn: "id", StateColumn: "assigned_to", Free: nil, Taken: "worker-1", Dialect: s.dialect}
		id, err := w.One(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		var who string
		if err := db.QueryRowContext(ctx, fmt.Sprintf(`SELECT assigned_to FROM tasks WHERE id = %d`, id)).Scan(&who); err != nil || who != "worker-1" {
			t.Errorf("assigned_to = %q, %v; want worker-1", who, err)
		}
	})
}
