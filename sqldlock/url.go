package sqldlock

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/urlutil"
)

// The URL schemes are registered by the dialects' packages (sqldlock/sqlite,
// sqldlock/postgres, sqldlock/mysql), which parse the rest of the URL with
// their database/sql driver; package sqldlock takes its own parameters
// (table, fair) and makes the driver.
func init() {
	sqldialect.OpenURL = openDialectURL
	sqldialect.Classifier = (*Driver)(nil) // its Permanent looks at the error alone
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
			return nil, urlutil.Error(u, "%s=%q is not a boolean (write %s=1 or %s=0)", paramFair, q.Get(paramFair), paramFair, paramFair)
		}
		opts = append(opts, WithFair(fair))
	}
	q.Del(paramTable)
	q.Del(paramFair)
	return opts, nil
}

// Pool settings of the databases the driver opens itself (dlock.Open).
const (
	poolIdleConns = 16
	poolIdleTime  = time.Minute
)

// openDialectURL opens a driver from a URL of one of s's schemes: it takes the
// dlock parameters (table, fair) from the query, has s open the database with
// the rest, and checks that the database answers.
func openDialectURL(ctx context.Context, s *sqldialect.Support, u *url.URL) (driver.Driver, error) {
	q := u.Query()
	opts, err := takeOptions(u, q)
	if err != nil {
		return nil, err
	}
	o, err := s.Open(u, q)
	if err != nil {
		return nil, err
	}
	db, d := o.DB, s.Dialect
	if d != SQLite {
		// Keep enough idle connections for a busy client: database/sql
		// keeps two by default, and a pool that closes and reopens
		// connections under load costs a handshake per acquire.
		db.SetMaxIdleConns(poolIdleConns)
		db.SetConnMaxIdleTime(poolIdleTime)
	}
	if o.File != "" {
		opts = append(opts, func(c *config) { c.file = o.File })
	}
	drv, err := newDriver(db, d, true, o.Listener, opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	if err := ping(ctx, db, d, o.BusyTimeout); err != nil {
		drv.Close()
		if o.Explain != nil {
			err = o.Explain(err)
		}
		return nil, fmt.Errorf("sqldlock: connecting to %s: %w", d, err)
	}
	return drv, nil
}

// ping opens the first connection. On SQLite, opening switches a new database
// file to WAL mode, which needs an exclusive lock; when several processes open
// a new file at once, SQLite may answer SQLITE_BUSY at once rather than wait
// (to avoid a deadlock between lock upgrades), so a busy open is tried again
// until the busy timeout or ctx ends.
func ping(ctx context.Context, db *sql.DB, d Dialect, busyTimeout time.Duration) error {
	deadline := time.Now().Add(busyTimeout)
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
