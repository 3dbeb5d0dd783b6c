package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/fence"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

func TestMain(m *testing.M) {
	testsrv.Main(m, testsrv.Postgres, testsrv.MariaDB, testsrv.Redis)
}

var dialects = []fence.Dialect{fence.SQLite, fence.Postgres, fence.MySQL}

// sqlStore is a fresh database of one dialect.
type sqlStore struct {
	d   fence.Dialect
	db  *sql.DB
	url string // the dlock URL of the same database
}

// newStore returns a fresh, empty database of dialect d for the test, closed
// when the test ends.
func newStore(t *testing.T, d fence.Dialect) sqlStore {
	t.Helper()
	var name, dsn, url string
	switch d {
	case fence.SQLite:
		path := filepath.Join(t.TempDir(), "app.db")
		// BEGIN IMMEDIATE: a transaction waits for the write lock at once.
		name, dsn, url = "sqlite", path+"?_busy_timeout=30000&_txlock=immediate", "sqlite://"+path
	case fence.Postgres, fence.MySQL:
		srv, drv := testsrv.Postgres, "pgx"
		if d == fence.MySQL {
			srv, drv = testsrv.MariaDB, "mysql"
		}
		var err error
		url, dsn, err = testsrv.Get(t, srv).NewDatabase(testCtx(t), t.Name())
		if err != nil {
			t.Fatal(err)
		}
		name = drv
	}
	db, err := sql.Open(name, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return sqlStore{d: d, db: db, url: url}
}

// eachDialect runs test on a fresh database of every dialect.
func eachDialect(t *testing.T, test func(t *testing.T, s sqlStore)) {
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) { test(t, newStore(t, d)) })
	}
}

// quote quotes an identifier for d, for the tests' own statements.
func quote(d fence.Dialect, ident string) string {
	if d == fence.MySQL {
		return "`" + ident + "`"
	}
	return `"` + ident + `"`
}

// ph returns the n-th bind parameter marker of d.
func ph(d fence.Dialect, n int) string {
	if d == fence.Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// testCtx bounds a test's waits, so that a bug fails it instead of hanging.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// retryable reports whether err is a deadlock or serialization failure,
// after which a transaction is to be run again.
func retryable(err error) bool {
	var me *mysql.MySQLError
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &me):
		return me.Number == 1213 // deadlock
	case errors.As(err, &pe):
		return pe.Code == "40001" || pe.Code == "40P01"
	}
	return false
}

// wantStale fails the test unless err is a *StaleTokenError with these
// values.
func wantStale(t *testing.T, err error, resource string, token, seen uint64) {
	t.Helper()
	var se *fence.StaleTokenError
	if !errors.As(err, &se) || !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("err = %v, want a stale token error", err)
	}
	if se.Resource != resource || se.Token != token || se.Seen != seen {
		t.Fatalf("err = %+v, want resource %q, token %d, seen %d", *se, resource, token, seen)
	}
}

// wantArg fails the test unless err is a *dlock.ArgError for the argument
// name and the value, which its message names.
func wantArg(t *testing.T, err error, name string, value any) {
	t.Helper()
	var ae *dlock.ArgError
	if !errors.As(err, &ae) || !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("err = %v, want a *dlock.ArgError for %s", err, name)
	}
	if ae.Name != name || ae.Value != value {
		t.Fatalf("err = %+v, want argument %s = %#v", *ae, name, value)
	}
	if errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("err = %v matches ErrStaleToken", err)
	}
}
