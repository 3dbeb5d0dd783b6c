package sqldlock

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// TestMySQLLockUnlessHeld checks the first lock of acquire's transaction on
// MySQL/MariaDB: it leaves another owner's live hold unlocked, so that the
// holder's renewal does not wait for the transaction to end, and it locks
// an expired row, reporting each.
func TestMySQLLockUnlessHeld(t *testing.T) {
	s := newStore(t, MySQL)
	d := s.open(t)
	o := internal(d).ops.(myOps)
	db := s.appDB(t)
	ctx := tctx(t)
	held := req("held", time.Minute)
	mustAcquire(t, d, held)
	expired := req("expired", 20*time.Millisecond)
	mustAcquire(t, d, expired)
	time.Sleep(50 * time.Millisecond) // let the lease of "expired" end
	begin := func() *sql.Tx {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback() })
		return tx
	}
	contender := func(key string) driver.Request { r := req(key, time.Minute); r.Owner = "contender"; return r }

	tx := begin()
	if ok, err := o.lockUnlessHeld(ctx, tx, contender("held")); ok || err != nil {
		t.Fatalf("lockUnlessHeld of a live foreign hold = %v, %v; want false", ok, err)
	}
	// The transaction stays open: the renewal must not wait for it.
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := d.Refresh(rctx, held); err != nil {
		t.Fatalf("Refresh while a contender's transaction is open: %v", err)
	}

	tx = begin()
	if ok, err := o.lockUnlessHeld(ctx, tx, contender("expired")); !ok || err != nil {
		t.Fatalf("lockUnlessHeld of an expired hold = %v, %v; want true", ok, err)
	}
	// Now locked: another contender's attempt waits for tx.
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := d.Acquire(sctx, contender("expired")); err == nil {
		t.Error("Acquire of a row locked by another transaction did not wait for it")
	}
}
