package sqldlock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/admit"
)

// Shared and Semaphore holds, and the queue entries of waiters, live in a
// second table, the holds table (NAME_holds), one row per (key, owner):
//
//   - a holder row (waiting = 0) carries the hold's mode, the semaphore's
//     limit, its fencing token, info and lease;
//   - a waiter row (waiting = 1) is the queue entry of an owner whose
//     Acquire with Request.Queue failed; its token column is its place in
//     line (drawn from the token counter), its lease is the entry's. A
//     waiter row whose lease has ended no longer counts, but is kept for a
//     while as the record that its owner lost its place (see goneFor).
//
// The lock table holds a row per Exclusive hold, and one more
// kind of row: while a key has live holders or waiters in the holds table
// and no Exclusive holder, its lock-table row is a marker whose owner is the
// empty string (never a real owner) and whose expiry is the latest expiry
// of those rows. The marker keeps the Exclusive fast path, which does not
// read the holds table, away from a key that readers or
// permits hold or that waiters wait for: to them it is a key held by
// someone else. When the marker expires, every row behind it has expired
// too, and an Exclusive Acquire may take the key over; it then deletes the
// stale holder rows. While an Exclusive holder holds the key, its own row
// stands for the waiters queued behind it.
//
// Every step on a key in the holds table runs in one transaction that first
// locks the key (see multiStmts.LockKey), so that contenders for one key,
// including Exclusive ones, are serialized. On PostgreSQL and MySQL each
// step is one call of a function or procedure of the schema
// (NAME_acquire_multi and its siblings, in sql/) doing
// what multiSQL does, so that no client round trip happens while the key is
// locked; multiSQL is their reference.

// markerOwner is the owner column of a lock-table row that marks a key held
// or awaited in the holds table. Real owners are never empty.
const markerOwner = ""

// goneFor is how long a waiter row is kept after its lease ended, so that
// its owner's next Acquire with Request.Queue reports the lost place
// (driver.ErrNotOwner) instead of queueing it again at the back (or, on a
// fair driver, taking a lock that has meanwhile become free), as memdlock
// does. Package dlock releases the owner then, which deletes the row; if
// the owner never comes back, the row goes goneFor after its lease ended
// (LockKey, the cleanup).
const goneFor = time.Minute

// multiSQL runs the holds-table protocol with the statements of a dialect,
// whose arguments are listed on each field of multiStmts.
type multiSQL struct {
	*multiStmts
	// nextToken draws a token from the counter.
	nextToken func(ctx context.Context, tx *sql.Tx) (int64, error)
	// unit is the unit of "time left" and ttl.
	unit time.Duration
	// fair says that waiters are admitted in queue order
	// (Capabilities.FIFO); otherwise the queue serves writer preference
	// only.
	fair bool
}

// multiStmts are the statements of the holds-table protocol, whose
// arguments the "-- name:" lines of sql/sqlite_stmts.sql list.
type multiStmts struct {
	LockKey       string // locks the key for the transaction (SQLite: a write), deletes its stale holds-table rows
	ReadMain      string // reads the lock-table row: owner, token, live, time left
	DeleteMain    string // deletes the lock-table row
	ReadHolds     string // reads the holds-table rows: owner, waiting, mode, lim, token, time left, live
	UpsertHold    string // inserts or replaces (key, owner)'s row
	TouchHold     string // sets the expiry of (key, owner)'s row
	UpsertMarker  string // inserts the marker or extends it to ttl from now if that is later
	MarkRow       string // makes the lock-table row, unless a live Exclusive hold, the marker of the live rows
	Downgrade     string // turns the key's Exclusive row into a marker
	SetMain       string // makes the key's row an Exclusive hold
	DeleteHold    string // deletes (key, owner)'s row
	DeleteHolders string // deletes the key's holder rows
	ReleaseHold   string // deletes (key, owner)'s row, returning waiting and live
	ReleaseRow    string // deletes (key, owner)'s lock-table row, returning live
	IdleMain      string // deletes the marker or an expired hold if the key has no live holds-table row
	IdleHolds     string // deletes the expired holder rows if the key has no lock-table row left
	RefreshHold   string // extends (key, owner)'s live holder row
}

// entry is a row of the holds table.
type entry struct {
	owner   string
	waiting bool
	mode    driver.Mode
	limit   int
	token   int64
	left    int64
	live    bool
}

func modeMismatch(key string, format string, args ...any) error {
	return fmt.Errorf("%q: "+format+": %w", append(append([]any{key}, args...), driver.ErrModeMismatch)...)
}

