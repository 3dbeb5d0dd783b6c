package sqldlock

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// pgOps implements the PostgreSQL dialect.
//
// The schema's functions are in sql/postgres.sql. An Exclusive Acquire is
// one round trip: a call of NAME_acquire, which runs as one statement, so
// atomically. Its first statement is an upsert that either inserts the row or, under the
// row lock that ON CONFLICT takes, takes over an expired row or extends the
// caller's own; a live row of another owner is left alone (still locked,
// so the function can read how long it has left). A new hold gets token 0
// from the upsert and its real token from a second UPDATE, which draws
// nextval only now that the transaction holds the row.
//
// Why the token is drawn after the row lock: nextval hands out values in the
// order it is called, not in commit order. A token drawn in the INSERT's
// VALUES list (before the row is locked) could be drawn, then stall, while
// another client inserts the key with a larger token, holds it and releases
// it; the stalled insert would then succeed with the smaller token. Drawn
// after the row lock, it is drawn after the previous holder of the key
// committed (its row was visible, locked and updated by us, or deleted and
// the delete committed before our insert could succeed), and that holder
// drew its own token before it committed: ours is larger.
//
// NAME_acquire marks a takeover of an expired marker (token
// -1: the stale holder rows are deleted), deletes the caller's queue entry
// when it waited (p_queued), and reports whether a failure met a marker
// (o_marked), in which case, as when the caller waits in the queue, the
// driver runs the holds-table step (see multiSQL), which on PostgreSQL is
// one statement too: NAME_acquire_multi does in one function call what
// multiSQL.acquireMulti does in a transaction, and NAME_refresh_multi and
// NAME_release_multi do multiSQL.refreshMulti and
// releaseMulti. So no step keeps a key's rows locked across a client's
// round trips, and a slow client cannot hold up another owner's renewal.
//
// With p_fair (WithFair), a fair driver takes an expired row over only if no other owner's queue entry is
// live. (Its IF conditions on the path of a free key are simple expressions,
// which PL/pgSQL evaluates without running a query, so that the uncontended
// Acquire costs no more.) The function checks that after the upsert, in a
// statement of its own, so with a snapshot taken while it holds the key's row: every waiter
// that queued on the key has committed by then (queueing locks that row
// too). If one is live, the row becomes the waiters' marker instead and the
// call reports o_marked.
//
// A fair driver releases an Exclusive hold with NAME_release, which
// deletes the row and then, again in a statement of its own (so with a
// snapshot in which every waiter that queued behind the hold has
// committed), inserts the marker of the key's live queue entries, if there
// are any, in the same transaction: no newcomer can slip in between.
type pgOps struct {
	n    names
	fair bool
	q    *pgStmts
}

// pgStmts are the statements of sql/postgres_stmts.sql.
type pgStmts struct {
	SchemaLock, SchemaExists, Acquire, Wait, AcquireMulti, Refresh, RefreshMulti, ReleaseFair, Release string
	LeaveQueue, ReleaseMulti, ForceRelease, List, Count, SweepLocks, SweepHolds                        string
	Gate, LeaveGate, CancelGate                                                                        string // see gate.go
}

func (pgOps) unit() time.Duration { return time.Microsecond }

func (pgOps) modes() driver.ModeSet {
	return driver.Modes(driver.Exclusive, driver.Shared, driver.Semaphore)
}

