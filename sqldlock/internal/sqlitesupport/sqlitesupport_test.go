package sqlitesupport

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/dlockhq/dlock"
)

func TestSQLiteURL(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	const params = "?_busy_timeout=10000&_journal_mode=WAL&_txlock=immediate"
	for _, tc := range []struct{ raw, dsn, abs string }{
		{"sqlite:///var/lib/app/locks.db", "file:///var/lib/app/locks.db" + params, "/var/lib/app/locks.db"},
		{"sqlite://localhost/tmp/x.db", "file:///tmp/x.db" + params, "/tmp/x.db"},
		{"sqlite:locks.db", "file://" + filepath.Join(wd, "locks.db") + params, filepath.Join(wd, "locks.db")},
		{"sqlite:state/locks.db", "file://" + filepath.Join(wd, "state/locks.db") + params, filepath.Join(wd, "state/locks.db")},
		{"sqlite:///tmp/a%20b%3Fc.db", "file:///tmp/a%20b%3Fc.db" + params, "/tmp/a b?c.db"},
	} {
		u, err := url.Parse(tc.raw)
		if err != nil {
			t.Fatal(err)
		}
		dsn, abs, err := sqliteDSN(u, u.Query())
		if err != nil || dsn != tc.dsn || abs != tc.abs {
			t.Errorf("%s: DSN %q, file %q, %v; want %q, %q", tc.raw, dsn, abs, err, tc.dsn, tc.abs)
		}
	}
	for _, raw := range []string{"sqlite://host/x.db", "sqlite:///tmp/x.db?mode=ro", "sqlite:", "sqlite:///", "sqlite:///tmp/dir/", "sqlite::memory:"} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = sqliteDSN(u, u.Query())
		var ae *dlock.ArgError
		if !errors.As(err, &ae) || ae.Name != "url" {
			t.Errorf("%s: err = %v; want an ArgError naming the url", raw, err)
		}
	}
}
