package sqldlock

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// liteOps implements the SQLite dialect.
//
// SQLite lets one connection write at a time, database-wide: a transaction
// holds the write lock from its first write to its end, so everything in it
// is serialized with every other writer, in this process or another. Acquire
// is one transaction whose first statement is a write (so that even a
// DEFERRED transaction takes the write lock at once, and waits for it
// through the busy timeout instead of failing on a read-to-write upgrade):
//
//	INSERT ... ON CONFLICT (lock_key) DO UPDATE ... WHERE <own or expired> RETURNING token
//	-- no row returned: held by another owner; read its owner and expiry,
//	--   roll back (a marker, or a queued waiter: the holds-table protocol)
//	-- token -1 (an expired marker taken over): delete its holder rows
//	-- a queued waiter: delete its queue entry
//	-- token 0 or -1 (a new hold):
//	UPDATE t_seq SET v = v + 1 WHERE id = 1 RETURNING v
//	UPDATE t SET token = ? WHERE lock_key = ?
//	COMMIT
//
// A fair driver (WithFair) takes an expired row over only if no other
// owner's queue entry is live (a statement of its own, serialized like the
// rest, sees every committed entry), and releases an Exclusive hold with a
// DELETE that applies only while the key has no live queue entry; otherwise
// a transaction leaves the marker that keeps the waiters' places. Its waiter
// that is queued behind a live Exclusive hold renews its entry with one
// UPDATE (it cannot be admitted, and the hold's row stands for the queue).
//
// Times are integer milliseconds since the Unix epoch on the host's clock,
// the database clock of every process that opens the file.
type liteOps struct {
	n    names
	fair bool
	q    *liteStmts
	// gate, if set, is the write gate of the database file (see
	// sqliteGate), held by every write of the driver.
	gate chan struct{}
}