// placeLost is the error of an Acquire with Request.Queue by an owner whose
// queue entry's lease ended.
func placeLost(key string) error {
	return fmt.Errorf("%q: the queue entry's lease ended, and with it the place in line: %w", key, driver.ErrNotOwner)
}

// acquireMulti is the slow path of Acquire, for Shared and Semaphore
// requests, for Exclusive ones on a key marked as held or awaited in the
// holds table, and for those of queued owners. tx has locked the key
// (LockKey has run). On an error the caller rolls tx back.
//
// It reads the key's state (readKey), decides what req gets (decide), and
// writes that (apply), as memdlock does under its mutex.
func (q *multiSQL) acquireMulti(ctx context.Context, tx *sql.Tx, req driver.Request, ttl int64) (driver.Result, error) {
	k, err := q.readKey(ctx, tx, req)
	if err != nil {
		return driver.Result{}, err
	}
	st, err := decide(req, &k, q.fair)
	if err != nil {
		return driver.Result{}, err
	}
	return q.apply(ctx, tx, req, ttl, &k, st)
}

// keyState is a key's state as seen by one request: its lock-table row and
// the live rows of the holds table, sorted out for req.Owner.
type keyState struct {
	// excl reports a live Exclusive hold in the lock table (not a
	// marker), of owner mOwner with token mToken and mLeft units left.
	excl   bool
	mOwner string
	mToken int64
	mLeft  int64
	// holders and waiters are the live rows of other owners, waiters in
	// queue order; own is req.Owner's live row; gone reports that its
	// queue entry's lease has ended.
	holders, waiters []entry
	own              *entry
	gone             bool
}

// readKey reads the key's state for req. An expired lock-table row (hold or
// marker) goes first, with the holder rows behind it, which have expired
// too; waiters queued behind an expired Exclusive hold may still be live,
// and stay.
func (q *multiSQL) readKey(ctx context.Context, tx *sql.Tx, req driver.Request) (keyState, error) {
	var (
		k     keyState
		mLive bool
	)
	err := tx.QueryRowContext(ctx, q.ReadMain, req.Key).Scan(&k.mOwner, &k.mToken, &mLive, &k.mLeft)
	found := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return k, err
	}
	if found && !mLive {
		if _, err := tx.ExecContext(ctx, q.DeleteMain, req.Key); err != nil {
			return k, err
		}
		if _, err := tx.ExecContext(ctx, q.DeleteHolders, req.Key); err != nil {
			return k, err
		}
		found = false
	}
	k.excl = found && k.mOwner != markerOwner
	entries, err := q.readEntries(ctx, tx, req.Key)
	if err != nil {
		return k, err
	}
	k.sort(entries, req.Owner)
	return k, nil
}

// sort sorts the key's holds-table rows, in queue order, into k's holders,
// waiters, own and gone, as seen by owner.
func (k *keyState) sort(entries []entry, owner string) {
	for i := range entries {
		e := &entries[i]
		switch {
		case e.owner == owner && e.live:
			k.own = e
		case e.owner == owner:
			k.gone = e.waiting
		case !e.live:
		case e.waiting:
			k.waiters = append(k.waiters, *e)
		default:
			k.holders = append(k.holders, *e)
		}
	}
}

// step is what acquireMulti writes, as decided from the key's state.
type step struct {
	do    stepKind
	token int64 // the token of the hold that req.Owner keeps (keepDown, keepMain, keepHold)
	left  int64 // wait: units left on what keeps req out
	mark  bool  // wait: the key has no live Exclusive holder, so its lock-table row must be the marker
}

type stepKind int

const (
	// wait: not acquired; req.Owner's queue entry is kept or renewed if
	// req.Queue is set.
	wait stepKind = iota
	// keepDown: req.Owner's Exclusive hold becomes a Shared one, with its
	// token.
	keepDown
	// keepMain: req.Owner's Exclusive hold is renewed.
	keepMain
	// keepHold: req.Owner's holds-table hold is renewed.
	keepHold
	// takeMain: req.Owner takes the key Exclusive, with a new token.
	takeMain
	// takeHold: req.Owner takes a Shared or Semaphore hold, with a new
	// token.
	takeHold
)

