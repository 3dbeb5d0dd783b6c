package sqldlock

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
)

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func configOf(opts []Option) config {
	c := config{table: DefaultTable}
	for _, o := range opts {
		o(&c)
	}
	return c
}

func tableOf(opts []Option) string { return configOf(opts).table }

func fairOf(opts []Option) bool { return configOf(opts).fair }

// TestFairParam checks the fair parameter of every scheme: fair=1 (or true)
// makes the driver fair, fair=0 (or false, or no parameter) does not, other
// values are refused with an ArgError naming the URL, and the parameter is
// not passed on to the database driver.
func TestFairParam(t *testing.T) {
	parse := map[string]func(raw string) ([]Option, string, error){
		"sqlite:///tmp/x.db": func(raw string) ([]Option, string, error) {
			dsn, opts, err := sqliteDSN(mustParse(t, raw))
			return opts, dsn, err
		},
		"postgres://h/db": func(raw string) ([]Option, string, error) {
			cfg, opts, err := pgConfig(mustParse(t, raw))
			if err != nil {
				return nil, "", err
			}
			return opts, fmt.Sprint(cfg.RuntimeParams), nil
		},
		"mysql://u@h/db": func(raw string) ([]Option, string, error) {
			cfg, opts, err := mysqlConfig(mustParse(t, raw))
			if err != nil {
				return nil, "", err
			}
			return opts, cfg.FormatDSN(), nil
		},
	}
	for base, f := range parse {
		for _, tc := range []struct {
			query string
			fair  bool
		}{{"", false}, {"?fair=1", true}, {"?fair=true", true}, {"?fair=0", false}, {"?fair=false", false}, {"?table=jobs&fair=1", true}} {
			opts, passed, err := f(base + tc.query)
			if err != nil || fairOf(opts) != tc.fair {
				t.Errorf("%s%s: fair %v, %v; want %v", base, tc.query, fairOf(opts), err, tc.fair)
			}
			if strings.Contains(passed, "fair") {
				t.Errorf("%s%s: fair was passed on: %s", base, tc.query, passed)
			}
		}
		for _, q := range []string{"?fair=yes", "?fair=", "?fair=2"} {
			_, _, err := f(base + q)
			var ae *dlock.ArgError
			if !errors.As(err, &ae) || ae.Name != "url" || !strings.Contains(err.Error(), "fair") {
				t.Errorf("%s%s: err = %v; want an ArgError naming the url and fair", base, q, err)
			}
		}
	}
	// The driver opened by URL declares FIFO exactly when it is fair.
	ctx := tctx(t)
	path := filepath.Join(t.TempDir(), "locks.db")
	for q, fifo := range map[string]bool{"": false, "?fair=1": true, "?fair=0": false} {
		c, err := dlock.Open(ctx, "sqlite://"+path+q)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Capabilities().FIFO; got != fifo {
			t.Errorf("Open(%q): FIFO = %v; want %v", q, got, fifo)
		}
		c.Close()
	}
}

func TestSQLiteURL(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	const params = "?_busy_timeout=10000&_journal_mode=WAL&_txlock=immediate"
	for _, tc := range []struct{ raw, dsn, table string }{
		{"sqlite:///var/lib/app/locks.db", "file:///var/lib/app/locks.db" + params, DefaultTable},
		{"sqlite://localhost/tmp/x.db?table=jobs", "file:///tmp/x.db" + params, "jobs"},
		{"sqlite:locks.db", "file://" + filepath.Join(wd, "locks.db") + params, DefaultTable},
		{"sqlite:state/locks.db", "file://" + filepath.Join(wd, "state/locks.db") + params, DefaultTable},
		{"sqlite:///tmp/a%20b%3Fc.db", "file:///tmp/a%20b%3Fc.db" + params, DefaultTable},
	} {
		dsn, opts, err := sqliteDSN(mustParse(t, tc.raw))
		if err != nil || dsn != tc.dsn || tableOf(opts) != tc.table {
			t.Errorf("%s: DSN %q, table %q, %v; want %q, %q", tc.raw, dsn, tableOf(opts), err, tc.dsn, tc.table)
		}
	}
	for _, raw := range []string{"sqlite://host/x.db", "sqlite:///tmp/x.db?mode=ro", "sqlite:", "sqlite:///", "sqlite:///tmp/dir/", "sqlite::memory:"} {
		_, _, err := sqliteDSN(mustParse(t, raw))
		var ae *dlock.ArgError
		if !errors.As(err, &ae) || ae.Name != "url" {
			t.Errorf("%s: err = %v; want an ArgError naming the url", raw, err)
		}
	}
}

