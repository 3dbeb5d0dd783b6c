package sqldlock

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/redact"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"modernc.org/sqlite" // also registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
)

func init() {
	dlock.Register("sqlite", openSQLite)
	dlock.Register("postgres", openPostgres)
	dlock.Register("postgresql", openPostgres)
	dlock.Register("mysql", openMySQL)
}

// sqliteBusyTimeout is how long a SQLite statement of a driver opened by URL
// waits for another connection's write lock before failing with SQLITE_BUSY.
const sqliteBusyTimeout = 10 * time.Second

// defaultConnectTimeout bounds the opening of one PostgreSQL or MySQL
// connection (dial, TLS and authentication handshake) unless the URL sets
// connect_timeout (PostgreSQL, in seconds) or timeout (MySQL, a Go duration):
// a server that accepts connections and never answers makes the open fail
// after it instead of hanging.
const defaultConnectTimeout = 5 * time.Second

// urlError reports a bad URL as a *dlock.ArgError.
func urlError(u *url.URL, format string, args ...any) error {
	return &dlock.ArgError{Name: "url", Value: redact.URL(u), Reason: fmt.Sprintf(format, args...)}
}

// The dlock parameters every scheme accepts.
const (
	// paramTable names the lock table (WithTable).
	paramTable = "table"
	// paramFair makes the driver fair (WithFair): fair=1 (or true) turns
	// it on, fair=0 (or false) leaves it off.
	paramFair = "fair"
)

// takeOptions removes the dlock parameters (table, fair) from q and returns
// them as Options.
func takeOptions(u *url.URL, q url.Values) ([]Option, error) {
	var opts []Option
	if q.Has(paramTable) {
		opts = append(opts, WithTable(q.Get(paramTable)))
	}
	if q.Has(paramFair) {
		fair, err := strconv.ParseBool(q.Get(paramFair))
		if err != nil {
			return nil, urlError(u, "%s=%q is not a boolean (write %s=1 or %s=0)", paramFair, q.Get(paramFair), paramFair, paramFair)
		}
		opts = append(opts, WithFair(fair))
	}
	q.Del(paramTable)
	q.Del(paramFair)
	return opts, nil
}

// sqliteDSN returns the modernc.org/sqlite DSN for a sqlite: URL.
func sqliteDSN(u *url.URL) (string, []Option, error) {
	var path string
	switch {
	case u.Opaque != "":
		p, err := url.PathUnescape(u.Opaque)
		if err != nil {
			return "", nil, urlError(u, "bad path: %v", err)
		}
		path = p
	case u.Host != "" && u.Host != "localhost":
		return "", nil, urlError(u, "has a host (%q); write sqlite:///absolute/path.db or sqlite:relative/path.db", u.Host)
	default:
		path = u.Path
	}
	if path == ":memory:" || strings.HasPrefix(path, "file:") {
		return "", nil, urlError(u, "names no database file (in-memory databases are not supported: use the mem: scheme)")
	}
	if path == "" || strings.HasSuffix(path, "/") {
		return "", nil, urlError(u, "names no database file; write sqlite:///absolute/path.db or sqlite:relative/path.db")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", nil, urlError(u, "bad path: %v", err)
	}
	q := u.Query()
	opts, err := takeOptions(u, q)
	if err != nil {
		return "", nil, err
	}
	for k := range q {
		return "", nil, urlError(u, "unknown parameter %q (sqlite URLs accept only %s and %s)", k, paramTable, paramFair)
	}
	opts = append(opts, func(c *config) { c.file = abs })
	file := url.URL{Scheme: "file", Path: abs}
	params := url.Values{
		"_busy_timeout": {fmt.Sprint(sqliteBusyTimeout.Milliseconds())},
		"_journal_mode": {"WAL"},
		"_txlock":       {"immediate"},
	}
	return file.String() + "?" + params.Encode(), opts, nil
}

// Pool settings of the databases the driver opens itself (dlock.Open).
const (
	poolIdleConns = 16
	poolIdleTime  = time.Minute
)