// decide returns what req gets on the key in state k: a hold kept or taken,
// a wait, or an error (a mode mismatch, a lost place in line).
func decide(req driver.Request, k *keyState, fair bool) (step, error) {
	if k.excl {
		return decideExcl(req, k)
	}
	if own := k.own; own != nil && !own.waiting {
		if own.mode != req.Mode || req.Mode == driver.Semaphore && own.limit != req.Limit {
			return step{}, modeMismatch(req.Key, "held as %s by this owner, asked for %s", own.mode, req.Mode)
		}
		return step{do: keepHold, token: own.token}, nil
	}
	if err := k.checkMode(req); err != nil {
		return step{}, err
	}
	if k.gone && req.Queue {
		return step{}, placeLost(req.Key)
	}
	var a admit.Key
	a.Holders, a.HolderExclusive = admit.Count(k.holders, entryMode)
	a.Ahead, a.AheadExclusive = admit.Count(k.ahead(), entryMode)
	switch {
	case !a.Admits(req.Mode, req.Limit, fair):
		return step{do: wait, left: minLeft(k.holders), mark: true}, nil
	case req.Mode == driver.Exclusive:
		return step{do: takeMain}, nil
	}
	return step{do: takeHold}, nil
}

// decideExcl is decide for a key held Exclusive in the lock table.
func decideExcl(req driver.Request, k *keyState) (step, error) {
	if k.mOwner == req.Owner {
		switch req.Mode {
		case driver.Shared: // a downgrade, keeping the token
			return step{do: keepDown, token: k.mToken}, nil
		case driver.Semaphore:
			return step{}, modeMismatch(req.Key, "held as exclusive by this owner, asked for a semaphore")
		}
		// Exclusive: the fast path handles it; refresh all the same.
		return step{do: keepMain, token: k.mToken}, nil
	}
	if req.Mode == driver.Semaphore {
		return step{}, modeMismatch(req.Key, "in use as exclusive, asked for a semaphore (limit %d)", req.Limit)
	}
	if k.gone && req.Queue {
		return step{}, placeLost(req.Key)
	}
	// The holder's row stands for the queue: no marker to fix.
	return step{do: wait, left: k.mLeft}, nil
}

// checkMode reports a mode mismatch if req asks for the key in another mode
// (or a semaphore's limit) than the one it is in use as.
func (k *keyState) checkMode(req driver.Request) error {
	first := k.first()
	if first == nil {
		return nil
	}
	sem := first.mode == driver.Semaphore
	if (req.Mode == driver.Semaphore) != sem || sem && first.limit != req.Limit {
		return modeMismatch(req.Key, "in use as %s (limit %d), asked for %s (limit %d)", first.mode, first.limit, req.Mode, req.Limit)
	}
	return nil
}

// first returns the entry whose mode is the key's: its first holder or, with
// none, its first waiter (req.Owner's own entry included: it asked in the
// same mode); nil if there is none.
func (k *keyState) first() *entry {
	switch {
	case len(k.holders) > 0:
		return &k.holders[0]
	case k.own != nil && (len(k.waiters) == 0 || k.own.token < k.waiters[0].token):
		return k.own
	case len(k.waiters) > 0:
		return &k.waiters[0]
	}
	return nil
}

// ahead returns the waiters queued before req.Owner: all of them if it has
// no entry.
func (k *keyState) ahead() []entry {
	if k.own == nil {
		return k.waiters
	}
	var ahead []entry
	for _, w := range k.waiters {
		if w.token < k.own.token {
			ahead = append(ahead, w)
		}
	}
	return ahead
}

func entryMode(e entry) driver.Mode { return e.mode }

// minLeft returns the least time left on the holders' leases (0 without
// holders).
func minLeft(holders []entry) int64 {
	left := int64(0)
	for _, h := range holders {
		if left == 0 || h.left < left {
			left = h.left
		}
	}
	return left
}

// apply writes step st, decided from the key's state k, for req.
func (q *multiSQL) apply(ctx context.Context, tx *sql.Tx, req driver.Request, ttl int64, k *keyState, st step) (driver.Result, error) {
	switch st.do {
	case keepDown:
		return q.downgradeTo(ctx, tx, req, ttl, st.token)
	case keepMain:
		// The hold's row stands for the waiters queued behind it.
		_, err := tx.ExecContext(ctx, q.SetMain, req.Key, req.Owner, st.token, req.Info, ttl)
		return acquired(st.token, err)
	case keepHold:
		if _, err := tx.ExecContext(ctx, q.TouchHold, ttl, req.Key, req.Owner); err != nil {
			return driver.Result{}, err
		}
		_, err := tx.ExecContext(ctx, q.UpsertMarker, req.Key, ttl)
		return acquired(st.token, err)
	case takeMain, takeHold:
		return q.take(ctx, tx, req, ttl, k, st.do == takeMain)
	}
	return q.wait(ctx, tx, req, k.own, ttl, st.left, st.mark)
}

// acquired is the result of a hold with token, if err is nil.
func acquired(token int64, err error) (driver.Result, error) {
	if err != nil {
		return driver.Result{}, err
	}
	return driver.Result{Acquired: true, Token: uint64(token)}, nil
}

