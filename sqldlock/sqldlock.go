package sqldlock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/dlockhq/dlock/internal/errtext"
	"github.com/dlockhq/dlock/internal/sqldialect"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// Dialect is the SQL dialect of the database behind a *sql.DB. It is the
// same type as fence.Dialect.
type Dialect = sqldialect.Dialect

// The supported dialects.
const (
	// Postgres is PostgreSQL 10 or later. Notifications (LISTEN/NOTIFY)
	// need the database/sql driver of github.com/jackc/pgx/v5/stdlib.
	Postgres = sqldialect.Postgres
	// MySQL is MySQL 5.7 or later, or MariaDB 10.2 or later, with InnoDB
	// tables, through github.com/go-sql-driver/mysql.
	MySQL = sqldialect.MySQL
	// SQLite is SQLite 3.35 or later, through modernc.org/sqlite.
	SQLite = sqldialect.SQLite
)

// DefaultTable is the name of the lock table unless WithTable says otherwise.
const DefaultTable = "dlock_locks"

// Limits of the driver, reported in its Capabilities.
const (
	// maxKeyLen is the longest key, in bytes (the MySQL column is
	// VARBINARY(255)).
	maxKeyLen = 255
	// minTTL is the shortest lease accepted.
	minTTL = 10 * time.Millisecond
	// maxInfoLen is the longest Request.Info stored; longer text is cut at
	// a UTF-8 boundary.
	maxInfoLen = 1024
	// maxLimit is the largest semaphore limit: the lim column of the holds
	// table is a 32-bit integer (integer, INT) in every dialect.
	maxLimit = math.MaxInt32
	// maxTTL is the longest lease, package dlock's default maximum. The
	// schema stores far later expiries (timestamptz to the year 294276,
	// MySQL DATETIME(6) to 9999 — not TIMESTAMP, which ends in 2038 —,
	// SQLite milliseconds in 64 bits, leases as 64-bit microsecond or
	// millisecond counts), so the bound is dlock's policy, not the
	// schema's.
	maxTTL = dlock.DefaultMaxTTL
)

// Option configures a Driver.
type Option func(*config)

type config struct {
	table string
	fair  bool
	// file is the SQLite database file of a driver opened by URL; a fair
	// one's writes then take the file's gate (see sqliteGate).
	file string
}

// WithTable sets the name of the lock table (default DefaultTable). The
// names of the other schema objects are derived from it: NAME_holds, NAME_seq
// (MySQL, SQLite) or NAME_token_seq (PostgreSQL), the functions (PostgreSQL)
// NAME_acquire, NAME_release and NAME_wait, the functions or procedures
// (MySQL) NAME_acquire_multi, NAME_refresh_multi and NAME_release_multi, and
// the PostgreSQL notification channel NAME. The name must be a plain identifier
// ([A-Za-z_][A-Za-z0-9_]*, at most 48 bytes); it is resolved like any
// unqualified name (search_path on PostgreSQL, the connection's database on
// MySQL). New reports a bad name with a *dlock.ArgError.
func WithTable(name string) Option {
	return func(c *config) { c.table = name }
}

// WithFair makes the driver fair (or not): waiters acquire a key in the
// order they first asked for it, and the driver declares
// Capabilities.FIFO, so that dlock.Fair locks work. Without it (the
// default) the wait queue serves writer preference only, and a newcomer may
// take a key ahead of earlier waiters. Fairness costs throughput on a
// contended key: each release hands the key to the next waiter in line,
// which on MySQL and SQLite must first wake from its polling backoff (see
// Fairness in the package documentation). The URL parameter fair=1 sets it.
func WithFair(fair bool) Option {
	return func(c *config) { c.fair = fair }
}

