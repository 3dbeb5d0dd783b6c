package sqldlock_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/sqldlock"
)

// TestSQLiteBusyIsWaitedOut checks that while another process keeps the
// SQLite file's write lock past the busy timeout, TryLock reports the key as
// not acquired (the store is busy) and a waiting Lock rides it out, taking
// the lock once the write lock is let go, even when the busy answer is its
// first.
func TestSQLiteBusyIsWaitedOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	open := func() *sql.DB {
		db, err := sql.Open("sqlite", path+"?_busy_timeout=100&_journal_mode=WAL&_txlock=immediate")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	drv, err := sqldlock.New(open(), sqldlock.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(drv)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	if err := drv.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}

	// Another "process" takes the write lock and keeps it.
	other, err := open().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}

	if _, err := c.TryLock(ctx, "k"); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, driver.ErrBusy) {
		t.Errorf("TryLock while the file is write-locked: %v; want ErrNotAcquired and ErrBusy", err)
	}
	got := make(chan error, 1)
	tried := make(chan struct{})
	go func() {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		close(tried)
		l, err := c.Lock(wctx, "k")
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	<-tried
	// The waiter's attempts meet the write lock until it is let go.
	if _, err := c.TryLock(ctx, "k2"); !errors.Is(err, driver.ErrBusy) {
		t.Fatalf("the file is not write-locked any more: %v", err)
	}
	if _, err := other.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Errorf("Lock that met a busy store: %v; want the lock once the write lock was let go", err)
	}
}
