package sqldlock

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// myOps implements the MySQL/MariaDB dialect.
//
// Acquire first reads the key's row with a plain, non-locking read (see
// acquire): a contender for a key that another owner holds Exclusive, live,
// is turned away, or queued behind the hold, with statements that each
// lock rows only while they run. Otherwise (the key is free, expired, its
// own or a marker of readers, permits or waiters) it runs one CALL of the
// stored procedure NAME_acquire_multi (in sql/mysql.sql),
// whose READ COMMITTED transaction does on the server what
// multiSQL.acquireMulti does for every mode:
//
//	-- no row: INSERT an expired marker first, in a statement of its own
//	CALL NAME_acquire_multi(key, owner, info, ttl, mode, limit, queue, fair)
//		INSERT ... ON DUPLICATE KEY UPDATE owner = owner  -- lock the key's row
//		-- read the row and the key's holds-table rows, decide
//		UPDATE t_seq SET v = LAST_INSERT_ID(v + 1) WHERE id = 1  -- draw the token
//		-- write the hold, the marker, the queue entry
//		COMMIT
//
// The token is drawn only once the transaction holds the key's row, for the
// reason given on pgOps; the counter row stays locked until commit, so
// tokens are even handed out in commit order. Locks are always taken in the
// order key row, holds-table rows, counter row, and a transaction locks one
// key row only, so acquisitions cannot deadlock each other; the cleanup
// locks key rows only, by primary key, in key order.
//
// Refresh extends an Exclusive hold with one UPDATE, and a Shared or
// Semaphore hold with a CALL of NAME_refresh_multi (which locks the key's
// row, extends the holds-table row and the marker). Release deletes an
// Exclusive hold with one DELETE, a queue entry behind another owner's live
// hold with one DELETE, and everything else with a CALL of
// NAME_release_multi, which also brings the marker down to the rows left.
//
// A fair driver (WithFair) takes an expired row over only if no other
// owner's queue entry is live (the procedure reads them after locking the
// row: every waiter that queued on the key has committed by then, since
// queueing locks the row too, in share mode while its statement runs). Its
// waiter that is queued behind a live Exclusive hold renews its entry with
// one UPDATE (it cannot be admitted, and the hold's row stands for the
// queue). It releases an Exclusive hold with ReleaseFair (in
// sql/mysql_stmts.sql), a DELETE while the key has no live queue entry, whose
// correlated subquery is evaluated on the row once it is locked, so it sees
// the entry of a waiter that held the row before it; otherwise (the key has
// live queue entries, or the hold expired) NAME_release_multi deletes the
// row and leaves the waiters' marker.
//
// No step therefore keeps a row locked across a round trip to the client:
// however slow, paused or cut off a client is, the holders' renewals and
// other owners' acquisitions never wait for it longer than the server
// takes to run one statement.
type myOps struct {
	n    names
	fair bool
	q    *myStmts
}

// myStmts are the statements of sql/mysql_stmts.sql.
type myStmts struct {
	SchemaExists, SchemaObjects, Peek, InsertMarker, RenewBehind, DeleteStale                string
	Enqueue, DrawToken, Refresh, IsHeld, ReleaseLive, ReleaseExpired, ReleaseFair, ReadEntry string
	LeaveQueue, ForceLive, ForceLiveHolds, ForceMain, ForceHolds, List, Count, SweepHolds    string
	ExpiredLocks, SweepLocks, AcquireMulti, RefreshMulti, ReleaseMulti                       string
}

func (myOps) unit() time.Duration { return time.Microsecond }

func (myOps) modes() driver.ModeSet {
	return driver.Modes(driver.Exclusive, driver.Shared, driver.Semaphore)
}

// createSchema runs the statements one by one: each is idempotent and
// atomic, and MySQL serializes concurrent CREATE TABLE IF NOT EXISTS of one
// table with its metadata locks.
//
// A stored procedure's body never changes under its name (a new body gets a
// new name), so one that a concurrent creator made first is as good as
// one's own.
func (o myOps) createSchema(ctx context.Context, db *sql.DB) error {
	for _, q := range ddl(MySQL, o.n) {
		_, err := db.ExecContext(ctx, q)
		if err != nil && errCode(MySQL, err) != "1304" { // ER_SP_ALREADY_EXISTS
			return err
		}
	}
	return nil
}

// schemaExists checks the schema version and, since MySQL's DDL is not
// transactional, that a concurrent creator has made every object.
func (o myOps) schemaExists(ctx context.Context, db *sql.DB) (bool, error) {
	ok, err := checkVersion(ctx, db, o.q.SchemaExists, o.n.Name, o.n.Name)
	if !ok || err != nil {
		return ok, err
	}
	var n int
	err = db.QueryRowContext(ctx, o.q.SchemaObjects).Scan(&n)
	return n == 4, err
}