// Driver is a dlock driver over a database/sql database, as returned by New
// (and by dlock.Open for the sqlite, postgres, postgresql and mysql URL
// schemes). Besides driver.Driver it implements driver.Lister,
// driver.ForceReleaser, driver.HoldReader and driver.Notifier, whatever the
// dialect: on PostgreSQL, Subscribe delivers release notifications (LISTEN/NOTIFY), so
// that waiters wake as soon as a lock is released; on MySQL and SQLite, and
// on PostgreSQL over a database/sql driver other than pgx's, it returns
// driver.ErrUnsupported, and package dlock's waiters poll. All methods are
// safe for concurrent use.
//
// Acquire, Refresh and Release are each one atomic step on the database (one
// statement or one short transaction); leases expire on the database's clock.
// Serialization and deadlock failures that concurrent acquirers cause are
// reported by Acquire as "not acquired", never as an error or a success.
// Errors name the operation and the key. Close stops the driver's background
// work and closes the database only if the driver opened it (dlock.Open);
// later calls return an error.
type Driver struct {
	db      *sql.DB
	dialect Dialect
	ops     ops
	n       names
	ownsDB  bool
	fair    bool                // WithFair
	listen  sqldialect.Listener // opens the PostgreSQL listener's connections; nil without notifications
	unGate  func()              // SQLite: lets go of the file's write gate, if it took one

	schemaSem  chan struct{} // one creator at a time
	schemaDone atomic.Bool
	lisSem     chan struct{} // one listener start at a time

	ctx    context.Context // ends when Close is called
	cancel context.CancelFunc
	wg     sync.WaitGroup // background goroutines: sweeper, listener

	sweepEvery time.Duration // see sweepEvery and sweepGrace; tests change them
	sweepGrace time.Duration

	// queued holds queueKey of the owners whose Acquire with Request.Queue
	// did not succeed (so that they may have a queue entry), until they
	// acquire or release. A successful Acquire of theirs deletes the entry;
	// on a fair driver their Acquire goes straight to the holds table.
	queued sync.Map

	mu        sync.Mutex
	closed    bool
	lastSweep time.Time
	sweeping  bool
	lis       *listener
	// The gate connections kept between waits, and the timer that
	// closes them (see gate.go).
	idleGates  []*gateConn
	gateLinger *time.Timer
	gatesBack  int           // closed subscriptions whose connections are on their way back
	gateBack   chan struct{} // closed when one is back
}

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.Lister        = (*Driver)(nil)
	_ driver.ForceReleaser = (*Driver)(nil)
	_ driver.Notifier      = (*Driver)(nil)
	_ driver.HoldReader    = (*Driver)(nil)
)

// Dialect returns the driver's SQL dialect.
func (d *Driver) Dialect() Dialect { return d.dialect }

// names are the names of a driver's schema objects, quoted, that the schema
// files (sql/*.sql) are rendered with; see WithTable.
type names struct {
	Name         string // the table name, unquoted; also the NOTIFY channel
	Table        string // the lock table
	Seq          string // the token counter: a sequence (PostgreSQL) or a one-row table
	Holds        string // the holds table (Shared and Semaphore holds, waiters)
	Acquire      string // PostgreSQL: the Exclusive acquire function
	Release      string // PostgreSQL: the release function of fair drivers
	Wait         string // PostgreSQL: the function that queues a waiter behind an Exclusive hold
	AcquireMulti string // the holds-table acquire function (PostgreSQL) or procedure (MySQL)
	RefreshMulti string // the holds-table refresh function or procedure
	ReleaseMulti string // the holds-table release function or procedure
}

// newNames returns the names of the schema objects of table in dialect d.
func newNames(d Dialect, table string) names {
	seq := "_seq"
	if d == Postgres {
		seq = "_token_seq"
	}
	return names{Name: table, Table: d.Quote(table), Seq: d.Quote(table + seq), Holds: d.Quote(table + "_holds"),
		Acquire: d.Quote(table + "_acquire"), Release: d.Quote(table + "_release"), Wait: d.Quote(table + "_wait"),
		AcquireMulti: d.Quote(table + "_acquire_multi"), RefreshMulti: d.Quote(table + "_refresh_multi"),
		ReleaseMulti: d.Quote(table + "_release_multi")}
}

// Channel is the PostgreSQL notification channel, for the schema files.
func (n names) Channel() string { return n.Name }

// GoneSeconds is goneFor in seconds, for the schema files.
func (names) GoneSeconds() int64 { return int64(goneFor / time.Second) }

