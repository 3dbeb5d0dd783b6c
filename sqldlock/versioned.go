package sqldlock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dlockhq/dlock"
)

// ErrConflict reports that a compare-and-set on an application table changed
// nothing: another client changed the row first (or the row is gone). Read
// the row again and retry, or give up.
var ErrConflict = errors.New("sqldlock: conflict: the row was changed by someone else or is gone")

// Execer runs a statement. *sql.DB, *sql.Tx and *sql.Conn satisfy it.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Querier runs statements and queries. *sql.DB, *sql.Tx and *sql.Conn
// satisfy it.
type Querier interface {
	Execer
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Versioned is optimistic concurrency control on the rows of an application
// table that carry a version number: the "database optimistic lock". A
// client reads a row with its version, computes the new values, and writes
// them with Update, which succeeds only if the version is still the one it
// read, and increments it:
//
//	UPDATE t SET a = ?, b = ?, version = version + 1 WHERE id = ? AND version = ?
//
// If another client updated the row in between, no row matches, nothing
// changes and Update returns ErrConflict. Because the version only grows,
// a row changed and changed back is still detected (no ABA problem).
// Nothing is locked and nothing expires, so there is no lease to lose; the
// price is that a client may have to redo its work after a conflict, which
// suits rows that are rarely written at once.
//
// IDColumn must identify at most one row (a primary or unique key) and
// VersionColumn must be an integer column. Identifiers must be plain
// ([A-Za-z_][A-Za-z0-9_]*) and are quoted for Dialect.
type Versioned struct {
	Table         string
	IDColumn      string
	VersionColumn string
	Dialect       Dialect
}

// Update sets the columns in set (in column name order) on the row whose
// IDColumn is id, if its VersionColumn is still version, and increments the
// version. It returns the new version, or an error wrapping ErrConflict if
// the row has another version or does not exist. An empty set only
// increments the version, which claims the row's current state. Bad
// identifiers are reported with a *dlock.ArgError naming them.
func (v Versioned) Update(ctx context.Context, db Execer, id any, version int64, set map[string]any) (int64, error) {
	if err := v.check(set); err != nil {
		return 0, err
	}
	d := v.Dialect
	cols := make([]string, 0, len(set))
	for c := range set {
		cols = append(cols, c)
	}
	slices.Sort(cols)
	var q strings.Builder
	args := make([]any, 0, len(set)+2)
	q.WriteString("UPDATE " + d.Quote(v.Table) + " SET ")
	for _, c := range cols {
		args = append(args, set[c])
		q.WriteString(d.Quote(c) + " = " + d.Placeholder(len(args)) + ", ")
	}
	ver := d.Quote(v.VersionColumn)
	args = append(args, id, version)
	q.WriteString(ver + " = " + ver + " + 1 WHERE " + d.Quote(v.IDColumn) + " = " + d.Placeholder(len(args)-1) +
		" AND " + ver + " = " + d.Placeholder(len(args)))
	res, err := db.ExecContext(ctx, q.String(), args...)
	if err != nil {
		return 0, fmt.Errorf("sqldlock: update %s %s=%v: %w", v.Table, v.IDColumn, id, err)
	}
	n, err := res.RowsAffected()
	switch {
	case err != nil:
		return 0, fmt.Errorf("sqldlock: update %s %s=%v: %w", v.Table, v.IDColumn, id, err)
	case n == 0:
		return 0, fmt.Errorf("sqldlock: update %s %s=%v at version %d: %w", v.Table, v.IDColumn, id, version, ErrConflict)
	case n > 1:
		return 0, fmt.Errorf("sqldlock: update %s %s=%v changed %d rows: %s must be a unique key", v.Table, v.IDColumn, id, n, v.IDColumn)
	}
	return version + 1, nil
}

func (v Versioned) check(set map[string]any) error {
	if err := v.Dialect.Check(); err != nil {
		return err
	}
	for _, c := range []struct{ name, value string }{
		{"Versioned.Table", v.Table},
		{"Versioned.IDColumn", v.IDColumn},
		{"Versioned.VersionColumn", v.VersionColumn},
	} {
		if err := checkIdent(c.name, c.value, maxIdentLen); err != nil {
			return err
		}
	}
	for c := range set {
		if err := checkIdent("set column", c, maxIdentLen); err != nil {
			return err
		}
		if strings.EqualFold(c, v.IDColumn) || strings.EqualFold(c, v.VersionColumn) {
			return &dlock.ArgError{Name: "set column", Value: c, Reason: "is the id or version column, which Update sets itself"}
		}
	}
	return nil
}