// downgradeTo turns req.Owner's Exclusive hold into a Shared one with the
// same token: readers may join.
func (q *multiSQL) downgradeTo(ctx context.Context, tx *sql.Tx, req driver.Request, ttl, token int64) (driver.Result, error) {
	if _, err := tx.ExecContext(ctx, q.Downgrade, ttl, req.Key); err != nil {
		return driver.Result{}, err
	}
	if _, err := tx.ExecContext(ctx, q.UpsertHold, req.Key, req.Owner, 0, int(driver.Shared), 0, token, req.Info, ttl); err != nil {
		return driver.Result{}, err
	}
	// The marker covers the waiters too.
	if _, err := tx.ExecContext(ctx, q.MarkRow, req.Key, req.Key); err != nil {
		return driver.Result{}, err
	}
	return acquired(token, nil)
}

// take gives req.Owner a new hold with a new token: the key Exclusive in
// the lock table (excl), or a Shared or Semaphore hold in the holds table.
func (q *multiSQL) take(ctx context.Context, tx *sql.Tx, req driver.Request, ttl int64, k *keyState, excl bool) (driver.Result, error) {
	tok, err := q.nextToken(ctx, tx)
	if err != nil {
		return driver.Result{}, err
	}
	if excl {
		if k.own != nil || k.gone {
			if _, err := tx.ExecContext(ctx, q.DeleteHold, req.Key, req.Owner); err != nil {
				return driver.Result{}, err
			}
		}
		// The hold's row stands for the waiters left in the queue.
		_, err := tx.ExecContext(ctx, q.SetMain, req.Key, req.Owner, tok, req.Info, ttl)
		return acquired(tok, err)
	}
	if _, err := tx.ExecContext(ctx, q.UpsertHold, req.Key, req.Owner, 0, int(req.Mode), req.Limit, tok, req.Info, ttl); err != nil {
		return driver.Result{}, err
	}
	_, err = tx.ExecContext(ctx, q.MarkRow, req.Key, req.Key)
	return acquired(tok, err)
}

// The results (state) of the server-side acquire steps of the holds-table
// protocol: PostgreSQL's NAME_acquire_multi and MySQL's procedure of the
// same name.
const (
	multiWait      = 0 // not acquired; retry is the time left on the holds
	multiAcquired  = 1 // acquired; token is the hold's token
	multiPlaceLost = 2 // the owner's queue entry's lease ended (placeLost)
	multiOwnExcl   = 3 // held Exclusive by this owner, asked for a semaphore
	multiInUseExcl = 4 // held Exclusive by another owner, asked for a semaphore
	multiOwnMode   = 5 // held by this owner in mode mode, asked for another
	multiInUseMode = 6 // in use in mode mode (limit limit), asked for another
)

// multiOut is the result row of a server-side acquire step: its state, and
// the columns that state gives (retry in microseconds).
type multiOut struct {
	state int
	token sql.NullInt64
	retry sql.NullInt64
	mode  sql.NullInt16
	limit sql.NullInt32
}

// result is what the step means for req.
func (o multiOut) result(req driver.Request) (driver.Result, error) {
	switch o.state {
	case multiWait:
		return driver.Result{RetryAfter: micros(o.retry.Int64)}, nil
	case multiAcquired:
		if !o.token.Valid || o.token.Int64 <= 0 {
			return driver.Result{}, errors.New("the acquire step returned no token")
		}
		return driver.Result{Acquired: true, Token: uint64(o.token.Int64)}, nil
	case multiPlaceLost:
		return driver.Result{}, placeLost(req.Key)
	case multiOwnExcl:
		return driver.Result{}, modeMismatch(req.Key, "held as exclusive by this owner, asked for a semaphore")
	case multiInUseExcl:
		return driver.Result{}, modeMismatch(req.Key, "in use as exclusive, asked for a semaphore (limit %d)", req.Limit)
	case multiOwnMode:
		return driver.Result{}, modeMismatch(req.Key, "held as %s by this owner, asked for %s", driver.Mode(o.mode.Int16), req.Mode)
	case multiInUseMode:
		return driver.Result{}, modeMismatch(req.Key, "in use as %s (limit %d), asked for %s (limit %d)",
			driver.Mode(o.mode.Int16), o.limit.Int32, req.Mode, req.Limit)
	}
	return driver.Result{}, fmt.Errorf("the acquire step returned state %d", o.state)
}