// New returns a driver that keeps its locks in db, whose SQL dialect is d.
// It does not own db: Close leaves it open. The schema (see the package
// documentation) is created on first use unless it exists; call
// Driver.CreateSchema to create it explicitly.
//
// The dialect's package must be imported, for its database/sql driver and
// error codes: sqldlock/postgres, sqldlock/mysql or sqldlock/sqlite
// (import _ "github.com/dlockhq/dlock/sqldlock/postgres", say); without it
// New returns an error that wraps dlock.ErrUnsupported and names the
// package.
//
// For SQLite, open db in WAL mode with a busy timeout and immediate
// transactions, for example
// "file:/path/locks.db?_busy_timeout=10000&_journal_mode=WAL&_txlock=immediate",
// or use dlock.Open with a sqlite: URL, which does that. For release
// notifications on PostgreSQL, db must use the pgx driver
// (github.com/jackc/pgx/v5/stdlib).
func New(db *sql.DB, d Dialect, opts ...Option) (*Driver, error) {
	if db == nil {
		return nil, &dlock.ArgError{Name: "db", Value: nil, Reason: "must not be nil"}
	}
	if err := d.Check(); err != nil {
		return nil, err
	}
	s, err := support(d)
	if err != nil {
		return nil, err
	}
	var listen sqldialect.Listener
	if s.Listener != nil {
		listen = s.Listener(db)
	}
	return newDriver(db, d, false, listen, opts)
}

// newDriver returns a driver over db (which it closes on Close if owns is
// set) whose release notifications, if any, come through listen.
func newDriver(db *sql.DB, d Dialect, owns bool, listen sqldialect.Listener, opts []Option) (*Driver, error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	n := newNames(d, cfg.table)
	drv := &Driver{db: db, dialect: d, n: n, ownsDB: owns, listen: listen, fair: cfg.fair,
		schemaSem: make(chan struct{}, 1), lisSem: make(chan struct{}, 1),
		sweepEvery: sweepEvery, sweepGrace: sweepGrace}
	drv.ctx, drv.cancel = context.WithCancel(context.Background())
	switch d {
	case Postgres:
		drv.ops = pgOps{n: n, fair: cfg.fair, q: stmtsOf[pgStmts](d, n, cfg.fair)}
	case MySQL:
		drv.ops = myOps{n: n, fair: cfg.fair, q: stmtsOf[myStmts](d, n, cfg.fair)}
	default:
		o := liteOps{n: n, fair: cfg.fair, q: stmtsOf[liteStmts](d, n, cfg.fair)}
		if cfg.fair && cfg.file != "" {
			o.gate, drv.unGate = sqliteGate(cfg.file)
		}
		drv.ops = o
	}
	return drv, nil
}

// newConfig applies opts and checks the table name.
func newConfig(opts []Option) (config, error) {
	cfg := config{table: DefaultTable}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg, checkIdent("table", cfg.table, maxTableLen)
}

// ops are the dialect-specific steps. Each method is one atomic operation on
// the database (one statement or one transaction).
type ops interface {
	// createSchema runs the schema's statements (see ddl) safely against
	// concurrent creators.
	createSchema(ctx context.Context, db *sql.DB) error
	// schemaExists reports whether the schema exists (see checkVersion):
	// a *SchemaError if the lock table holds another schema, another error
	// for "unknown", treated as "no".
	schemaExists(ctx context.Context, db *sql.DB) (bool, error)
	// acquire takes or extends the hold; ttl is in the dialect's units.
	// queued reports that req.Owner may have a queue entry, which a
	// successful Exclusive acquisition must then delete (the uncontended
	// path has none, and skips that statement).
	acquire(ctx context.Context, db *sql.DB, req driver.Request, ttl int64, queued bool) (driver.Result, error)
	// refresh extends a live hold of req.Owner and reports whether there was one.
	refresh(ctx context.Context, db *sql.DB, req driver.Request, ttl int64) (bool, error)
	// release deletes req.Owner's row and reports whether there was one
	// and whether it was live.
	release(ctx context.Context, db *sql.DB, req driver.Request) (found, live bool, err error)
	// forceRelease deletes every row of key and reports how many were live.
	forceRelease(ctx context.Context, db *sql.DB, key string) (int, error)
	list(ctx context.Context, db *sql.DB, prefix string) ([]driver.Holder, error)
	count(ctx context.Context, db *sql.DB, prefix string) (int, error)
	// sweep deletes at most limit rows expired for longer than grace.
	sweep(ctx context.Context, db *sql.DB, grace time.Duration, limit int) (int, error)
	// unit is the resolution of TTLs and expiry times.
	unit() time.Duration
	// modes are the modes the dialect implements.
	modes() driver.ModeSet
}

