package sqldlock

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/sqldialect"
)

// schemaVersion is the version of the schema that the driver creates and
// uses. The lock table records it as "dlock schema N": in its comment on
// PostgreSQL and MySQL, in a comment of its CREATE TABLE on SQLite.
const schemaVersion = 1

// The schema of each dialect, in sql/DIALECT.sql: text/template source
// rendered with the names of the schema objects (names), each a plain
// identifier that checkIdent accepted, quoted for the dialect.
var (
	//go:embed sql/*.sql
	sqlFiles embed.FS
	schemas  = template.Must(template.ParseFS(sqlFiles, "sql/*.sql"))
)

// schemaScript returns the schema of dialect d rendered with names n, as a
// script for the dialect's command-line client.
func schemaScript(d Dialect, n names) string { return render(d.String()+".sql", n) }

// render returns the file of sql/ rendered with data.
func render(file string, data any) string {
	var b strings.Builder
	if err := schemas.ExecuteTemplate(&b, file, data); err != nil {
		panic("sqldlock: " + file + ": " + err.Error())
	}
	return b.String()
}

// SchemaScript returns the statements that create the schema of the store
// that u, a dlock URL of an SQL store, names: its dialect's, with its
// table's name (the table parameter, or DefaultTable). They are a script
// for the dialect's client (psql, mysql or sqlite3). It does not connect to
// the store. A bad table name is a *dlock.ArgError; a URL whose scheme no
// imported dialect package registered wraps driver.ErrUnsupported.
func SchemaScript(u *url.URL) (string, error) {
	for _, d := range []Dialect{Postgres, MySQL, SQLite} {
		if s := sqldialect.Lookup(d); s != nil && slices.Contains(s.Schemes, u.Scheme) {
			opts, err := takeOptions(u, u.Query())
			if err != nil {
				return "", err
			}
			cfg, err := newConfig(opts)
			if err != nil {
				return "", err
			}
			return schemaScript(d, newNames(d, cfg.table)), nil
		}
	}
	return "", fmt.Errorf("sqldlock: %s: not the URL of an SQL store: %w", u.Scheme, driver.ErrUnsupported)
}

// ddl returns the statements of the schema of dialect d, rendered with names
// n (see fileEntries).
func ddl(d Dialect, n names) []string {
	_, stmts := fileEntries(schemaScript(d, n))
	return stmts
}

// fileEntries returns the entries of a rendered file: the name on each
// "-- name:" line (before the arguments, if it lists them: "-- name:
// Refresh(ttl, key, owner)"), and the statement after it without the
// comments that open it, the mysql client's DELIMITER lines and its
// terminator (; or //).
func fileEntries(script string) (keys, stmts []string) {
	for _, p := range strings.Split(script, "\n-- name: ")[1:] {
		lines := strings.Split(p, "\n")
		var b strings.Builder
		for _, line := range lines[1:] {
			if !strings.HasPrefix(line, "DELIMITER ") && (b.Len() > 0 || !strings.HasPrefix(line, "--")) {
				b.WriteString(line + "\n")
			}
		}
		s := strings.TrimSpace(b.String())
		name, _, _ := strings.Cut(lines[0], "(")
		keys = append(keys, strings.TrimSpace(name))
		stmts = append(stmts, strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(s, "//"), ";")))
	}
	return keys, stmts
}

// stmtData is what a statements file is rendered with: the names of the
// schema objects, and whether the driver is fair (WithFair).
type stmtData struct {
	names
	Fair bool
}

// loadStmts renders sql/DIALECT_stmts.sql, the statements that d's driver
// runs, with data into *dst, a struct (embedded ones included) of string
// fields, one per "-- name:" entry of the same name. An entry with no field
// (or twice) and a field with no entry are errors.
func loadStmts(d Dialect, data stmtData, dst any) error {
	file := d.String() + "_stmts.sql"
	v := reflect.ValueOf(dst).Elem()
	keys, stmts := fileEntries(render(file, data))
	for i, k := range keys {
		if f := v.FieldByName(k); !f.IsValid() || f.Kind() != reflect.String || f.String() != "" || stmts[i] == "" {
			return fmt.Errorf("%s: the entry %q has no field, comes twice or is empty", file, k)
		}
		v.FieldByName(k).SetString(stmts[i])
	}
	for _, f := range reflect.VisibleFields(v.Type()) {
		if !f.Anonymous && v.FieldByIndex(f.Index).String() == "" {
			return fmt.Errorf("%s: no entry for %s", file, f.Name)
		}
	}
	return nil
}

// stmtsOf returns the statements of d's driver (see loadStmts), which the
// embedded files always give.
func stmtsOf[T any](d Dialect, n names, fair bool) *T {
	s := new(T)
	if err := loadStmts(d, stmtData{n, fair}, s); err != nil {
		panic("sqldlock: " + err.Error())
	}
	return s
}

// SchemaError reports that the lock table holds a schema other than the
// one this version of sqldlock creates and uses: one made by an earlier
// development version, which recorded no version, or a later one. The
// driver neither uses nor changes it. Drop the lock table and the objects
// named after it (see WithTable; `dlock schema --print` lists them) and let
// the driver create them again, or give the driver another table. Package
// dlock reports it as permanent (see Driver.Permanent).
type SchemaError struct {
	// Table is the lock table's name.
	Table string
	// Version is the schema version found, 0 for none.
	Version int
}

// Error names the table, the version found and what to do.
func (e *SchemaError) Error() string {
	found := "no schema version"
	if e.Version != 0 {
		found = "schema version " + strconv.Itoa(e.Version)
	}
	return fmt.Sprintf("the lock table %s holds %s, and this dlock uses version %d: drop the table and the objects named after it (dlock schema --print lists them) or use another table (WithTable, ?table=)",
		e.Table, found, schemaVersion)
}

// versionMark finds the schema version a lock table records.
var versionMark = regexp.MustCompile(`dlock schema ([0-9]+)`)

// checkVersion reads the schema version that table records with query,
// whose one row (none without the table) is text that holds the mark
// "dlock schema N", and reports whether the table exists; a version other
// than schemaVersion is a *SchemaError.
func checkVersion(ctx context.Context, db *sql.DB, query string, arg any, table string) (bool, error) {
	var text string
	err := db.QueryRowContext(ctx, query, arg).Scan(&text)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	v := 0
	if m := versionMark.FindStringSubmatch(text); m != nil {
		v, _ = strconv.Atoi(m[1])
	}
	if v != schemaVersion {
		return false, &SchemaError{Table: table, Version: v}
	}
	return true, nil
}
