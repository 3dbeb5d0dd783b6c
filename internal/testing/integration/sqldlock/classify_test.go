package sqldlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	. "github.com/dlockhq/dlock/sqldlock"
)

func TestPermanentClassifies(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("sqldlock: acquire %q: %w", "k", err) }
	lite, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	_, noTable := lite.Exec("SELECT * FROM no_such_table")
	_, syntax := lite.Exec("SELEC 1")
	if noTable == nil || syntax == nil {
		t.Fatalf("SQLite accepted bad statements: %v, %v", noTable, syntax)
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "28P01", Message: "password authentication failed"}, true},
		{&pgconn.PgError{Code: "42P01", Message: `relation "dlock_locks" does not exist`}, true},
		{&pgconn.PgError{Code: "42501", Message: "permission denied for schema public"}, true},
		{&pgconn.PgError{Code: "3D000", Message: `database "x" does not exist`}, true},
		{&pgconn.PgError{Code: "40001", Message: "could not serialize access"}, false},
		{&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, false},
		{&pgconn.ConnectError{Config: &pgconn.Config{}}, false},
		{&mysql.MySQLError{Number: 1045, SQLState: [5]byte{'2', '8', '0', '0', '0'}, Message: "Access denied"}, true},
		{&mysql.MySQLError{Number: 1146, Message: "Table 'x.dlock_locks' doesn't exist"}, true},
		{&mysql.MySQLError{Number: 1049, Message: "Unknown database 'x'"}, true},
		{&mysql.MySQLError{Number: 1142, Message: "INSERT command denied"}, true},
		{&mysql.MySQLError{Number: 1213, Message: "Deadlock found"}, false},
		{&mysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"}, false},
		{errors.Join(errors.New("x"), &mysql.MySQLError{Number: 1146}), true},
		{errors.New("Error 1146 (42S02): not a MySQLError"), false},
		{noTable, true},
		{syntax, false},
		{driver.ErrBusy, false},
	} {
		if got := (*Driver)(nil).Permanent(wrap(tc.err)); got != tc.want {
			t.Errorf("(*Driver)(nil).Permanent(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}

// firstAnswer is a real driver that closes held when an Acquire first
// finds the key held.
type firstAnswer struct {
	*Driver
	once sync.Once
	held chan struct{}
}

func (f *firstAnswer) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	res, err := f.Driver.Acquire(ctx, req)
	if err == nil && !res.Acquired {
		f.once.Do(func() { close(f.held) })
	}
	return res, err
}

func (f *firstAnswer) Permanent(err error) bool { return f.Driver.Permanent(err) }

// TestWaitEndsOnMissingTable checks, on every dialect, that a Lock that
// waits for a held key ends at once when the lock table is dropped under
// it (the schema is created once per driver, so it is not made again).
func TestWaitEndsOnMissingTable(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) {
			s := newStore(t, d)
			holder, err := dlock.New(s.open(t))
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			w := &firstAnswer{Driver: s.open(t), held: make(chan struct{})}
			waiter, err := dlock.New(w)
			if err != nil {
				t.Fatal(err)
			}
			defer waiter.Close()
			ctx := context.Background()
			if _, err := holder.Lock(ctx, "k", dlock.WithTTL(time.Minute)); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, time.Hour)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				l, err := waiter.Lock(wctx, "k", dlock.WithBackoff(time.Millisecond, 20*time.Millisecond))
				if err == nil {
					l.Release(ctx)
				}
				done <- err
			}()
			<-w.held
			db := s.appDB(t)
			q := func(name string) string { return d.Quote(name) }
			mustExec(t, db, "DROP TABLE "+q(DefaultTable+"_holds"), "DROP TABLE "+q(DefaultTable))
			err = <-done
			if wctx.Err() != nil {
				t.Fatalf("the wait ran until its context ended: %v", err)
			}
			if !errors.Is(err, dlock.ErrPermanent) {
				t.Fatalf("Lock = %v; want ErrPermanent", err)
			}
		})
	}
}
