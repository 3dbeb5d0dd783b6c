package sqldialect

import (
	"context"
	"database/sql"
	"net/url"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// Support is what sqldlock needs from a dialect's database/sql driver.
type Support struct {
	// Dialect is the dialect supported.
	Dialect Dialect
	// Package is the import path of the public package that registers
	// the support, for error messages.
	Package string
	// Schemes are the URL schemes that open a driver of the dialect.
	Schemes []string
	// Open opens the database of u, a URL of one of Schemes, whose query
	// q is u's without sqldlock's own parameters (table, fair). A bad URL
	// is reported as a *dlock.ArgError naming the redacted URL.
	Open func(u *url.URL, q url.Values) (Opened, error)
	// Code returns the code the database gave err, if err came from it:
	// the SQLSTATE on PostgreSQL, the error number (in decimal) on MySQL,
	// the primary result code (in decimal) on SQLite.
	Code func(err error) (string, bool)
	// Listener returns the listener of a database the application opened
	// itself, or nil if the dialect has no notifications. A nil Listener
	// field means the same.
	Listener func(db *sql.DB) Listener
}

// Opened is a database opened from a URL.
type Opened struct {
	// DB is the database; the driver that opened it closes it.
	DB *sql.DB
	// Listener opens listening connections to the database (nil without
	// notifications).
	Listener Listener
	// File is the absolute path of a SQLite database file.
	File string
	// BusyTimeout is how long a statement waits for another connection's
	// write lock before the database answers busy (SQLite); opening
	// retries a busy answer for that long.
	BusyTimeout time.Duration
	// Explain, if not nil, returns the error of the first connection
	// with the likely cause named, or as it is.
	Explain func(err error) error
}

// Listener opens a connection that runs LISTEN channel (a quoted
// identifier; none if it is empty) and passes the payload of every
// notification it then receives to notify.
type Listener func(ctx context.Context, channel string, notify func(payload string)) (ListenConn, error)

// ListenConn is a listening connection.
type ListenConn interface {
	// Wait returns nil once notifications have been received (and passed
	// on), or an error when ctx ends or the connection fails.
	Wait(ctx context.Context) error
	// Exec runs sql, one or more statements without parameters.
	Exec(ctx context.Context, sql string) error
	// PID returns the process ID of the connection's server process.
	PID() uint32
	// Ping checks that the connection still works.
	Ping(ctx context.Context) error
	// Closed reports whether the connection is closed (broken).
	Closed() bool
	// Close closes the connection, waiting at most a second.
	Close()
}

// OpenURL opens a driver from a URL of s.Schemes. Package sqldlock sets it
// when it is initialized, before any package that registers a Support (they
// all import sqldlock).
var OpenURL func(ctx context.Context, s *Support, u *url.URL) (driver.Driver, error)

// Classifier classifies the errors of OpenURL. Package sqldlock sets it
// too, before any dialect registers.
var Classifier driver.Classifier

var registry struct {
	sync.RWMutex
	m map[Dialect]*Support
}

// Register makes s the support of s.Dialect and registers its URL schemes
// with package dlock. Registering the same *Support again does nothing;
// registering another for the same dialect panics.
func Register(s *Support) {
	registry.Lock()
	defer registry.Unlock()
	if old := registry.m[s.Dialect]; old != nil {
		if old == s {
			return
		}
		panic("sqldlock: two registrations of the " + s.Dialect.String() + " dialect")
	}
	if registry.m == nil {
		registry.m = map[Dialect]*Support{}
	}
	registry.m[s.Dialect] = s
	for _, scheme := range s.Schemes {
		dlock.Register(scheme, func(ctx context.Context, u *url.URL) (driver.Driver, error) {
			return OpenURL(ctx, s, u)
		}, Classifier)
	}
}

// Lookup returns the support of d, or nil if no package registered it.
func Lookup(d Dialect) *Support {
	registry.RLock()
	defer registry.RUnlock()
	return registry.m[d]
}
