package sqldlock

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/dlockhq/dlock/driver"
)

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
		in := internal(d)
		// The v1 schema: every statement but the v2 additions (the holds
		// table, and on PostgreSQL the v2 function), which come last.
		ddl := in.ops.ddl()
		v2 := 1
		if s.dialect == Postgres {
			v2 = 2
		}
		for _, q := range ddl[:len(ddl)-v2] {
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
