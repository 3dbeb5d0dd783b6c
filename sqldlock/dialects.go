package sqldlock

import (
	"fmt"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/sqldialect"
)

// dialectPackages are the packages that register each dialect's support:
// its database/sql driver, its URL schemes, its error codes and, on
// PostgreSQL, its notifications. Package sqldlock imports none of them, so
// that a program compiles only the database drivers it uses.
var dialectPackages = map[Dialect]string{
	Postgres: "github.com/dlockhq/dlock/sqldlock/postgres",
	MySQL:    "github.com/dlockhq/dlock/sqldlock/mysql",
	SQLite:   "github.com/dlockhq/dlock/sqldlock/sqlite",
}

// support returns the registered support of d, or an error wrapping
// driver.ErrUnsupported that names the package to import.
func support(d Dialect) (*sqldialect.Support, error) {
	if s := sqldialect.Lookup(d); s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("sqldlock: the %s dialect is not registered: import _ %q: %w", d, dialectPackages[d], driver.ErrUnsupported)
}

// errCode returns the code the database of dialect d gave err, or "" if err
// did not come from the database: the SQLSTATE on PostgreSQL, the error
// number in decimal on MySQL, the primary result code in decimal on SQLite.
func errCode(d Dialect, err error) string {
	if err == nil {
		return ""
	}
	s := sqldialect.Lookup(d)
	if s == nil {
		return ""
	}
	c, _ := s.Code(err)
	return c
}

// sqliteBusyCode is SQLITE_BUSY, the primary result code of a statement that
// did not get the file's write lock in time.
const sqliteBusyCode = "5"

// sqliteBusy reports whether err is SQLite's SQLITE_BUSY (or an extended
// code of it).
func sqliteBusy(err error) bool { return errCode(SQLite, err) == sqliteBusyCode }