// Opportunistic cleanup of the rows of crashed holders: at most once per
// sweepEvery per Driver, an Acquire call starts a background deletion of up
// to sweepBatch rows that expired more than sweepGrace ago.
const (
	sweepEvery   = 2 * time.Second
	sweepGrace   = time.Second
	sweepBatch   = 100
	sweepTimeout = 10 * time.Second
)

// errClosed is returned by every method after Close.
var errClosed = errors.New("driver closed")

// begin checks that the driver is open, ctx live and req valid, and creates
// the schema if needed.
func (d *Driver) begin(ctx context.Context, req *driver.Request) error {
	if err := d.usable(ctx); err != nil {
		return err
	}
	if req != nil && !d.ops.modes().Has(req.Mode) {
		return fmt.Errorf("%s mode: %w", req.Mode, driver.ErrUnsupported)
	}
	return d.ensureSchema(ctx, false)
}

// usable reports an error if the driver is closed or ctx is done.
func (d *Driver) usable(ctx context.Context) error {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return errClosed
	}
	return ctx.Err()
}

// fail wraps err with the operation and key (unless err names the key
// already), and with ctx's error when ctx is done (drivers do not always
// wrap it themselves).
func fail(ctx context.Context, op, key string, err error) error {
	k := errtext.Keyed(key, err)
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("sqldlock: %s%s: %w: %w", op, k, cerr, err)
	}
	if sqliteBusy(err) {
		// Another process kept the file's write lock past the busy
		// timeout; the statement, and its transaction, did nothing.
		return fmt.Errorf("sqldlock: %s%s: %w: %w", op, k, driver.ErrBusy, err)
	}
	return fmt.Errorf("sqldlock: %s%s: %w", op, k, err)
}

// ensureSchema creates the schema once per Driver, unless it exists (or
// always, if force is set). A failure (a cancelled context, a lost
// connection) is not remembered: the next call tries again.
func (d *Driver) ensureSchema(ctx context.Context, force bool) error {
	if !force && d.schemaDone.Load() {
		return nil
	}
	select {
	case d.schemaSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-d.schemaSem }()
	if !force && d.schemaDone.Load() {
		return nil
	}
	ok, err := d.ops.schemaExists(ctx, d.db)
	if errors.As(err, new(*SchemaError)) {
		return err
	}
	if force || !ok {
		if err := d.ops.createSchema(ctx, d.db); err != nil {
			return fmt.Errorf("creating schema: %w", err)
		}
	}
	d.schemaDone.Store(true)
	return nil
}

// CreateSchema creates the lock table and the objects it needs, if they do
// not exist (the statements are those of SchemaScript). The driver does
// this itself on first use unless they exist; CreateSchema is for teams that
// run DDL at deploy time, with a more privileged user than the
// application's. It is safe to run concurrently from several processes. A
// lock table of another schema version is a *SchemaError.
func (d *Driver) CreateSchema(ctx context.Context) error {
	if err := d.usable(ctx); err != nil {
		return fail(ctx, "create schema", d.n.Name, err)
	}
	if err := d.ensureSchema(ctx, true); err != nil {
		return fail(ctx, "create schema", d.n.Name, err)
	}
	return nil
}

// ttlUnits converts a TTL to the dialect's units, rounding down, and returns
// the lease actually granted.
func (d *Driver) ttlUnits(ttl time.Duration) (int64, time.Duration, error) {
	u := d.ops.unit()
	n := int64(ttl / u)
	if n <= 0 {
		return 0, 0, fmt.Errorf("ttl %v is shorter than the database's resolution of %v", ttl, u)
	}
	return n, time.Duration(n) * u, nil
}

// cleanInfo makes Request.Info storable in every dialect: valid UTF-8 without
// NUL bytes, at most maxInfoLen bytes.
func cleanInfo(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) > maxInfoLen {
		i := maxInfoLen
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = s[:i]
	}
	return s
}

