package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dlockhq/dlock/internal/sqldialect"

	"github.com/dlockhq/dlock"
)

// Dialect is an SQL dialect. It must be given explicitly: a *sql.Tx does
// not say which server it talks to. It is the same type as
// sqldlock.Dialect.
type Dialect = sqldialect.Dialect

// The supported dialects.
const (
	// Postgres is PostgreSQL 9.5 or later (ON CONFLICT).
	Postgres = sqldialect.Postgres
	// MySQL is MySQL 5.7 or later, or MariaDB 10.2 or later, with InnoDB
	// tables.
	MySQL = sqldialect.MySQL
	// SQLite is SQLite 3.35 or later (RETURNING).
	SQLite = sqldialect.SQLite
)

// DefaultTable is the fence table of NewSQL when no table is given.
const DefaultTable = "dlock_fence"

// DefaultTokenColumn is the token column of an Update that names none.
const DefaultTokenColumn = "fence_token"

// maxIdentLen is the longest identifier accepted: PostgreSQL's limit.
const maxIdentLen = sqldialect.MaxIdentLen

// Querier runs statements. *sql.DB, *sql.Conn and *sql.Tx satisfy it.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var (
	_ Querier = (*sql.DB)(nil)
	_ Querier = (*sql.Conn)(nil)
	_ Querier = (*sql.Tx)(nil)
)

// SQL guards resources kept in an SQL database: a fence table records the
// highest token accepted for each resource name (Check), and a table of the
// application's can carry a token column of its own (Update). Create it with
// NewSQL; it is safe for concurrent use.
type SQL struct {
	d     Dialect
	table string // quoted
	name  string // as given

	upsert  string
	highest string // reads a resource's token
	current string // reads it as it is, locked, past MySQL's snapshot
}

// NewSQL returns the guards of dialect d with the fence table table
// (DefaultTable if empty). The table name must be a plain identifier
// ([A-Za-z_][A-Za-z0-9_]*, at most 63 bytes); it is quoted in every
// statement. A bad dialect or name is a *dlock.ArgError naming it.
func NewSQL(d Dialect, table string) (*SQL, error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	if table == "" {
		table = DefaultTable
	}
	if err := checkIdent("table", table); err != nil {
		return nil, err
	}
	s := &SQL{d: d, table: d.Quote(table), name: table}
	t := s.table
	if d == MySQL {
		s.upsert = `INSERT INTO ` + t + ` (resource, token) VALUES (?, ?) ON DUPLICATE KEY UPDATE token = GREATEST(token, ?)`
	} else {
		s.upsert = `INSERT INTO ` + t + ` (resource, token) VALUES (` + d.Placeholder(1) + `, ` + d.Placeholder(2) + `)
ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE ` + t + `.token <= excluded.token
RETURNING token`
	}
	s.highest = `SELECT token FROM ` + t + ` WHERE resource = ` + d.Placeholder(1)
	s.current = s.highest
	if d != SQLite { // SQLite's writers are serialized
		s.current += ` FOR UPDATE`
	}
	return s, nil
}

// Dialect returns the dialect of s.
func (s *SQL) Dialect() Dialect { return s.d }

// Table returns the name of the fence table.
func (s *SQL) Table() string { return s.name }

// CreateTable creates the fence table if it does not exist. It is
// idempotent; on PostgreSQL, two first calls at the same moment may still
// fail on each other, so call it once, at deployment or start-up.
func (s *SQL) CreateTable(ctx context.Context, db Querier) error {
	if err := checkUse(ctx, "db", db); err != nil {
		return err
	}
	var q string
	switch s.d {
	case Postgres:
		q = `CREATE TABLE IF NOT EXISTS ` + s.table + ` (resource TEXT NOT NULL PRIMARY KEY, token BIGINT NOT NULL)`
	case MySQL:
		q = `CREATE TABLE IF NOT EXISTS ` + s.table + ` (resource VARBINARY(255) NOT NULL PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB`
	case SQLite:
		q = `CREATE TABLE IF NOT EXISTS ` + s.table + ` (resource TEXT NOT NULL PRIMARY KEY, token INTEGER NOT NULL) WITHOUT ROWID`
	}
	if _, err := db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("fence: creating table %s: %w", s.name, err)
	}
	return nil
}

