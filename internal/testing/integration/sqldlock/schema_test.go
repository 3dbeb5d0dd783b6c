package sqldlock_test

import (
	"context"
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
	. "github.com/dlockhq/dlock/sqldlock"
)

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
		schemaVersion, _ := ddl(t, s, DefaultTable)
		for _, tc := range []struct {
			table   string
			version int
		}{{"old_locks", 0}, {"next_locks", schemaVersion + 1}} {
			_, stmts := ddl(t, s, tc.table)
			mark := ""
			if tc.version == 0 {
				stmts = stmts[:1] // the lock table alone
			} else {
				mark = "dlock schema " + strconv.Itoa(tc.version)
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
				if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+s.dialect.Quote(tc.table+"_holds")).Scan(&rows); err == nil {
					t.Errorf("%s: the driver created %s_holds beside an older schema", tc.table, tc.table)
				}
			}
		}
	})
}

// ddl returns the schema version that SchemaScript's script for s with
// table records, and its statements, each without the comments that open
// it, the mysql client's DELIMITER lines and its terminator (; or //).
func ddl(t *testing.T, s store, table string) (version int, stmts []string) {
	t.Helper()
	u, err := url.Parse(s.urlWith("table=" + table))
	if err != nil {
		t.Fatal(err)
	}
	script, err := SchemaScript(u)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`dlock schema (\d+)`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("the script records no schema version:\n%s", script)
	}
	version, _ = strconv.Atoi(m[1])
	for _, p := range strings.Split(script, "\n-- name: ")[1:] {
		var b strings.Builder
		for _, line := range strings.Split(p, "\n")[1:] {
			if !strings.HasPrefix(line, "DELIMITER ") && (b.Len() > 0 || !strings.HasPrefix(line, "--")) {
				b.WriteString(line + "\n")
			}
		}
		q := strings.TrimSpace(b.String())
		stmts = append(stmts, strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(q, "//"), ";")))
	}
	return version, stmts
}

// schemaExists returns nil if table and its holds table exist in db, and
// the error of reading one of them otherwise.
func schemaExists(ctx context.Context, db *sql.DB, d Dialect, table string) error {
	for _, name := range []string{table, table + "_holds"} {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+d.Quote(name)).Scan(&n); err != nil {
			return err
		}
	}
	return nil
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
		if err := schemaExists(tctx(t), s.appDB(t), s.dialect, "printed_locks"); err != nil {
			t.Fatalf("schemaExists after the client ran the script = %v", err)
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
