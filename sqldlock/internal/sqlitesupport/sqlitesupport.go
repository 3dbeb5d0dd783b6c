// Package sqlitesupport is sqldlock's SQLite support over modernc.org/sqlite:
// opening sqlite: URLs and reading result codes.
package sqlitesupport

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/urlutil"
	"modernc.org/sqlite" // also registers the "sqlite" database/sql driver
)

// Support is the SQLite support.
var Support = &sqldialect.Support{
	Dialect: sqldialect.SQLite,
	Package: "github.com/dlockhq/dlock/sqldlock/sqlite",
	Schemes: []string{"sqlite"},
	Open:    open,
	Code:    code,
}

// busyTimeout is how long a SQLite statement of a driver opened by URL waits
// for another connection's write lock before failing with SQLITE_BUSY.
const busyTimeout = 10 * time.Second

// sqliteDSN returns the modernc.org/sqlite DSN for a sqlite: URL whose query,
// without the dlock parameters (table, fair), is q, and the database file's
// absolute path.
func sqliteDSN(u *url.URL, q url.Values) (dsn, abs string, err error) {
	var path string
	switch {
	case u.Opaque != "":
		p, err := url.PathUnescape(u.Opaque)
		if err != nil {
			return "", "", urlutil.Error(u, "bad path: %v", err)
		}
		path = p
	case u.Host != "" && u.Host != "localhost":
		return "", "", urlutil.Error(u, "has a host (%q); write sqlite:///absolute/path.db or sqlite:relative/path.db", u.Host)
	default:
		path = u.Path
	}
	if path == ":memory:" || strings.HasPrefix(path, "file:") {
		return "", "", urlutil.Error(u, "names no database file (in-memory databases are not supported: use the mem: scheme)")
	}
	if path == "" || strings.HasSuffix(path, "/") {
		return "", "", urlutil.Error(u, "names no database file; write sqlite:///absolute/path.db or sqlite:relative/path.db")
	}
	abs, err = filepath.Abs(path)
	if err != nil {
		return "", "", urlutil.Error(u, "bad path: %v", err)
	}
	for k := range q {
		return "", "", urlutil.Error(u, "unknown parameter %q (sqlite URLs accept only table and fair)", k)
	}
	file := url.URL{Scheme: "file", Path: abs}
	params := url.Values{
		"_busy_timeout": {fmt.Sprint(busyTimeout.Milliseconds())},
		"_journal_mode": {"WAL"},
		"_txlock":       {"immediate"},
	}
	return file.String() + "?" + params.Encode(), abs, nil
}

// open opens sqlite:///abs/path.db or sqlite:rel/path.db.
func open(u *url.URL, q url.Values) (sqldialect.Opened, error) {
	dsn, abs, err := sqliteDSN(u, q)
	if err != nil {
		return sqldialect.Opened{}, err
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return sqldialect.Opened{}, err
	}
	// One connection: SQLite has one writer at a time anyway, and the
	// pool hands the connection over faster than SQLite's busy handler,
	// which sleeps. Other processes are waited for with the busy timeout.
	db.SetMaxOpenConns(1)
	return sqldialect.Opened{DB: db, File: abs, BusyTimeout: busyTimeout}, nil
}

// code returns the primary result code of a SQLite error (its extended code
// without the extension).
func code(err error) (string, bool) {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return "", false
	}
	return strconv.Itoa(se.Code() & 0xff), true
}