// Check records token as the highest accepted for resource if it is at least
// the highest accepted so far (equal tokens pass: one holder may write
// twice), and otherwise changes nothing and returns a *StaleTokenError.
// resource names what the lock protects, usually the lock's key; the
// tokens of one resource must all come from one lock key.
//
// Run it in the transaction that writes the resource, before the write, and
// commit only if it returned nil: Check locks the resource's row of the fence
// table until the transaction ends, so a concurrent transaction with another
// token waits, then sees the outcome of this one. Of two transactions racing
// with tokens 5 and 6, the one with 5 is refused if 6 got there first, and
// if 5 got there first, 6 passes after it commits or rolls back. Checked
// outside a transaction (q a *sql.DB), the token is recorded but nothing
// ties it to the write that follows.
//
// At PostgreSQL's READ COMMITTED (its default) a waiting transaction goes on
// with the committed row; at REPEATABLE READ or SERIALIZABLE it fails with a
// serialization error instead, and is to be retried. MySQL's and SQLite's
// usual levels need no retry.
//
// Tokens are stored in a signed 64-bit column: a token above math.MaxInt64
// is refused with a *dlock.ArgError, as are the token 0 and a resource name
// that is empty, longer than 255 bytes, not valid UTF-8 or contains a NUL
// byte (the rules of dlock's keys), a nil ctx and a nil q.
func (s *SQL) Check(ctx context.Context, q Querier, resource string, token uint64) error {
	if err := checkUse(ctx, "q", q); err != nil {
		return err
	}
	if err := checkResource(resource); err != nil {
		return err
	}
	if err := checkToken(token, true); err != nil {
		return err
	}
	tok := int64(token)
	if s.d == MySQL {
		// GREATEST keeps a higher token in place. Rows affected: 1 for an
		// insert, 2 for a change, 0 for a row left as it was (1 with the
		// client's found-rows flag): the locked row tells which.
		res, err := q.ExecContext(ctx, s.upsert, resource, tok, tok)
		if err != nil {
			return fmt.Errorf("fence: checking %q: %w", resource, err)
		}
		if n, err := res.RowsAffected(); err == nil && n == 2 {
			return nil
		}
		var seen int64
		if err := q.QueryRowContext(ctx, s.current, resource).Scan(&seen); err != nil {
			return fmt.Errorf("fence: checking %q: %w", resource, err)
		}
		if seen > tok {
			return &StaleTokenError{Resource: resource, Token: token, Seen: uint64(seen)}
		}
		return nil
	}
	var got int64
	err := q.QueryRowContext(ctx, s.upsert, resource, tok).Scan(&got)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("fence: checking %q: %w", resource, err)
	}
	// The row holds a higher token (and is locked by the upsert).
	stale := &StaleTokenError{Resource: resource, Token: token}
	var seen int64
	if err := q.QueryRowContext(ctx, s.current, resource).Scan(&seen); err != nil {
		return errors.Join(stale, fmt.Errorf("fence: reading the token of %q: %w", resource, err))
	}
	stale.Seen = uint64(seen)
	return stale
}

// Highest returns the highest token accepted for resource, or 0 if none
// was. A bad resource name, ctx or q is refused as by Check.
func (s *SQL) Highest(ctx context.Context, q Querier, resource string) (uint64, error) {
	if err := checkUse(ctx, "q", q); err != nil {
		return 0, err
	}
	if err := checkResource(resource); err != nil {
		return 0, err
	}
	var seen int64
	err := q.QueryRowContext(ctx, s.highest, resource).Scan(&seen)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fence: reading the token of %q: %w", resource, err)
	}
	return uint64(seen), nil
}

// Update is a guarded UPDATE of rows of the application's own table, which
// carries the token of their last write in a column (a BIGINT, NULL or 0
// for rows never written under a token):
//
//	UPDATE table SET col = ?, ..., token_col = ?
//	WHERE key = ? AND ... AND COALESCE(token_col, 0) <= ?
//
// All names must be plain identifiers ([A-Za-z_][A-Za-z0-9_]*, at most 63
// bytes; they are quoted) and all values are bind parameters.
type Update struct {
	// Table is the table to update.
	Table string
	// Set gives the columns to write and their values; it may be empty,
	// to record the token alone. It must not name the token column.
	Set map[string]any
	// Where selects the row by equality of each column with its value
	// (all must hold): give its key. It must not be empty, and no value may
	// be nil. Should it select several rows, each is guarded on its own:
	// those that hold no higher token are written.
	Where map[string]any
	// TokenColumn is the token column (DefaultTokenColumn if empty).
	TokenColumn string
}

