// Package pgsupport is sqldlock's PostgreSQL support over pgx
// (github.com/jackc/pgx/v5): opening postgres:// URLs, reading SQLSTATEs,
// and the LISTEN connection of release notifications.
package pgsupport

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/urlutil"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib" // also registers the "pgx" database/sql driver
)

// Support is the PostgreSQL support.
var Support = &sqldialect.Support{
	Dialect:  sqldialect.Postgres,
	Package:  "github.com/dlockhq/dlock/sqldlock/postgres",
	Schemes:  []string{"postgres", "postgresql"},
	Open:     open,
	Code:     code,
	Listener: appListener,
}

// DefaultConnectTimeout bounds the opening of one connection (dial, TLS and
// authentication handshake) unless the URL sets connect_timeout (in
// seconds): a server that accepts connections and never answers makes the
// open fail after it instead of hanging.
const DefaultConnectTimeout = 5 * time.Second

// pgConfig parses a postgres:// or postgresql:// URL whose query, without
// the dlock parameters (table, fair), is q, with pgx.
func pgConfig(u *url.URL, q url.Values) (*pgx.ConnConfig, error) {
	pu := *u
	pu.RawQuery = q.Encode()
	cfg, err := pgx.ParseConfig(pu.String())
	if err != nil {
		return nil, urlutil.Error(u, "%v", err)
	}
	if !q.Has("connect_timeout") {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	return cfg, nil
}

func open(u *url.URL, q url.Values) (sqldialect.Opened, error) {
	cfg, err := pgConfig(u, q)
	if err != nil {
		return sqldialect.Opened{}, err
	}
	return sqldialect.Opened{DB: stdlib.OpenDB(*cfg), Listener: configListener(cfg), Explain: func(err error) error {
		if c, _ := code(err); c == "28000" && cfg.TLSConfig == nil && strings.Contains(err.Error(), "no encryption") {
			return fmt.Errorf("the server takes only TLS connections: add sslmode=verify-full&sslrootcert=CA.pem to the URL: %w", err)
		}
		return err
	}}, nil
}

// code returns the SQLSTATE of a server error.
func code(err error) (string, bool) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return "", false
	}
	return pe.Code, true
}

// configListener opens listening connections with cfg, the settings of the
// URL the driver was opened with.
func configListener(cfg *pgx.ConnConfig) sqldialect.Listener {
	return func(ctx context.Context, channel string, notify func(string)) (sqldialect.ListenConn, error) {
		return listen(ctx, cfg.Copy(), channel, notify)
	}
}

// appListener opens listening connections with the settings of a
// connection of db's pool, which must use the pgx database/sql driver
// (github.com/jackc/pgx/v5/stdlib); with another, the listener reports
// driver.ErrUnsupported, and waiters poll.
func appListener(db *sql.DB) sqldialect.Listener {
	return func(ctx context.Context, channel string, notify func(string)) (sqldialect.ListenConn, error) {
		c, err := db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		var cfg *pgx.ConnConfig
		err = c.Raw(func(dc any) error {
			sc, ok := dc.(*stdlib.Conn)
			if !ok {
				return fmt.Errorf("release notifications need the pgx database/sql driver (github.com/jackc/pgx/v5/stdlib), not %T: %w", dc, driver.ErrUnsupported)
			}
			cfg = sc.Conn().Config()
			return nil
		})
		c.Close()
		if err != nil {
			return nil, err
		}
		return listen(ctx, cfg, channel, notify)
	}
}

// listen opens a connection with cfg (which it changes) and runs LISTEN on
// it, unless channel is empty.
func listen(ctx context.Context, cfg *pgx.ConnConfig, channel string, notify func(string)) (sqldialect.ListenConn, error) {
	// Deliver notifications straight to notify, whatever the connection is
	// doing when they arrive. (A config copied from another connection
	// carries that connection's handler: replace it.)
	cfg.OnNotification = func(_ *pgconn.PgConn, n *pgconn.Notification) { notify(n.Payload) }
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening the listening connection: %w", err)
	}
	lc := listenConn{conn}
	if channel == "" {
		return lc, nil
	}
	if err := lc.Exec(ctx, "LISTEN "+channel); err != nil {
		lc.Close()
		return nil, fmt.Errorf("LISTEN: %w", err)
	}
	return lc, nil
}

// listenConn is a listening pgx connection.
type listenConn struct{ conn *pgx.Conn }

// Wait implements sqldialect.ListenConn: the connection's OnNotification
// handler passes the notifications on.
func (c listenConn) Wait(ctx context.Context) error { return c.conn.PgConn().WaitForNotification(ctx) }

// Exec implements sqldialect.ListenConn, with the simple query protocol.
func (c listenConn) Exec(ctx context.Context, sql string) error {
	_, err := c.conn.PgConn().Exec(ctx, sql).ReadAll()
	return err
}

// PID implements sqldialect.ListenConn.
func (c listenConn) PID() uint32 { return c.conn.PgConn().PID() }

// Ping implements sqldialect.ListenConn.
func (c listenConn) Ping(ctx context.Context) error { return c.conn.Ping(ctx) }

// Closed implements sqldialect.ListenConn.
func (c listenConn) Closed() bool { return c.conn.IsClosed() }

// Close implements sqldialect.ListenConn.
func (c listenConn) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.conn.Close(ctx)
}