func TestMySQLURL(t *testing.T) {
	cfg, opts, err := mysqlConfig(mustParse(t, "mysql://app:p%40ss%2Fw@db.example:3307/orders?table=jobs&timeout=5s&tls=false"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.User != "app" || cfg.Passwd != "p@ss/w" || cfg.Net != "tcp" || cfg.Addr != "db.example:3307" || cfg.DBName != "orders" ||
		!cfg.ParseTime || !cfg.ClientFoundRows || cfg.Timeout != 5*time.Second || tableOf(opts) != "jobs" {
		t.Errorf("config = %+v, table %q", cfg, tableOf(opts))
	}
	if got := cfg.FormatDSN(); !strings.HasPrefix(got, "app:p@ss/w@tcp(db.example:3307)/orders?") || !strings.Contains(got, "parseTime=true") {
		t.Errorf("DSN = %q", got)
	}
	cfg, _, err = mysqlConfig(mustParse(t, "mysql://root@[::1]/app?parseTime=false"))
	if err != nil || cfg.Addr != "[::1]:3306" || cfg.ParseTime || cfg.User != "root" || cfg.Passwd != "" {
		t.Errorf("config = %+v, %v; want [::1]:3306, parseTime as given", cfg, err)
	}
	for _, raw := range []string{"mysql://u@h/a/b", "mysql:opaque", "mysql://u@h/db?timeout=forever"} {
		if _, _, err := mysqlConfig(mustParse(t, raw)); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: err = %v; want ErrInvalidArgument", raw, err)
		}
	}
}

func TestPostgresURL(t *testing.T) {
	cfg, opts, err := pgConfig(mustParse(t, "postgresql://app:pw@db.example:5433/orders?sslmode=disable&table=jobs&application_name=worker"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "db.example" || cfg.Port != 5433 || cfg.Database != "orders" || cfg.User != "app" || cfg.Password != "pw" ||
		cfg.RuntimeParams["application_name"] != "worker" || tableOf(opts) != "jobs" {
		t.Errorf("config = %+v %v, table %q", cfg.Config, cfg.RuntimeParams, tableOf(opts))
	}
	if _, ok := cfg.RuntimeParams["table"]; ok {
		t.Error("table was passed to the server as a runtime parameter")
	}
	if _, _, err := pgConfig(mustParse(t, "postgres://h/db?sslmode=bogus")); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("bad sslmode: err = %v; want ErrInvalidArgument", err)
	}
}

func TestRegistered(t *testing.T) {
	for _, s := range []string{"mysql", "postgres", "postgresql", "sqlite"} {
		if !slices.Contains(dlock.Schemes(), s) {
			t.Errorf("scheme %q is not registered", s)
		}
	}
	ctx := tctx(t)
	path := filepath.Join(t.TempDir(), "locks.db")
	c, err := dlock.Open(ctx, "sqlite://"+path+"?table=jobs")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() != 1 {
		t.Errorf("first token = %d; want 1", l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := dlock.Open(ctx, "sqlite://"+path+"?table=no-such"); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Open with a bad table = %v; want ErrInvalidArgument", err)
	}
	if _, err := dlock.Open(ctx, "sqlite://"+filepath.Join(path, "sub", "x.db")); err == nil {
		t.Error("Open of a file in a missing directory succeeded")
	}
}

func TestNewArguments(t *testing.T) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, name := range []string{"", "1locks", "lo-cks", "s.locks", `lo"cks`, "läcks", strings.Repeat("l", maxTableLen+1)} {
		_, err := New(db, SQLite, WithTable(name))
		var ae *dlock.ArgError
		if !errors.As(err, &ae) || ae.Name != "table" || ae.Value != name {
			t.Errorf("WithTable(%q): err = %v; want an ArgError naming the table", name, err)
		}
	}
	for _, name := range []string{"locks", "_x", "Locks_2", strings.Repeat("l", maxTableLen)} {
		d, err := New(db, SQLite, WithTable(name))
		if err != nil {
			t.Errorf("WithTable(%q): %v", name, err)
			continue
		}
		d.Close()
	}
	if _, err := New(db, Dialect(7)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("New with a bad dialect = %v; want ErrInvalidArgument", err)
	}
	if _, err := New(nil, SQLite); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("New with a nil db = %v; want ErrInvalidArgument", err)
	}
}

func TestSchemaDoc(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	// The package documentation shows the statements of each dialect.
	var text strings.Builder
	for _, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimPrefix(strings.TrimPrefix(line, "//"), "\t")
		text.WriteString(line + "\n")
	}
	for _, o := range []ops{
		pgOps{n: names{raw: DefaultTable, table: Postgres.Quote(DefaultTable), seq: Postgres.Quote(DefaultTable + "_token_seq"),
			acquire: Postgres.Quote(DefaultTable + "_acquire_v1"), acq2: Postgres.Quote(DefaultTable + "_acquire_v2"),
			acq3: Postgres.Quote(DefaultTable + "_acquire_v3"), rel1: Postgres.Quote(DefaultTable + "_release_v1"),
			wait1: Postgres.Quote(DefaultTable + "_wait_v1"),
			holds: Postgres.Quote(DefaultTable + "_holds")}},
		myOps{n: names{raw: DefaultTable, table: MySQL.Quote(DefaultTable), seq: MySQL.Quote(DefaultTable + "_seq"), holds: MySQL.Quote(DefaultTable + "_holds")}},
		liteOps{n: names{raw: DefaultTable, table: SQLite.Quote(DefaultTable), seq: SQLite.Quote(DefaultTable + "_seq"), holds: SQLite.Quote(DefaultTable + "_holds")}},
	} {
		for _, q := range o.ddl() {
			if !strings.Contains(text.String(), q+"\n") {
				t.Errorf("doc.go does not show this statement:\n%s", q)
			}
		}
	}
}