// myPeek is what acquire learns about a key from its plain read.
type myPeek struct {
	exists bool   // the key has a lock-table row
	owner  string // its owner (markerOwner for a marker)
	live   bool   // its lease has not ended
	left   int64  // microseconds left on it
	// The requesting owner's holds-table row, if it has one.
	entry   bool
	waiting bool // it is a queue entry
	eLive   bool // its lease has not ended
	recent  bool // it ended less than goneFor ago
}

// foreign reports that another owner holds the key Exclusive, live.
func (p myPeek) foreign(owner string) bool {
	return p.exists && p.live && p.owner != markerOwner && p.owner != owner
}

// peek reads the key's lock-table row and req.Owner's holds-table row with
// a plain (consistent, non-locking) read, which waits for no lock and
// takes none.
func (o myOps) peek(ctx context.Context, db *sql.DB, req driver.Request) (myPeek, error) {
	var (
		p             myPeek
		waiting       sql.NullInt64
		eLive, recent sql.NullBool
	)
	err := db.QueryRowContext(ctx, o.q.Peek, req.Owner, req.Key).Scan(&p.owner, &p.live, &p.left, &waiting, &eLive, &recent)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return p, nil
	case err != nil:
		return p, err
	}
	p.exists = true
	p.entry, p.waiting, p.eLive, p.recent = waiting.Valid, waiting.Int64 == 1, eLive.Bool, recent.Bool
	return p, nil
}

// acquire never keeps a row locked across round trips to the client (see
// myOps): a plain read (peek) turns a contender away from a key that
// another owner holds Exclusive, live, or has it queue behind the hold or
// renew its queue entry with single statements (waitBehind); anything else
// is one CALL of NAME_acquire_multi. A key that has no row gets an expired
// marker first, in a statement of its own, so that the procedure's first
// statement finds the row (concurrent inserts of one new key would
// otherwise be prone to deadlocks).
func (o myOps) acquire(ctx context.Context, db *sql.DB, req driver.Request, ttl int64, queued bool) (driver.Result, error) {
	res, err := o.acquireOnce(ctx, db, req, ttl)
	if err != nil && myContention(err) && ctx.Err() == nil {
		// A statement lost to a concurrent one on the same rows (a
		// deadlock victim, a duplicate key) and was rolled back:
		// nothing is held, and the key is contended.
		return driver.Result{}, nil
	}
	return res, err
}

func (o myOps) acquireOnce(ctx context.Context, db *sql.DB, req driver.Request, ttl int64) (driver.Result, error) {
	p, err := o.peek(ctx, db, req)
	if err != nil {
		return driver.Result{}, err
	}
	if p.foreign(req.Owner) {
		switch {
		case req.Mode == driver.Semaphore:
			return driver.Result{}, modeMismatch(req.Key, "in use as exclusive, asked for a semaphore (limit %d)", req.Limit)
		case !req.Queue:
			return driver.Result{RetryAfter: micros(p.left)}, nil
		}
		if res, done, err := o.waitBehind(ctx, db, req, ttl, p); done || err != nil {
			return res, err
		}
		// The hold ended meanwhile.
	}
	if !p.exists {
		if _, err := db.ExecContext(ctx, o.q.InsertMarker, req.Key); err != nil {
			return driver.Result{}, err
		}
	}
	return o.acquireProcCall(ctx, db, req, ttl)
}

// waitBehind queues req.Owner behind another owner's live Exclusive hold,
// or renews its queue entry there, with statements that each lock rows
// only while they run. done is false if the hold was gone by then.
func (o myOps) waitBehind(ctx context.Context, db *sql.DB, req driver.Request, ttl int64, p myPeek) (_ driver.Result, done bool, _ error) {
	wait := driver.Result{RetryAfter: micros(p.left)}
	switch {
	case p.entry && p.waiting && p.eLive:
		return behind(ctx, db, wait, o.q.RenewBehind, ttl, req.Key, req.Owner, req.Key, req.Owner)
	case p.entry && p.waiting && p.recent:
		return driver.Result{}, false, placeLost(req.Key)
	case p.entry:
		// A stale row of req.Owner (an expired hold, a queue entry
		// long gone) goes first.
		if _, err := db.ExecContext(ctx, o.q.DeleteStale, req.Key, req.Owner); err != nil {
			return driver.Result{}, false, err
		}
	}
	// The place in line is drawn before the entry is inserted (each
	// statement commits on its own): waiters are ordered by when they
	// asked, and a number drawn but not used is a gap, as elsewhere.
	seq, err := o.drawToken(ctx, db)
	if err != nil {
		return driver.Result{}, false, err
	}
	return behind(ctx, db, wait, o.q.Enqueue,
		req.Key, req.Owner, int(req.Mode), req.Limit, seq, ttl, req.Key, req.Owner)
}