// Acquire implements driver.Driver. It is one atomic step: it takes the key
// if no row exists or the row's lease has expired (on the database clock;
// on a fair driver, only if no other owner waits in the queue), extends the
// lease if req.Owner already holds it, and otherwise changes nothing but
// req.Owner's queue entry and reports how long the holder's lease has left.
// Serialization and deadlock failures caused by contention are reported as
// not acquired.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := d.begin(ctx, &req); err != nil {
		return driver.Result{}, fail(ctx, "acquire", req.Key, err)
	}
	n, granted, err := d.ttlUnits(req.TTL)
	if err != nil {
		return driver.Result{}, fail(ctx, "acquire", req.Key, err)
	}
	req.Info = cleanInfo(req.Info)
	qk := queueKey(req)
	_, queued := d.queued.Load(qk)
	actx := ctx
	if d.dialect == MySQL {
		var cancel context.CancelFunc
		actx, cancel = d.settle(ctx)
		defer cancel()
	}
	res, err := d.ops.acquire(actx, d.db, req, n, queued)
	switch {
	case err == nil && res.Acquired:
		d.queued.Delete(qk)
	case req.Queue:
		// Not acquired, or an unknown outcome: a queue entry may exist.
		d.queued.Store(qk, struct{}{})
	}
	if err != nil {
		return driver.Result{}, fail(ctx, "acquire", req.Key, err)
	}
	if res.Acquired && granted != req.TTL {
		res.TTL = granted
	}
	d.maybeSweep()
	return res, nil
}

// settleTimeout bounds how long an Acquire on MySQL waits for the server's
// answer after its context ended.
const settleTimeout = 10 * time.Second

// settle returns a context for an Acquire on MySQL/MariaDB that outlives
// ctx's cancellation, up to settleTimeout or until Close.
// go-sql-driver/mysql abandons a statement by closing its connection, which
// the server notices only once the statement has run, and a CALL of
// NAME_acquire_multi is a whole acquisition: the driver waits for its answer
// instead, so that an acquisition that the caller gave up on is over (and
// known) before package dlock releases it.
func (d *Driver) settle(ctx context.Context) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	stop := context.AfterFunc(d.ctx, cancel)
	return sctx, func() { stop(); cancel() }
}

// Refresh implements driver.Driver: a conditional UPDATE of the row of
// req.Key and req.Owner whose lease has not expired.
func (d *Driver) Refresh(ctx context.Context, req driver.Request) error {
	if err := d.begin(ctx, &req); err != nil {
		return fail(ctx, "refresh", req.Key, err)
	}
	n, _, err := d.ttlUnits(req.TTL)
	if err != nil {
		return fail(ctx, "refresh", req.Key, err)
	}
	ok, err := d.ops.refresh(ctx, d.db, req, n)
	if err != nil {
		return fail(ctx, "refresh", req.Key, err)
	}
	if !ok {
		return fail(ctx, "refresh", req.Key, driver.ErrNotOwner)
	}
	return nil
}

// Release implements driver.Driver: it deletes the row of req.Key and
// req.Owner (expired or not) and, on PostgreSQL, notifies waiters in the
// same statement.
func (d *Driver) Release(ctx context.Context, req driver.Request) error {
	if err := d.begin(ctx, &req); err != nil {
		return fail(ctx, "release", req.Key, err)
	}
	found, live, err := d.ops.release(ctx, d.db, req)
	if err == nil {
		d.queued.Delete(queueKey(req))
	}
	switch {
	case err != nil:
		return fail(ctx, "release", req.Key, err)
	case !found:
		return fail(ctx, "release", req.Key, driver.ErrNotOwner)
	case !live:
		return fail(ctx, "release", req.Key, fmt.Errorf("the lease had expired: %w", driver.ErrNotOwner))
	}
	return nil
}

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Modes:         d.ops.modes(),
		FIFO:          d.fair,
		DurableTokens: true,
		ServerClock:   true,
		MaxKeyLen:     maxKeyLen,
		MinTTL:        minTTL,
		MaxTTL:        maxTTL,
		MaxLimit:      maxLimit,
		// pgx abandons a request when its context ends (by a socket
		// deadline), and every PostgreSQL step is one statement.
		// go-sql-driver/mysql cannot abandon a COMMIT, and SQLite's busy
		// waits do not watch the context: those requests are left to
		// package dlock's goroutines.
		CancelsPromptly: d.Dialect() == Postgres,
		// A hold is a row with its owner and expiry.
		PortableHolds: true,
		LockDelay:     true, // the lease is a TTL on the record
	}
}

