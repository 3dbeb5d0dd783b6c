package sqldlock_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dlockhq/dlock"
	. "github.com/dlockhq/dlock/sqldlock"
)

// TestURLOptions checks that the driver opened by URL declares FIFO exactly
// when it is fair.
func TestURLOptions(t *testing.T) {
	ctx := tctx(t)
	path := filepath.Join(t.TempDir(), "locks.db")
	for q, fifo := range map[string]bool{"": false, "?fair=1": true, "?fair=0": false} {
		c, err := dlock.Open(ctx, "sqlite://"+path+q)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Capabilities().FIFO; got != fifo {
			t.Errorf("Open(%q): FIFO = %v; want %v", q, got, fifo)
		}
		c.Close()
	}
}

func TestRegistered(t *testing.T) {
	for _, s := range []string{"mysql", "postgres", "postgresql", "sqlite"} {
		if !slices.Contains(dlock.Schemes(), s) {
			t.Errorf("scheme %q is not registered", s)
		}
	}
	ctx := tctx(t)
	path := filepath.Join(t.TempDir(), "locks.db")
	c, err := dlock.Open(ctx, "sqlite://"+path+"?table=jobs")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() != 1 {
		t.Errorf("first token = %d; want 1", l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := dlock.Open(ctx, "sqlite://"+path+"?table=no-such"); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Open with a bad table = %v; want ErrInvalidArgument", err)
	}
	if _, err := dlock.Open(ctx, "sqlite://"+filepath.Join(path, "sub", "x.db")); err == nil {
		t.Error("Open of a file in a missing directory succeeded")
	}
}

func TestNewArguments(t *testing.T) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, name := range []string{"", "1locks", "lo-cks", "s.locks", `lo"cks`, "läcks", strings.Repeat("l", 48+1)} {
		_, err := New(db, SQLite, WithTable(name))
		var ae *dlock.ArgError
		if !errors.As(err, &ae) || ae.Name != "table" || ae.Value != name {
			t.Errorf("WithTable(%q): err = %v; want an ArgError naming the table", name, err)
		}
	}
	for _, name := range []string{"locks", "_x", "Locks_2", strings.Repeat("l", 48)} {
		d, err := New(db, SQLite, WithTable(name))
		if err != nil {
			t.Errorf("WithTable(%q): %v", name, err)
			continue
		}
		d.Close()
	}
	if _, err := New(db, Dialect(7)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("New with a bad dialect = %v; want ErrInvalidArgument", err)
	}
	if _, err := New(nil, SQLite); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("New with a nil db = %v; want ErrInvalidArgument", err)
	}
}