// behind runs q, which writes req.Owner's queue entry only while another
// owner holds the key Exclusive, live, and returns wait, done if q wrote it.
// A statement that lost to a concurrent one on the same rows did nothing.
func behind(ctx context.Context, db *sql.DB, wait driver.Result, q string, args ...any) (_ driver.Result, done bool, _ error) {
	n, err := execCount(ctx, db, q, args...)
	if err != nil && !(myContention(err) && ctx.Err() == nil) {
		return driver.Result{}, false, err
	}
	return wait, n == 1, nil
}

// drawToken increments the token counter's row and returns the new value
// (LAST_INSERT_ID(expr) passes it back in the statement's result, without
// another round trip). On a pool the statement keeps the row locked only
// while it runs; in a transaction, until it ends.
func (o myOps) drawToken(ctx context.Context, db Execer) (int64, error) {
	res, err := db.ExecContext(ctx, o.q.DrawToken)
	if err != nil {
		return 0, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return 0, errors.New("the token counter row is missing from " + o.n.Seq)
	}
	tok, err := res.LastInsertId()
	if err == nil && tok <= 0 {
		err = errors.New("the token counter returned no value")
	}
	return tok, err
}

func (o myOps) refresh(ctx context.Context, db *sql.DB, req driver.Request, ttl int64) (bool, error) {
	if n, err := execCount(ctx, db, o.q.Refresh, ttl, req.Key, req.Owner); err != nil || n == 1 {
		return n == 1, err
	}
	// MySQL counts changed rows, not matched ones (unless the DSN sets
	// clientFoundRows): a row whose expiry was already exactly the new
	// value counts 0. Tell that apart from "not held".
	var n int
	err := db.QueryRowContext(ctx, o.q.IsHeld, req.Key, req.Owner).Scan(&n)
	if n == 1 || err != nil {
		return n == 1, err
	}
	// Not an Exclusive hold: a Shared or Semaphore one, if any.
	return o.refreshProcCall(ctx, db, req, ttl)
}

// myRolledBack reports errors after which the server has rolled back the
// whole transaction.
func myRolledBack(err error) bool {
	c := errCode(MySQL, err)
	return c == "1213" || c == "1020"
}

// release deletes the owner's live row; failing that, its expired remains
// (each statement is atomic, and a live row of the owner is always taken by
// the first).
//
// Each step either changes nothing or ends the release, so a step that the
// server rolled back as a deadlock victim is retried by running the release
// again, three times at most.
func (o myOps) release(ctx context.Context, db *sql.DB, req driver.Request) (found, live bool, err error) {
	for attempt := 1; ; attempt++ {
		found, live, err = o.releaseOnce(ctx, db, req)
		if err == nil || attempt == 3 || ctx.Err() != nil || !myRolledBack(err) {
			return found, live, err
		}
	}
}

func (o myOps) releaseOnce(ctx context.Context, db *sql.DB, req driver.Request) (found, live bool, err error) {
	if o.fair {
		return o.releaseFair(ctx, db, req)
	}
	n, err := execCount(ctx, db, o.q.ReleaseLive, req.Key, req.Owner)
	if err != nil || n == 1 {
		return n == 1, n == 1, err
	}
	n, err = execCount(ctx, db, o.q.ReleaseExpired, req.Key, req.Owner)
	if err != nil || n == 1 {
		return n == 1, false, err
	}
	if found, live, done, err := o.leaveQueue(ctx, db, req); done || err != nil {
		return found, live, err
	}
	return o.releaseProcCall(ctx, db, req, false)
}

// releaseFair is release for a fair driver: the owner's live Exclusive hold
// goes in one statement while its key has no queue entry; everything else
// in one transaction that keeps the waiters' marker.
func (o myOps) releaseFair(ctx context.Context, db *sql.DB, req driver.Request) (found, live bool, err error) {
	n, err := execCount(ctx, db, o.q.ReleaseFair, req.Key, req.Owner)
	if err != nil || n == 1 {
		return n == 1, n == 1, err
	}
	if found, live, done, err := o.leaveQueue(ctx, db, req); done || err != nil {
		return found, live, err
	}
	return o.releaseProcCall(ctx, db, req, true)
}