// openSQLite opens sqlite:///abs/path.db or sqlite:rel/path.db.
func openSQLite(ctx context.Context, u *url.URL) (driver.Driver, error) {
	dsn, opts, err := sqliteDSN(u)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	// One connection: SQLite has one writer at a time anyway, and the
	// pool hands the connection over faster than SQLite's busy handler,
	// which sleeps. Other processes are waited for with the busy timeout.
	db.SetMaxOpenConns(1)
	return finishOpen(ctx, db, SQLite, nil, opts)
}

// pgConfig parses a postgres:// or postgresql:// URL with pgx, after
// removing the dlock parameters (table, fair).
func pgConfig(u *url.URL) (*pgx.ConnConfig, []Option, error) {
	q := u.Query()
	opts, err := takeOptions(u, q)
	if err != nil {
		return nil, nil, err
	}
	pu := *u
	pu.RawQuery = q.Encode()
	cfg, err := pgx.ParseConfig(pu.String())
	if err != nil {
		return nil, nil, urlError(u, "%v", err)
	}
	if !q.Has("connect_timeout") {
		cfg.ConnectTimeout = defaultConnectTimeout
	}
	return cfg, opts, nil
}

func openPostgres(ctx context.Context, u *url.URL) (driver.Driver, error) {
	cfg, opts, err := pgConfig(u)
	if err != nil {
		return nil, err
	}
	return finishOpen(ctx, stdlib.OpenDB(*cfg), Postgres, cfg, opts)
}

// mysqlConfig converts mysql://user:pass@host:port/db?params to a
// go-sql-driver configuration. Parameters other than table and fair are
// passed to go-sql-driver/mysql (see its DSN documentation); parseTime and
// clientFoundRows default to true.
func mysqlConfig(u *url.URL) (*mysql.Config, []Option, error) {
	q := u.Query()
	opts, err := takeOptions(u, q)
	if err != nil {
		return nil, nil, err
	}
	if !q.Has("parseTime") {
		q.Set("parseTime", "true")
	}
	if !q.Has("clientFoundRows") {
		q.Set("clientFoundRows", "true")
	}
	tlsCfg, err := mysqlTLS(u, q)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := mysql.ParseDSN("/?" + q.Encode())
	if err != nil {
		return nil, nil, urlError(u, "%v", err)
	}
	if !q.Has("timeout") {
		cfg.Timeout = defaultConnectTimeout
	}
	cfg.Logger = mysqlLogger{}
	if u.Opaque != "" {
		return nil, nil, urlError(u, "write mysql://user:password@host:port/database")
	}
	db := strings.TrimPrefix(u.Path, "/")
	if strings.Contains(db, "/") {
		return nil, nil, urlError(u, "bad database name %q", db)
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "3306"
	}
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", net.JoinHostPort(host, port), db
	// ParseDSN made the configuration of tls= for its default address
	// (verifying the name 127.0.0.1): the connector makes it again for
	// this one, unless the TLS parameters gave one (see mysqlTLS).
	cfg.TLS = tlsCfg
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	return cfg, opts, nil
}

func openMySQL(ctx context.Context, u *url.URL) (driver.Driver, error) {
	cfg, opts, err := mysqlConfig(u)
	if err != nil {
		return nil, err
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, urlError(u, "%v", err)
	}
	return finishOpen(ctx, sql.OpenDB(boundedConnector{conn, cfg.Timeout}), MySQL, nil, opts)
}

// boundedConnector bounds each new MySQL connection's whole opening, not
// only its dial (go-sql-driver's timeout parameter), by timeout: the
// handshake reads that follow the dial have no deadline of their own.
type boundedConnector struct {
	sqldriver.Connector
	timeout time.Duration
}

// Connect implements database/sql/driver.Connector.
func (c boundedConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	if c.timeout <= 0 {
		return c.Connector.Connect(ctx)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.timeout,
		fmt.Errorf("no connection within the connect timeout of %v: %w", c.timeout, context.DeadlineExceeded))
	defer cancel()
	conn, err := c.Connector.Connect(ctx)
	if err != nil && ctx.Err() != nil {
		if cause := context.Cause(ctx); err.Error() == ctx.Err().Error() {
			err = cause
		} else if !errors.Is(err, cause) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
	}
	return conn, err
}