// wait reports "not acquired", keeping or renewing req.Owner's queue entry
// if req.Queue is set. With mark set (the key has no live Exclusive holder),
// it also makes the lock-table row the marker of the key's live rows.
func (q *multiSQL) wait(ctx context.Context, tx *sql.Tx, req driver.Request, own *entry, exp, left int64, mark bool) (driver.Result, error) {
	if req.Queue {
		if own != nil {
			if _, err := tx.ExecContext(ctx, q.TouchHold, exp, req.Key, req.Owner); err != nil {
				return driver.Result{}, err
			}
		} else {
			seq, err := q.nextToken(ctx, tx)
			if err != nil {
				return driver.Result{}, err
			}
			if _, err := tx.ExecContext(ctx, q.UpsertHold, req.Key, req.Owner, 1, int(req.Mode), req.Limit, seq, "", exp); err != nil {
				return driver.Result{}, err
			}
		}
	}
	if mark {
		// Whatever kept req out (a holder, a waiter ahead) is live, so
		// the marker is needed.
		if _, err := tx.ExecContext(ctx, q.MarkRow, req.Key, req.Key); err != nil {
			return driver.Result{}, err
		}
	}
	return driver.Result{RetryAfter: time.Duration(max(left, 0)) * q.unit}, nil
}

func (q *multiSQL) readEntries(ctx context.Context, tx *sql.Tx, key string) ([]entry, error) {
	rows, err := tx.QueryContext(ctx, q.ReadHolds, key)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var es []entry
	for rows.Next() {
		var (
			e    entry
			mode int
		)
		if err := rows.Scan(&e.owner, &e.waiting, &mode, &e.limit, &e.token, &e.left, &e.live); err != nil {
			return nil, err
		}
		e.mode = driver.Mode(mode)
		es = append(es, e)
	}
	return es, rows.Err()
}

// releaseMulti deletes req.Owner's holds-table row and brings the key's
// marker down to the remaining live rows (deleting it, and the key's
// expired holder rows, if none are left).
func (q *multiSQL) releaseMulti(ctx context.Context, tx *sql.Tx, req driver.Request) (found, live bool, err error) {
	var waiting bool
	found, err = q.release(ctx, tx, req, q.ReleaseHold, &waiting, &live)
	return found, live, err
}

// releaseMain deletes req.Owner's lock-table row (its Exclusive hold) and,
// if the key has waiters, leaves the marker that keeps their places. It
// reports whether there was such a row; if not, nothing has changed.
func (q *multiSQL) releaseMain(ctx context.Context, tx *sql.Tx, req driver.Request) (found, live bool, err error) {
	found, err = q.release(ctx, tx, req, q.ReleaseRow, &live)
	return found, live, err
}

// release deletes req.Owner's row with del, a DELETE that returns the
// row's columns into dest, then makes the key's marker cover the rows left.
// It reports whether there was such a row; if not, nothing has changed.
func (q *multiSQL) release(ctx context.Context, tx *sql.Tx, req driver.Request, del string, dest ...any) (bool, error) {
	err := tx.QueryRowContext(ctx, del, req.Key, req.Owner).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, q.fixMarker(ctx, tx, req.Key)
}

// fixMarker makes the key's marker cover exactly its live holds-table rows
// or, if there are none, deletes it with the key's expired holder rows. A
// live Exclusive hold is left alone.
func (q *multiSQL) fixMarker(ctx context.Context, tx *sql.Tx, key string) error {
	for _, s := range []string{q.MarkRow, q.IdleMain, q.IdleHolds} {
		if _, err := tx.ExecContext(ctx, s, key, key); err != nil {
			return err
		}
	}
	return nil
}

// refreshMulti extends req.Owner's live holder row and the key's marker.
func (q *multiSQL) refreshMulti(ctx context.Context, tx *sql.Tx, req driver.Request, ttl int64) (bool, error) {
	res, err := tx.ExecContext(ctx, q.RefreshHold, ttl, req.Key, req.Owner)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, q.UpsertMarker, req.Key, ttl); err != nil {
		return false, err
	}
	return true, nil
}

// queryHolders runs the List statement q, whose rows are (key, owner, mode,
// limit, token, info, time left in units), and returns the holders sorted by
// key and token.
func queryHolders(ctx context.Context, db *sql.DB, unit time.Duration, q string, args ...any) ([]driver.Holder, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var hs []driver.Holder
	for rows.Next() {
		var (
			h         driver.Holder
			mode      int
			tok, left int64
		)
		if err := rows.Scan(&h.Key, &h.Owner, &mode, &h.Limit, &tok, &h.Info, &left); err != nil {
			return nil, err
		}
		h.Mode = driver.Mode(mode)
		h.Token = uint64(tok)
		h.TTL = time.Duration(left) * unit
		hs = append(hs, h)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sortHolders(hs)
	return hs, nil
}