// enter waits for the driver's turn to write and returns the function that
// ends it.
func (o liteOps) enter(ctx context.Context) (func(), error) {
	if o.gate == nil {
		return func() {}, nil
	}
	select {
	case o.gate <- struct{}{}:
		return func() { <-o.gate }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// liteStmts are the statements of sql/sqlite_stmts.sql.
type liteStmts struct {
	SchemaExists, NextToken, RenewBehind, AcquireExclusive, SetToken                             string
	Refresh, Release, ForceLive, ForceLiveHolds, ForceHolds, List, Count, SweepLocks, SweepHolds string
	multiStmts
}

func (liteOps) unit() time.Duration { return time.Millisecond }

func (liteOps) modes() driver.ModeSet {
	return driver.Modes(driver.Exclusive, driver.Shared, driver.Semaphore)
}

// multi returns the holds-table protocol on SQLite (see multiSQL).
func (o liteOps) multi() *multiSQL {
	return &multiSQL{multiStmts: &o.q.multiStmts, nextToken: o.nextToken, unit: time.Millisecond, fair: o.fair}
}

// nextToken draws a token from the counter.
func (o liteOps) nextToken(ctx context.Context, tx *sql.Tx) (int64, error) {
	var token int64
	err := tx.QueryRowContext(ctx, o.q.NextToken).Scan(&token)
	if errors.Is(err, sql.ErrNoRows) {
		err = errors.New("the token counter row is missing from " + o.n.Seq)
	}
	return token, err
}

// createSchema runs the statements in one transaction (DDL is
// transactional in SQLite), so that no other connection sees part of the
// schema.
func (o liteOps) createSchema(ctx context.Context, db *sql.DB) error {
	leave, err := o.enter(ctx)
	if err != nil {
		return err
	}
	defer leave()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer rollback(tx)
	for _, q := range ddl(SQLite, o.n) {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func (o liteOps) schemaExists(ctx context.Context, db *sql.DB) (bool, error) {
	return checkVersion(ctx, db, o.q.SchemaExists, o.n.Name, o.n.Name)
}

func (o liteOps) acquire(ctx context.Context, db *sql.DB, req driver.Request, ttl int64, queued bool) (driver.Result, error) {
	leave, err := o.enter(ctx)
	if err != nil {
		return driver.Result{}, err
	}
	defer leave()
	if o.fair && queued && req.Mode != driver.Semaphore {
		if res, done, err := o.renewBehind(ctx, db, req, ttl); done || err != nil {
			return res, err
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return driver.Result{}, err
	}
	defer rollback(tx)
	if req.Mode != driver.Exclusive || o.fair && queued {
		// A queued owner of a fair driver finds a marker anyway.
		return o.acquireMulti(ctx, tx, req, ttl)
	}
	return o.acquireExclusive(ctx, tx, req, ttl, queued)
}

// renewBehind renews the queue entry of a fair driver's waiter behind
// another owner's Exclusive hold, the common case, in one statement. done is
// false if req.Owner is not so queued (the caller runs a transaction).
func (o liteOps) renewBehind(ctx context.Context, db *sql.DB, req driver.Request, ttl int64) (_ driver.Result, done bool, _ error) {
	var left int64
	err := db.QueryRowContext(ctx, o.q.RenewBehind, req.Key, req.Owner, ttl).Scan(&left)
	switch {
	case err == nil:
		return driver.Result{RetryAfter: time.Duration(max(left, 0)) * time.Millisecond}, true, nil
	case !errors.Is(err, sql.ErrNoRows):
		return driver.Result{}, false, err
	}
	return driver.Result{}, false, nil
}

// acquireExclusive is the fast path of an Exclusive Acquire in tx, on the
// lock table alone: it takes or extends the key's row if it may, and
// otherwise reports the time left on it, or runs the holds-table protocol
// where that decides (acquireMulti). It commits unless it failed.
func (o liteOps) acquireExclusive(ctx context.Context, tx *sql.Tx, req driver.Request, ttl int64, queued bool) (driver.Result, error) {
	var token int64
	err := tx.QueryRowContext(ctx, o.q.AcquireExclusive, req.Key, req.Owner, req.Info, ttl).Scan(&token)
	if errors.Is(err, sql.ErrNoRows) {
		return o.notTaken(ctx, tx, req, ttl)
	}
	if err != nil {
		return driver.Result{}, err
	}
	if token, err = o.settleToken(ctx, tx, req, token, queued); err != nil {
		return driver.Result{}, err
	}
	if err := tx.Commit(); err != nil {
		return driver.Result{}, err
	}
	return driver.Result{Acquired: true, Token: uint64(token)}, nil
}

// notTaken answers an Exclusive Acquire whose fast path left the key's row
// alone: the time left on it, or the holds-table protocol where that
// decides.
func (o liteOps) notTaken(ctx context.Context, tx *sql.Tx, req driver.Request, ttl int64) (driver.Result, error) {
	var (
		owner string
		left  int64
	)
	err := tx.QueryRowContext(ctx, o.q.ReadMain, req.Key).Scan(&owner, new(int64), new(bool), &left)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return driver.Result{}, err
	}
	if owner == markerOwner && err == nil || req.Queue || o.fair && left <= 0 {
		// Readers or permits hold the key or waiters wait for it
		// (a mode mismatch or an upgrade is possible), the owner
		// waits in the queue, or an expired hold has waiters
		// behind it.
		return o.acquireMulti(ctx, tx, req, ttl)
	}
	return driver.Result{RetryAfter: time.Duration(max(left, 0)) * time.Millisecond}, nil
}

// settleToken finishes a fast-path acquisition whose upsert returned token:
// the hold's own token if it was req.Owner's live row, 0 for a new hold, -1
// for a new hold over the expired marker of readers or permits (whose rows
// it deletes). It deletes req.Owner's queue entry if it may have one, draws
// a new hold's token, and returns the hold's token.
func (o liteOps) settleToken(ctx context.Context, tx *sql.Tx, req driver.Request, token int64, queued bool) (int64, error) {
	if token == -1 {
		// The expired marker of readers or permits: their rows go.
		if _, err := tx.ExecContext(ctx, o.q.DeleteHolders, req.Key); err != nil {
			return 0, err
		}
		token = 0
	}
	if queued {
		// The owner's queue entry, if it waited.
		if _, err := tx.ExecContext(ctx, o.q.DeleteHold, req.Key, req.Owner); err != nil {
			return 0, err
		}
	}
	if token != 0 {
		return token, nil
	}
	token, err := o.nextToken(ctx, tx)
	if err != nil {
		return 0, err
	}
	_, err = tx.ExecContext(ctx, o.q.SetToken, token, req.Key)
	return token, err
}

// acquireMulti runs the holds-table protocol in tx and commits unless it
// failed. Its first statement is a write (a DELETE of the key's expired
// holds-table rows), which takes SQLite's write lock.
func (o liteOps) acquireMulti(ctx context.Context, tx *sql.Tx, req driver.Request, ttl int64) (driver.Result, error) {
	q := o.multi()
	if _, err := tx.ExecContext(ctx, q.LockKey, req.Key); err != nil {
		return driver.Result{}, err
	}
	res, err := q.acquireMulti(ctx, tx, req, ttl)
	if err != nil {
		return driver.Result{}, err
	}
	if err := tx.Commit(); err != nil {
		return driver.Result{}, err
	}
	return res, nil
}

func (o liteOps) refresh(ctx context.Context, db *sql.DB, req driver.Request, ttl int64) (bool, error) {
	leave, err := o.enter(ctx)
	if err != nil {
		return false, err
	}
	defer leave()
	n, err := execCount(ctx, db, o.q.Refresh, ttl, req.Key, req.Owner)
	if n == 1 || err != nil {
		return n == 1, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer rollback(tx)
	ok, err := o.multi().refreshMulti(ctx, tx, req, ttl)
	if !ok || err != nil {
		return false, err
	}
	return true, tx.Commit()
}

func (o liteOps) release(ctx context.Context, db *sql.DB, req driver.Request) (found, live bool, err error) {
	leave, err := o.enter(ctx)
	if err != nil {
		return false, false, err
	}
	defer leave()
	err = db.QueryRowContext(ctx, o.q.Release, req.Key, req.Owner).Scan(&live)
	if err == nil || !errors.Is(err, sql.ErrNoRows) {
		return err == nil, live, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, false, err
	}
	defer rollback(tx)
	q := o.multi()
	if o.fair {
		found, live, err = q.releaseMain(ctx, tx, req)
	}
	if !found && err == nil {
		found, live, err = q.releaseMulti(ctx, tx, req)
	}
	if !found || err != nil {
		return false, false, err
	}
	return found, live, tx.Commit()
}

func (o liteOps) forceRelease(ctx context.Context, db *sql.DB, key string) (int, error) {
	leave, err := o.enter(ctx)
	if err != nil {
		return 0, err
	}
	defer leave()
	return forceDelete(ctx, db, nil, key, o.q.ForceLive, o.q.ForceLiveHolds, o.q.DeleteMain, o.q.ForceHolds)
}

// keyRange returns the bounds of the keys that start with prefix, for
// List and Count: prefix, and the end of the range (nil for none).
func keyRange(prefix string) []any {
	if end, ok := prefixEnd(prefix); ok {
		return []any{prefix, end}
	}
	return []any{prefix, nil}
}

func (o liteOps) list(ctx context.Context, db *sql.DB, prefix string) ([]driver.Holder, error) {
	return queryHolders(ctx, db, time.Millisecond, o.q.List, keyRange(prefix)...)
}

func (o liteOps) count(ctx context.Context, db *sql.DB, prefix string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, o.q.Count, keyRange(prefix)...).Scan(&n)
	return n, err
}

func (o liteOps) sweep(ctx context.Context, db *sql.DB, grace time.Duration, limit int) (int, error) {
	leave, err := o.enter(ctx)
	if err != nil {
		return 0, err
	}
	defer leave()
	n, err := execCount(ctx, db, o.q.SweepLocks, grace.Milliseconds(), limit)
	if err != nil {
		return int(n), err
	}
	m, err := execCount(ctx, db, o.q.SweepHolds, grace.Milliseconds(), max(grace, goneFor).Milliseconds(), limit)
	return int(n + m), err
}