// mysqlLogger routes what go-sql-driver/mysql would print to the standard
// logger (closed connections it finds in the pool, say) to slog at debug
// level: it is set per connector, so it changes nothing for other users of
// go-sql-driver/mysql in the process, and its errors also reach the caller
// as errors where they matter.
type mysqlLogger struct{}

// Print implements mysql.Logger.
func (mysqlLogger) Print(v ...any) {
	slog.Debug("go-sql-driver/mysql: " + strings.TrimSuffix(fmt.Sprint(v...), "\n"))
}

// finishOpen makes a driver that owns db, after checking that the database
// answers.
func finishOpen(ctx context.Context, db *sql.DB, d Dialect, pgCfg *pgx.ConnConfig, opts []Option) (driver.Driver, error) {
	if d != SQLite {
		// Keep enough idle connections for a busy client: database/sql
		// keeps two by default, and a pool that closes and reopens
		// connections under load costs a handshake per acquire.
		db.SetMaxIdleConns(poolIdleConns)
		db.SetConnMaxIdleTime(poolIdleTime)
	}
	drv, err := newDriver(db, d, true, pgCfg, opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	if err := ping(ctx, db, d); err != nil {
		drv.Close()
		return nil, fmt.Errorf("sqldlock: connecting to %s: %w", d, err)
	}
	return drv, nil
}

// ping opens the first connection. On SQLite, opening switches a new database
// file to WAL mode, which needs an exclusive lock; when several processes open
// a new file at once, SQLite may answer SQLITE_BUSY at once rather than wait
// (to avoid a deadlock between lock upgrades), so a busy open is tried again
// until the busy timeout or ctx ends.
func ping(ctx context.Context, db *sql.DB, d Dialect) error {
	deadline := time.Now().Add(sqliteBusyTimeout)
	delay := time.Millisecond
	for {
		err := db.PingContext(ctx)
		if err == nil || d != SQLite || !sqliteBusy(err) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(delay/2 + rand.N(delay/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// sqliteGates are the write gates of the SQLite files that fair drivers
// opened by URL use in this process, by absolute path.
var sqliteGates = struct {
	sync.Mutex
	m map[string]*writeGate
}{m: map[string]*writeGate{}}

// writeGate is a gate and the number of drivers using it.
type writeGate struct {
	ch   chan struct{}
	refs int
}

// sqliteGate returns the write gate of the SQLite database file at path, and
// the function that lets go of it when the driver closes.
//
// SQLite lets one connection write at a time and makes the others wait in
// its busy handler, which sleeps between attempts, up to 100ms at a time:
// under a stream of short writes a waiting connection can miss its chance
// again and again, long enough for a lock's renewal to come too late. Fair
// drivers make such streams: their waiters stay queued, and renew their
// entries, until their turn comes. The fair drivers of one process that
// share a file therefore take turns at a gate first (a channel, whose
// senders are served in order), so that the busy handler only waits for
// other processes. (Drivers that are not fair do without: there the
// client that has just released a key may take it again at once, which a
// turn at the gate would cost.)
func sqliteGate(path string) (chan struct{}, func()) {
	sqliteGates.Lock()
	defer sqliteGates.Unlock()
	g := sqliteGates.m[path]
	if g == nil {
		g = &writeGate{ch: make(chan struct{}, 1)}
		sqliteGates.m[path] = g
	}
	g.refs++
	var once sync.Once
	return g.ch, func() {
		once.Do(func() {
			sqliteGates.Lock()
			defer sqliteGates.Unlock()
			if g.refs--; g.refs == 0 {
				delete(sqliteGates.m, path)
			}
		})
	}
}

// sqliteBusy reports whether err is SQLite's SQLITE_BUSY (or an extended
// code of it).
func sqliteBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}
