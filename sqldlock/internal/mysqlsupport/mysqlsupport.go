// Package mysqlsupport is sqldlock's MySQL and MariaDB support over
// github.com/go-sql-driver/mysql: opening mysql:// URLs and reading error
// numbers.
package mysqlsupport

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/urlutil"
	"github.com/go-sql-driver/mysql" // also registers the "mysql" database/sql driver
)

// Support is the MySQL support.
var Support = &sqldialect.Support{
	Dialect: sqldialect.MySQL,
	Package: "github.com/dlockhq/dlock/sqldlock/mysql",
	Schemes: []string{"mysql"},
	Open:    open,
	Code:    code,
}

// DefaultConnectTimeout bounds the opening of one connection (dial, TLS and
// authentication handshake) unless the URL sets timeout (a Go duration): a
// server that accepts connections and never answers makes the open fail
// after it instead of hanging.
const DefaultConnectTimeout = 5 * time.Second

// mysqlConfig converts mysql://user:pass@host:port/db?params, whose query
// without the dlock parameters (table, fair) is q, to a go-sql-driver
// configuration. The parameters in q are passed to go-sql-driver/mysql (see
// its DSN documentation); parseTime and clientFoundRows default to true.
func mysqlConfig(u *url.URL, q url.Values) (*mysql.Config, error) {
	if !q.Has("parseTime") {
		q.Set("parseTime", "true")
	}
	if !q.Has("clientFoundRows") {
		q.Set("clientFoundRows", "true")
	}
	tlsCfg, err := mysqlTLS(u, q)
	if err != nil {
		return nil, err
	}
	if err := urlutil.ConnectTimeout(u, q, "timeout"); err != nil {
		return nil, err
	}
	cfg, err := mysql.ParseDSN("/?" + q.Encode())
	if err != nil {
		return nil, urlutil.Error(u, "%v", err)
	}
	if !q.Has("timeout") {
		cfg.Timeout = DefaultConnectTimeout
	}
	cfg.Logger = mysqlLogger{}
	if u.Opaque != "" {
		return nil, urlutil.Error(u, "write mysql://user:password@host:port/database")
	}
	db := strings.TrimPrefix(u.Path, "/")
	if strings.Contains(db, "/") {
		return nil, urlutil.Error(u, "bad database name %q", db)
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
	return cfg, nil
}

func open(u *url.URL, q url.Values) (sqldialect.Opened, error) {
	cfg, err := mysqlConfig(u, q)
	if err != nil {
		return sqldialect.Opened{}, err
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return sqldialect.Opened{}, urlutil.Error(u, "%v", err)
	}
	return sqldialect.Opened{DB: sql.OpenDB(boundedConnector{conn, cfg.Timeout})}, nil
}

// code returns the error number of a server error.
func code(err error) (string, bool) {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return "", false
	}
	return strconv.Itoa(int(me.Number)), true
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