// createSchema runs the DDL in one transaction holding an advisory lock, so
// that concurrent creators (which would otherwise collide in the catalog)
// take turns; DDL is transactional in PostgreSQL.
func (o pgOps) createSchema(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer rollback(tx)
	h := fnv.New64a()
	h.Write([]byte("dlock schema " + o.n.Name))
	if _, err := tx.ExecContext(ctx, o.q.SchemaLock, int64(h.Sum64())); err != nil {
		return err
	}
	for _, q := range ddl(Postgres, o.n) {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func (o pgOps) schemaExists(ctx context.Context, db *sql.DB) (bool, error) {
	return checkVersion(ctx, db, o.q.SchemaExists, o.n.Table, o.n.Name)
}

func (o pgOps) acquire(ctx context.Context, db *sql.DB, req driver.Request, ttl int64, queued bool) (driver.Result, error) {
	if req.Queue && req.Mode != driver.Semaphore && (queued || req.Mode == driver.Shared) {
		// Most likely behind another owner's Exclusive hold.
		if res, done, err := o.waitBehind(ctx, db, req, ttl); done || err != nil {
			return res, err
		}
	}
	if req.Mode == driver.Exclusive && !(o.fair && queued) {
		// A queued owner of a fair driver finds a marker anyway.
		if res, done, err := o.acquireExclusive(ctx, db, req, ttl, queued); done || err != nil {
			return res, err
		}
	}
	return o.acquireMulti(ctx, db, req, ttl)
}

// acquireExclusive is the path of an Exclusive Acquire on the lock table:
// a call of NAME_acquire and, if another owner holds the key Exclusive and
// req.Queue is set, of NAME_wait. done is false if the holds-table step
// must decide: readers or permits hold the key (a mode mismatch or an
// upgrade is possible), waiters wait for it, or the owner waits in the
// queue.
func (o pgOps) acquireExclusive(ctx context.Context, db *sql.DB, req driver.Request, ttl int64, queued bool) (_ driver.Result, done bool, _ error) {
	var (
		acquired     bool
		token, retry sql.NullInt64
		marked       sql.NullBool
	)
	err := db.QueryRowContext(ctx, o.q.Acquire, req.Key, req.Owner, req.Info, ttl, queued, o.fair).Scan(&acquired, &token, &retry, &marked)
	switch {
	case err != nil && pgContention(err) && ctx.Err() == nil:
		// A serialization failure or deadlock (possible under a stricter
		// default isolation level): the statement was rolled back.
		return driver.Result{}, true, nil
	case err != nil:
		return driver.Result{}, true, err
	case acquired && (!token.Valid || token.Int64 <= 0):
		return driver.Result{}, true, errors.New("acquire function returned no token")
	case acquired:
		return driver.Result{Acquired: true, Token: uint64(token.Int64)}, true, nil
	case marked.Bool:
		return driver.Result{}, false, nil
	case req.Queue:
		// Another owner's Exclusive hold: queue behind it.
		return o.waitBehind(ctx, db, req, ttl)
	}
	return driver.Result{RetryAfter: micros(retry.Int64)}, true, nil
}

// waitBehind queues req.Owner, or renews its queue entry, if another owner
// holds the key Exclusive, in one statement (NAME_wait, which locks the
// key's row only while it runs): the common case of a waiter, which
// therefore never keeps the row locked across round trips, so the holder's
// renewal does not wait for a slow waiter. done is false if the key is not
// so held (the caller runs the holds-table transaction).
func (o pgOps) waitBehind(ctx context.Context, db *sql.DB, req driver.Request, ttl int64) (_ driver.Result, done bool, _ error) {
	var (
		state int
		retry sql.NullInt64
	)
	err := db.QueryRowContext(ctx, o.q.Wait, req.Key, req.Owner, int(req.Mode), req.Limit, ttl).Scan(&state, &retry)
	switch {
	case err != nil && pgContention(err) && ctx.Err() == nil:
		return driver.Result{}, true, nil
	case err != nil:
		return driver.Result{}, false, err
	case state == 1:
		return driver.Result{RetryAfter: micros(retry.Int64)}, true, nil
	case state == 2:
		return driver.Result{}, false, placeLost(req.Key)
	}
	return driver.Result{}, false, nil
}

// acquireMulti runs the holds-table protocol (multiSQL.acquireMulti) in
// one statement, a call of NAME_acquire_multi, which locks the key's rows
// only while it runs: a slow client never keeps them locked across its
// round trips, so other owners' renewals never wait for one.
func (o pgOps) acquireMulti(ctx context.Context, db *sql.DB, req driver.Request, ttl int64) (driver.Result, error) {
	var out multiOut
	err := db.QueryRowContext(ctx, o.q.AcquireMulti, req.Key, req.Owner, req.Info, ttl, int(req.Mode), req.Limit, req.Queue, o.fair).
		Scan(&out.state, &out.token, &out.retry, &out.mode, &out.limit)
	switch {
	case err != nil && pgContention(err) && ctx.Err() == nil:
		return driver.Result{}, nil
	case err != nil:
		return driver.Result{}, err
	}
	return out.result(req)
}

func (o pgOps) refresh(ctx context.Context, db *sql.DB, req driver.Request, ttl int64) (bool, error) {
	n, err := execCount(ctx, db, o.q.Refresh, req.Key, req.Owner, ttl)
	if n == 1 || err != nil {
		return n == 1, err
	}
	// A Shared or Semaphore hold: one statement (see acquireMulti).
	var ok bool
	err = db.QueryRowContext(ctx, o.q.RefreshMulti, req.Key, req.Owner, ttl).Scan(&ok)
	return ok, err
}

// release deletes the row and notifies the key's channel in the same
// statement (so in the same transaction: the notification is delivered
// when, and only if, the delete commits).
func (o pgOps) release(ctx context.Context, db *sql.DB, req driver.Request) (found, live bool, err error) {
	if o.fair {
		// The Exclusive hold, leaving the waiters' marker if needed.
		var l sql.NullBool
		err = db.QueryRowContext(ctx, o.q.ReleaseFair, req.Key, req.Owner).Scan(&l)
		if err != nil || l.Valid {
			return err == nil, l.Bool, err
		}
	} else {
		err = db.QueryRowContext(ctx, o.q.Release, req.Key, req.Owner, o.n.Name, int(driver.Shared)).Scan(&live, new(sql.NullString))
		if err == nil || !errors.Is(err, sql.ErrNoRows) {
			return err == nil, live, err
		}
	}
	err = db.QueryRowContext(ctx, o.q.LeaveQueue, req.Key, req.Owner).Scan(&live)
	if err == nil || !errors.Is(err, sql.ErrNoRows) {
		return err == nil, live, err
	}
	// A Shared or Semaphore hold, or a queue entry: one statement (see
	// acquireMulti).
	err = db.QueryRowContext(ctx, o.q.ReleaseMulti, req.Key, req.Owner).Scan(&found, &live)
	return found, live, err
}

func (o pgOps) forceRelease(ctx context.Context, db *sql.DB, key string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, o.q.ForceRelease,
		key, o.n.Name).Scan(&n)
	return n, err
}

func (o pgOps) list(ctx context.Context, db *sql.DB, prefix string) ([]driver.Holder, error) {
	return queryHolders(ctx, db, time.Microsecond, o.q.List, likePrefix(prefix))
}

func (o pgOps) count(ctx context.Context, db *sql.DB, prefix string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, o.q.Count, likePrefix(prefix)).Scan(&n)
	return n, err
}

// sweep deletes a batch of long-expired rows of each table.
func (o pgOps) sweep(ctx context.Context, db *sql.DB, grace time.Duration, limit int) (int, error) {
	n, err := execCount(ctx, db, o.q.SweepLocks, grace.Microseconds(), limit)
	if err != nil {
		return int(n), err
	}
	m, err := execCount(ctx, db, o.q.SweepHolds, grace.Microseconds(), limit, max(grace, goneFor).Microseconds())
	return int(n + m), err
}

// pgContention reports a serialization failure, a deadlock or a lock
// timeout: the statement was rolled back because of concurrent work.
func pgContention(err error) bool {
	switch errCode(Postgres, err) {
	case "40001", "40P01", "55P03":
		return true
	}
	return false
}

func sortHolders(hs []driver.Holder) {
	slices.SortStableFunc(hs, func(a, b driver.Holder) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(a.Token, b.Token)
	})
}

func micros(n int64) time.Duration {
	if n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Microsecond
}
