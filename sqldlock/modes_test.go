package sqldlock

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// v1Statements is the number of DDL statements of the v1 schema, which
// come first in every dialect's list.
const v1Statements = 3

// TestSchemaV1Upgrade checks that a driver finds a v1 schema (no holds
// table) incomplete, completes it on first use without touching the v1
// objects' rows, and that a v1 Exclusive hold and new Shared requests
// exclude each other.
func TestSchemaV1Upgrade(t *testing.T) {
	forEach(t, func(t *testing.T, s store) {
		db, err := sql.Open(s.sqlName, s.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		d, err := New(db, s.dialect, WithTable("v1_locks"))
		if err != nil {
			t.Fatal(err)
		}
		ctx := tctx(t)
		in := d
		// The v1 schema: the first three statements of every dialect (the
		// lock table, the counter and its row or, on PostgreSQL, the v1
		// function); the later versions' additions come after them.
		for _, q := range in.ops.ddl()[:v1Statements] {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatalf("v1 DDL: %v", err)
			}
		}
		if ok, _ := in.ops.schemaExists(ctx, db); ok {
			t.Fatal("schemaExists on a v1 schema")
		}
		ex := driver.Request{Key: "k", Owner: "writer", TTL: time.Minute}
		res, err := d.Acquire(ctx, ex)
		if err != nil || !res.Acquired {
			t.Fatalf("Exclusive Acquire on a v1 schema = %+v, %v", res, err)
		}
		if ok, err := in.ops.schemaExists(ctx, db); !ok || err != nil {
			t.Fatalf("schemaExists after first use = %v, %v", ok, err)
		}
		rd := driver.Request{Key: "k", Owner: "reader", TTL: time.Minute, Mode: driver.Shared}
		if res, err := d.Acquire(ctx, rd); err != nil || res.Acquired {
			t.Fatalf("Shared Acquire while a writer holds = %+v, %v", res, err)
		}
		sem := driver.Request{Key: "k", Owner: "permit", TTL: time.Minute, Mode: driver.Semaphore, Limit: 2}
		if _, err := d.Acquire(ctx, sem); !errors.Is(err, driver.ErrModeMismatch) {
			t.Fatalf("Semaphore Acquire on a mutex = %v; want ErrModeMismatch", err)
		}
		if err := d.Release(ctx, ex); err != nil {
			t.Fatal(err)
		}
		res, err = d.Acquire(ctx, rd)
		if err != nil || !res.Acquired {
			t.Fatalf("Shared Acquire on a free key = %+v, %v", res, err)
		}
		// The marker keeps writers out, whatever path they take.
		if res, err := d.Acquire(ctx, ex); err != nil || res.Acquired {
			t.Fatalf("Exclusive Acquire while a reader holds = %+v, %v", res, err)
		}
		if n, err := d.Count(ctx, "k"); err != nil || n != 2 {
			t.Errorf("Count with one reader = %d, %v; want 2 (the hold and the marker)", n, err)
		}
		if n, err := d.ForceRelease(ctx, "k"); err != nil || n != 1 {
			t.Errorf("ForceRelease = %d, %v; want 1", n, err)
		}
		if n, err := d.Count(ctx, "k"); err != nil || n != 0 {
			t.Errorf("Count after ForceRelease = %d, %v; want 0", n, err)
		}
	})
}

// TestSchemaV2Upgrade checks that on PostgreSQL a v2 schema (without the
// functions of fair drivers) is found incomplete and completed on first
// use, and that the older acquire functions, which v1 and v2 clients call,
// respect the marker a fair driver leaves for a waiter.
func TestSchemaV2Upgrade(t *testing.T) {
	s := newStore(t, Postgres)
	db := s.appDB(t)
	d, err := New(db, Postgres, WithTable("v2_locks"), WithFair(true))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := tctx(t)
	in := d
	const v2Statements = v1Statements + 2 // the holds table, NAME_acquire_v2
	for _, q := range in.ops.ddl()[:v2Statements] {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("v2 DDL: %v", err)
		}
	}
	if ok, _ := in.ops.schemaExists(ctx, db); ok {
		t.Fatal("schemaExists on a v2 schema")
	}
	holder, waiter := req("k", time.Minute), req("k", time.Minute)
	waiter.Queue = true
	mustAcquire(t, d, holder)
	if ok, err := in.ops.schemaExists(ctx, db); !ok || err != nil {
		t.Fatalf("schemaExists after first use = %v, %v", ok, err)
	}
	if res, err := d.Acquire(ctx, waiter); err != nil || res.Acquired {
		t.Fatalf("waiter's Acquire = %+v, %v; want not acquired", res, err)
	}
	if err := d.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	// Only the waiter is left: older clients see the key as held.
	for _, fn := range []string{`"v2_locks_acquire_v1"($1, $2, '', 60000000)`, `"v2_locks_acquire_v2"($1, $2, '', 60000000, false)`} {
		var acquired bool
		if err := db.QueryRowContext(ctx, `SELECT o_acquired FROM `+fn, "k", "older client").Scan(&acquired); err != nil || acquired {
			t.Errorf("%s on a key with a waiter = %v, %v; want not acquired", fn, acquired, err)
		}
	}
	if tok := mustAcquire(t, d, waiter); tok == 0 {
		t.Error("the waiter's token is 0")
	}
	if err := d.Release(ctx, waiter); err != nil {
		t.Fatal(err)
	}
	if n, err := d.Count(ctx, "k"); err != nil || n != 0 {
		t.Errorf("Count = %d, %v; want 0", n, err)
	}
}

// TestSchemaV5UpgradeMySQL checks that on MySQL/MariaDB a schema without
// the stored procedures of version 6 is found incomplete and completed on
// first use, and that a Shared hold then works through them.
func TestSchemaV5UpgradeMySQL(t *testing.T) {
	s := newStore(t, MySQL)
	db := s.appDB(t)
	d, err := New(db, MySQL, WithTable("v5_locks"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := tctx(t)
	in := d
	const v5Statements = 4 // the lock table, the counter and its row, the holds table
	for _, q := range in.ops.ddl()[:v5Statements] {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("v5 DDL: %v", err)
		}
	}
	if ok, _ := in.ops.schemaExists(ctx, db); ok {
		t.Fatal("schemaExists on a v5 schema")
	}
	r := req("k", time.Minute)
	r.Mode = driver.Shared
	mustAcquire(t, d, r)
	if ok, err := in.ops.schemaExists(ctx, db); !ok || err != nil {
		t.Fatalf("schemaExists after first use = %v, %v", ok, err)
	}
	if err := d.Refresh(ctx, r); err != nil {
		t.Fatalf("Refresh of the Shared hold: %v", err)
	}
	// Creating the schema again (another process, a later version) keeps
	// the procedures.
	if err := d.CreateSchema(ctx); err != nil {
		t.Fatalf("CreateSchema over a complete schema: %v", err)
	}
	if err := d.Release(ctx, r); err != nil {
		t.Fatal(err)
	}
	if n, err := d.Count(ctx, "k"); err != nil || n != 0 {
		t.Errorf("Count = %d, %v; want 0", n, err)
	}
}
