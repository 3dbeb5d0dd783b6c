// Package sqldialect names the SQL dialects dlock speaks and checks and
// quotes identifiers for them. Packages sqldlock and fence share it (their
// Dialect types are this one), without either importing the other's
// database drivers.
//
// It also connects package sqldlock to the code that needs a database/sql
// driver of one dialect (support.go). Package sqldlock imports no
// database/sql driver: each dialect's support (sqldlock/internal/pgsupport,
// mysqlsupport, sqlitesupport) does, and the public packages
// sqldlock/postgres, sqldlock/mysql and sqldlock/sqlite register it here,
// so that a program compiles only the drivers of the dialects it imports.
package sqldialect

import (
	"strconv"

	"github.com/dlockhq/dlock"
)

// Dialect is an SQL dialect.
type Dialect int

// The dialects.
const (
	// Postgres is PostgreSQL.
	Postgres Dialect = iota + 1
	// MySQL is MySQL or MariaDB.
	MySQL
	// SQLite is SQLite 3.
	SQLite
)

// String returns "postgres", "mysql" or "sqlite".
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

// Check reports a Dialect that is none of the three as a *dlock.ArgError
// named "dialect".
func (d Dialect) Check() error {
	switch d {
	case Postgres, MySQL, SQLite:
		return nil
	}
	return &dlock.ArgError{Name: "dialect", Value: d, Reason: "is not Postgres, MySQL or SQLite"}
}

// Quote quotes an identifier that CheckIdent accepted.
func (d Dialect) Quote(ident string) string {
	if d == MySQL {
		return "`" + ident + "`"
	}
	return `"` + ident + `"`
}

// Placeholder returns the n-th (1-based) bind parameter marker.
func (d Dialect) Placeholder(n int) string {
	if d == Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// MaxIdentLen is the longest identifier of PostgreSQL (MySQL allows 64,
// SQLite more).
const MaxIdentLen = 63

// CheckIdent reports whether s is a plain SQL identifier: an ASCII letter or
// underscore followed by ASCII letters, digits and underscores, at most max
// bytes. Plain identifiers need no escaping in any dialect; they are quoted
// all the same, so reserved words are safe too. The error is a
// *dlock.ArgError named what, with the bad value.
func CheckIdent(what, s string, max int) error {
	reason := ""
	switch {
	case s == "":
		reason = "must not be empty"
	case len(s) > max:
		reason = "is longer than " + strconv.Itoa(max) + " bytes"
	default:
		for i := 0; i < len(s); i++ {
			c := s[i]
			letter := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
			if !letter && (i == 0 || c < '0' || c > '9') {
				reason = "is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*)"
				break
			}
		}
	}
	if reason == "" {
		return nil
	}
	return &dlock.ArgError{Name: what, Value: s, Reason: reason}
}
