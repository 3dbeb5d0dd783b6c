package sqldialect_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/sqldlock"
)

// TestUnregistered checks, in a program that imports package sqldlock but
// no dialect's package, that New refuses every dialect with an error that
// wraps ErrUnsupported and names the package to import, and that no SQL URL
// scheme is registered.
func TestUnregistered(t *testing.T) {
	db := new(sql.DB) // never used: New fails before
	for d, pkg := range map[sqldlock.Dialect]string{
		sqldlock.Postgres: "github.com/dlockhq/dlock/sqldlock/postgres",
		sqldlock.MySQL:    "github.com/dlockhq/dlock/sqldlock/mysql",
		sqldlock.SQLite:   "github.com/dlockhq/dlock/sqldlock/sqlite",
	} {
		drv, err := sqldlock.New(db, d)
		if err == nil {
			drv.Close()
			t.Errorf("New(%v) succeeded without the dialect's package", d)
			continue
		}
		if !errors.Is(err, dlock.ErrUnsupported) || !strings.Contains(err.Error(), `"`+pkg+`"`) {
			t.Errorf("New(%v) = %v; want ErrUnsupported naming %s", d, err, pkg)
		}
	}
	for _, s := range []string{"sqlite", "postgres", "postgresql", "mysql"} {
		if slices.Contains(dlock.Schemes(), s) {
			t.Errorf("scheme %s is registered", s)
		}
	}
	if _, err := dlock.Open(context.Background(), "sqlite:///tmp/x.db"); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Open(sqlite:) = %v; want an unknown scheme", err)
	}
}