func TestInfo(t *testing.T) {
	for in, want := range map[string]string{
		"host:42":     "host:42",
		"a\x00b":      "ab",
		"bad\xffutf8": "bad\uFFFDutf8",
	} {
		if got := cleanInfo(in); got != want {
			t.Errorf("cleanInfo(%q) = %q; want %q", in, got, want)
		}
	}
	long := "x" + strings.Repeat("é", maxInfoLen) // é is 2 bytes
	got := cleanInfo(long)
	if len(got) != maxInfoLen-1 || got != long[:maxInfoLen-1] {
		t.Errorf("cleanInfo of %d bytes = %d bytes; want %d, cut before a rune", len(long), len(got), maxInfoLen-1)
	}
}

func TestPrefixHelpers(t *testing.T) {
	for in, want := range map[string]string{"": "%", "a": "a%", "a_b%c!": "a!_b!%c!!%"} {
		if got := likePrefix(in); got != want {
			t.Errorf("likePrefix(%q) = %q; want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{"a": "b", "ab\xff": "ac", "a\xff\xff": "b"} {
		if got, ok := prefixEnd(in); !ok || got != want {
			t.Errorf("prefixEnd(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "\xff\xff"} {
		if _, ok := prefixEnd(in); ok {
			t.Errorf("prefixEnd(%q) has an end", in)
		}
	}
}
