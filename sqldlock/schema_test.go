package sqldlock

import (
	"database/sql"
	"errors"
	"net/url"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// TestSchemaFiles checks that each dialect's schema file renders, with
// every name quoted, into statements without their terminators, one per
// "-- name:" line, and that it records the schema version.
func TestSchemaFiles(t *testing.T) {
	for _, d := range dialects {
		n := newNames(d, DefaultTable)
		script := schemaScript(d, n)
		stmts := ddl(d, n)
		if got, want := len(stmts), strings.Count(script, "\n-- name: "); got != want || got < 3 {
			t.Errorf("%s: %d statements for %d names", d, got, want)
		}
		for _, q := range stmts {
			if strings.HasSuffix(q, ";") || strings.HasSuffix(q, "//") || strings.Contains(q, "DELIMITER") {
				t.Errorf("%s: a statement keeps its terminator or a DELIMITER line:\n%s", d, q)
			}
		}
		if strings.Contains(script, "{{") {
			t.Errorf("%s: the script has a name that is not rendered:\n%s", d, script)
		}
		for _, m := range regexp.MustCompile(`(.)`+DefaultTable).FindAllStringSubmatch(script, -1) {
			if m[1] != d.Quote("")[:1] && m[1] != "'" {
				t.Errorf("%s: a name is not quoted: %s", d, m[0])
			}
		}
		if !strings.Contains(script, "dlock schema "+strconv.Itoa(schemaVersion)) {
			t.Errorf("%s: the script does not record schema version %d", d, schemaVersion)
		}
	}
}

// TestSchemaVersion checks that a driver refuses, with a *SchemaError
// naming the version it found, a lock table that records no schema version
// (made by an earlier development version) or another one, and leaves it
// as it is; and that package dlock reports that as permanent.
func TestSchemaVersion(t *testing.T) {
	forEach(t, func(t *testing.T, s store) {
		db, err := sql.Open(s.sqlName, s.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		ctx := tctx(t)
		for _, tc := range []struct {
			table   string
			version int
		}{{"old_locks", 0}, {"next_locks", schemaVersion + 1}} {
			n := newNames(s.dialect, tc.table)
			mark := ""
			stmts := ddl(s.dialect, n)[:1] // the lock table alone
			if tc.version != 0 {
				mark, stmts = "dlock schema "+strconv.Itoa(tc.version), ddl(s.dialect, n)
			}
			for _, q := range stmts {
				if _, err := db.ExecContext(ctx, strings.ReplaceAll(q, "dlock schema "+strconv.Itoa(schemaVersion), mark)); err != nil {
					t.Fatalf("%s: %v", tc.table, err)
				}
			}
			d, err := New(db, s.dialect, WithTable(tc.table))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			_, err = d.Acquire(ctx, req("k", time.Minute))
			var se *SchemaError
			if !errors.As(err, &se) || se.Version != tc.version || se.Table != tc.table || !d.Permanent(err) {
				t.Fatalf("%s: Acquire = %v; want a permanent *SchemaError with version %d", tc.table, err, tc.version)
			}
			if !strings.Contains(err.Error(), strconv.Itoa(schemaVersion)) || !strings.Contains(err.Error(), "dlock schema --print") {
				t.Errorf("%s: the error does not name the version wanted and what to do: %v", tc.table, err)
			}
			if err := d.CreateSchema(ctx); !errors.As(err, &se) {
				t.Errorf("%s: CreateSchema = %v; want a *SchemaError", tc.table, err)
			}
			c, err := dlock.New(d)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.TryLock(ctx, "k"); !errors.Is(err, dlock.ErrPermanent) || !errors.As(err, &se) {
				t.Errorf("%s: TryLock = %v; want ErrPermanent and the *SchemaError", tc.table, err)
			}
			if tc.version == 0 {
				// Left as it is: nothing was added beside it.
				var rows int
				if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+n.Holds).Scan(&rows); err == nil {
					t.Errorf("%s: the driver created %s beside an older schema", tc.table, n.Holds)
				}
			}
		}
	})
}

// TestSchemaScript checks that the script SchemaScript returns for a
// store's URL, run by the dialect's own client (sqlite3, psql, mysql),
// creates the whole schema, with the URL's table: a driver then finds it,
// of its version, and locks with it.
func TestSchemaScript(t *testing.T) {
	forEach(t, func(t *testing.T, s store) {
		u, err := url.Parse(s.urlWith("table=printed_locks"))
		if err != nil {
			t.Fatal(err)
		}
		script, err := SchemaScript(u)
		if err != nil {
			t.Fatal(err)
		}
		var cmd *exec.Cmd
		switch s.dialect {
		case SQLite:
			cmd = exec.Command("sqlite3", "-bail", u.Path)
		case Postgres:
			cmd = exec.Command("psql", "-q", "-v", "ON_ERROR_STOP=1", s.url)
		case MySQL:
			cmd = exec.Command("mysql", "--protocol=TCP", "-h", u.Hostname(), "-P", u.Port(), "-u", u.User.Username(), strings.TrimPrefix(u.Path, "/"))
		}
		if _, err := exec.LookPath(cmd.Path); err != nil {
			t.Skipf("no %s client: %v", s.dialect, err)
		}
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		d := s.open(t, "table=printed_locks")
		if ok, err := d.ops.schemaExists(tctx(t), d.db); !ok || err != nil {
			t.Fatalf("schemaExists after the client ran the script = %v, %v", ok, err)
		}
		r := req("k", time.Minute)
		r.Mode = driver.Shared // through the holds table's functions or procedures
		mustAcquire(t, d, r)
		mustRelease(t, d, r)
		mustBeEmpty(t, d, "k")
	})
	if _, err := SchemaScript(&url.URL{Scheme: "redis"}); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("SchemaScript(redis:) = %v; want ErrUnsupported", err)
	}
}