// leaveQueue is the part of release that needs no transaction, so that a
// slow client never keeps another owner's live hold locked across round
// trips: req.Owner holds nothing on the key (done, not found), or it
// leaves the queue behind another owner's live Exclusive hold, whose row
// stands for the queue, in one statement (done, found). Otherwise done is
// false, and the caller runs the transaction.
func (o myOps) leaveQueue(ctx context.Context, db *sql.DB, req driver.Request) (found, live, done bool, err error) {
	var (
		mine    int
		waiting sql.NullInt64
		eLive   sql.NullBool
	)
	err = db.QueryRowContext(ctx, o.q.ReadEntry, req.Key, req.Owner, req.Key, req.Owner, req.Key, req.Owner).Scan(&mine, &waiting, &eLive)
	switch {
	case err != nil:
		return false, false, true, err
	case mine > 0 || waiting.Valid && waiting.Int64 != 1:
		return false, false, false, nil
	case !waiting.Valid:
		return false, false, true, nil
	}
	n, err := execCount(ctx, db, o.q.LeaveQueue, req.Key, req.Owner, req.Key, req.Owner)
	if err != nil || n == 1 {
		return n == 1, eLive.Bool, true, err
	}
	return false, false, false, nil
}

func (o myOps) forceRelease(ctx context.Context, db *sql.DB, key string) (int, error) {
	return forceDelete(ctx, db, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, key,
		o.q.ForceLive, o.q.ForceLiveHolds, o.q.ForceMain, o.q.ForceHolds)
}

// forceDelete runs stmts on key in one transaction with opts: the first two
// delete the live holds of the lock table and of the holds table, which it
// counts; the others every remaining row.
func forceDelete(ctx context.Context, db *sql.DB, opts *sql.TxOptions, key string, stmts ...string) (int, error) {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return 0, err
	}
	defer rollback(tx)
	live := 0
	for i, q := range stmts {
		res, err := tx.ExecContext(ctx, q, key)
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		if i < 2 {
			live += int(n)
		}
	}
	return live, tx.Commit()
}

func (o myOps) list(ctx context.Context, db *sql.DB, prefix string) ([]driver.Holder, error) {
	return queryHolders(ctx, db, time.Microsecond, o.q.List, likePrefix(prefix), likePrefix(prefix))
}

func (o myOps) count(ctx context.Context, db *sql.DB, prefix string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, o.q.Count, likePrefix(prefix), likePrefix(prefix)).Scan(&n)
	return n, err
}

// sweep finds long-expired rows with a plain read, then deletes them by
// primary key in one statement that re-checks the expiry under the row locks
// (a row taken over meanwhile is kept).
func (o myOps) sweep(ctx context.Context, db *sql.DB, grace time.Duration, limit int) (int, error) {
	// Long-expired holds-table rows (of readers and permits; of waiters,
	// once they are no longer needed as records of lost places).
	m, err := execCount(ctx, db, o.q.SweepHolds, grace.Microseconds(), max(grace, goneFor).Microseconds(), limit)
	if err != nil {
		return int(m), err
	}
	n, err := o.sweepLocks(ctx, db, grace, limit)
	return int(m) + n, err
}

func (o myOps) sweepLocks(ctx context.Context, db *sql.DB, grace time.Duration, limit int) (int, error) {
	rows, err := db.QueryContext(ctx, o.q.ExpiredLocks, grace.Microseconds(), limit)
	if err != nil {
		return 0, err
	}
	var keys []any
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return 0, err
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(keys) == 0 {
		return 0, err
	}
	// One statement, outside a transaction: go-sql-driver's Commit does
	// not watch the context, so a COMMIT on a hung server would keep
	// Close waiting for the sweep.
	// SweepLocks has one ? in its IN list: one per key.
	marks := strings.TrimSuffix(strings.Repeat("?, ", len(keys)), ", ")
	n, err := execCount(ctx, db, strings.Replace(o.q.SweepLocks, "IN (?)", "IN ("+marks+")", 1), append(keys, grace.Microseconds())...)
	return int(n), err
}

func execCount(ctx context.Context, db *sql.DB, q string, args ...any) (int64, error) {
	res, err := db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// myContention reports errors caused by concurrent transactions on the same
// rows, after which the transaction holds nothing: a duplicate key (another
// client inserted the key first), a deadlock, a lock wait timeout, and
// MariaDB's "record has changed since last read".
func myContention(err error) bool {
	switch errCode(MySQL, err) {
	case "1062", "1213", "1205", "1020":
		return true
	}
	return false
}