// List implements driver.Lister: the live holders of keys starting with
// prefix, sorted by key.
func (d *Driver) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	if err := d.begin(ctx, nil); err != nil {
		return nil, fail(ctx, "list", prefix, err)
	}
	hs, err := d.ops.list(ctx, d.db, prefix)
	if err != nil {
		return nil, fail(ctx, "list", prefix, err)
	}
	return hs, nil
}

// ReadHold implements driver.HoldReader: it lists the live holders of key
// (a range of the primary key) and returns owner's.
func (d *Driver) ReadHold(ctx context.Context, key, owner string) (driver.Holder, error) {
	if err := d.begin(ctx, nil); err != nil {
		return driver.Holder{}, fail(ctx, "read hold", key, err)
	}
	hs, err := d.ops.list(ctx, d.db, key)
	if err != nil {
		return driver.Holder{}, fail(ctx, "read hold", key, err)
	}
	for _, h := range hs {
		if h.Key == key && h.Owner == owner {
			return h, nil
		}
	}
	return driver.Holder{}, fail(ctx, "read hold", key, driver.ErrNotOwner)
}

// ForceRelease implements driver.ForceReleaser: it deletes the row of key,
// whoever holds it, notifies waiters on PostgreSQL, and reports whether a
// live hold was removed (0 or 1).
func (d *Driver) ForceRelease(ctx context.Context, key string) (int, error) {
	if err := d.begin(ctx, nil); err != nil {
		return 0, fail(ctx, "force release", key, err)
	}
	n, err := d.ops.forceRelease(ctx, d.db, key)
	if err != nil {
		return 0, fail(ctx, "force release", key, err)
	}
	return n, nil
}

// Count returns the number of rows kept for keys that start with prefix,
// live or expired. Tests use it to check that nothing is left behind.
func (d *Driver) Count(ctx context.Context, prefix string) (int, error) {
	if err := d.begin(ctx, nil); err != nil {
		return 0, fail(ctx, "count", prefix, err)
	}
	n, err := d.ops.count(ctx, d.db, prefix)
	if err != nil {
		return 0, fail(ctx, "count", prefix, err)
	}
	return n, nil
}

// Close stops the driver's background work (the PostgreSQL listener, a
// running cleanup) and, if the driver opened the database itself (dlock.Open
// with a URL), closes it. Holds are not released. Later calls of any method
// return an error; Close itself is idempotent.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	if d.lis != nil && d.lis.idle != nil {
		d.lis.idle.Stop()
	}
	if d.gateLinger != nil {
		d.gateLinger.Stop()
	}
	d.mu.Unlock()
	d.cancel()
	d.wg.Wait()
	d.retireGates()
	if d.unGate != nil {
		d.unGate()
	}
	if d.ownsDB {
		return d.db.Close()
	}
	return nil
}

// maybeSweep starts a background cleanup if one is due.
func (d *Driver) maybeSweep() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.sweeping || time.Since(d.lastSweep) < d.sweepEvery {
		return
	}
	d.sweeping = true
	d.lastSweep = time.Now()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		ctx, cancel := context.WithTimeout(d.ctx, sweepTimeout)
		defer cancel()
		// Errors do not matter: the next sweep tries again.
		_, _ = d.ops.sweep(ctx, d.db, d.sweepGrace, sweepBatch)
		d.mu.Lock()
		d.sweeping = false
		d.mu.Unlock()
	}()
}

// queueKey identifies req's owner on its key in Driver.queued.
func queueKey(req driver.Request) string { return req.Key + "\x00" + req.Owner }

// rollback ends tx, ignoring the error (the transaction may already be over
// because its context ended).
func rollback(tx *sql.Tx) { _ = tx.Rollback() }