// Update writes u's columns and token to the row u selects if it holds no
// higher token (equal tokens pass: one holder may write twice). If it holds
// one, nothing is changed and the error is a *StaleTokenError with the
// row's token as Seen; if no row matches, the error wraps sql.ErrNoRows.
// Bad names or values, the token 0, a token above math.MaxInt64, a nil ctx
// and a nil q are a *dlock.ArgError, and nothing is sent.
//
// In a transaction, the row stays locked until it ends, so the outcome
// holds until the commit, and a read earlier in the transaction does not
// mislead it: the token is compared as the row is, not as the transaction's
// snapshot saw it.
func (s *SQL) Update(ctx context.Context, q Querier, u Update, token uint64) error {
	if err := checkUse(ctx, "q", q); err != nil {
		return err
	}
	stmt, err := s.buildUpdate(u, token)
	if err != nil {
		return err
	}
	res, err := q.ExecContext(ctx, stmt.update, stmt.updateArgs...)
	if err != nil {
		return fmt.Errorf("fence: updating %s: %w", stmt.resource, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("fence: updating %s: %w", stmt.resource, err)
	} else if n > 0 {
		return nil
	}
	// Nothing changed: no row matches, a row holds a higher token, or (on
	// MySQL) the rows already held these values.
	rows, err := q.QueryContext(ctx, stmt.read, stmt.readArgs...)
	if err != nil {
		return fmt.Errorf("fence: updating %s: %w", stmt.resource, err)
	}
	defer rows.Close()
	found, seen := false, int64(0)
	for rows.Next() {
		var t int64
		if err := rows.Scan(&t); err != nil {
			return fmt.Errorf("fence: updating %s: %w", stmt.resource, err)
		}
		found, seen = true, max(seen, t)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("fence: updating %s: %w", stmt.resource, err)
	}
	switch {
	case !found:
		return fmt.Errorf("fence: updating %s: no row matches: %w", stmt.resource, sql.ErrNoRows)
	case seen > int64(token):
		return &StaleTokenError{Resource: stmt.resource, Token: token, Seen: uint64(seen)}
	}
	return nil
}

// updateStmt is an Update's statement and the read that explains a change
// of no row.
type updateStmt struct {
	update, read         string
	updateArgs, readArgs []any
	resource             string // table and key, for messages
}

// buildUpdate checks u and token and builds their statements.
func (s *SQL) buildUpdate(u Update, token uint64) (updateStmt, error) {
	var st updateStmt
	d := s.d
	if err := checkIdent("table", u.Table); err != nil {
		return st, err
	}
	tc := u.TokenColumn
	if tc == "" {
		tc = DefaultTokenColumn
	}
	if err := checkIdent("token column", tc); err != nil {
		return st, err
	}
	if len(u.Where) == 0 {
		return st, &dlock.ArgError{Name: "where", Value: nil, Reason: "must not be empty: it would update every row"}
	}
	if err := checkToken(token, true); err != nil {
		return st, err
	}
	if _, ok := u.Set[tc]; ok {
		return st, &dlock.ArgError{Name: "set column", Value: tc, Reason: "is the token column"}
	}
	set, where := sortedKeys(u.Set), sortedKeys(u.Where)
	for _, c := range set {
		if err := checkIdent("set column", c); err != nil {
			return st, err
		}
	}
	desc := make([]string, len(where))
	for i, c := range where {
		if err := checkIdent("where column", c); err != nil {
			return st, err
		}
		if u.Where[c] == nil {
			return st, &dlock.ArgError{Name: "where " + c, Value: nil, Reason: "is nil, which no row equals"}
		}
		desc[i] = fmt.Sprintf("%s=%v", c, u.Where[c])
	}
	tok := int64(token)
	col := d.Quote(tc)
	var b strings.Builder
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return d.Placeholder(len(args))
	}
	b.WriteString("UPDATE " + d.Quote(u.Table) + " SET ")
	for _, c := range set {
		b.WriteString(d.Quote(c) + " = " + arg(u.Set[c]) + ", ")
	}
	b.WriteString(col + " = " + arg(tok) + " WHERE ")
	// conds writes the conditions, numbered after the parameters in args.
	conds := func() string {
		var w strings.Builder
		for i, c := range where {
			if i > 0 {
				w.WriteString(" AND ")
			}
			w.WriteString(d.Quote(c) + " = " + arg(u.Where[c]))
		}
		return w.String()
	}
	b.WriteString(conds() + " AND COALESCE(" + col + ", 0) <= " + arg(tok))
	st.update, st.updateArgs = b.String(), args

	args = nil
	st.read = "SELECT COALESCE(" + col + ", 0) FROM " + d.Quote(u.Table) + " WHERE " + conds()
	if d != SQLite {
		st.read += " FOR UPDATE" // a current read, not MySQL's snapshot
	}
	st.readArgs = args
	st.resource = u.Table + " " + strings.Join(desc, " ")
	return st, nil
}

// sortedKeys returns the keys of m in order, so that the statement of an
// Update is the same each time.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// checkIdent checks an identifier of at most maxIdentLen bytes (see
// sqldialect.CheckIdent).
func checkIdent(what, s string) error { return sqldialect.CheckIdent(what, s, maxIdentLen) }
