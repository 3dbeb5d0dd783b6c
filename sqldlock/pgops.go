package sqldlock

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// pgOps implements the PostgreSQL dialect.
//
// An Exclusive Acquire is one round trip: a call of the plpgsql function
// created with the schema (NAME_acquire_v2; NAME_acquire_v1 is the same
// without the holds table, kept for v1 clients), which runs as one
// statement, so atomically. Its
// first statement is an upsert that either inserts the row or, under the
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
// Besides v1, NAME_acquire_v2 marks a takeover of an expired marker (token
// -1: the stale holder rows are deleted), deletes the caller's queue entry
// when it waited (p_queued), and reports whether a failure met a marker
// (o_marked), in which case, as when the caller waits in the queue, the
// driver runs the holds-table step (see multiSQL), which on PostgreSQL is
// one statement too: NAME_acq_multi_v1 (schema version 5) does in one
// function call what multiSQL.acquireMulti does in a transaction, and
// NAME_ref_multi_v1 and NAME_rel_multi_v1 do multiSQL.refreshMulti and
// releaseMulti. So no step keeps a key's rows locked across a client's
// round trips, and a slow client cannot hold up another owner's renewal.
//
// NAME_acquire_v3 is v2 with one more parameter, p_fair (WithFair): a fair
// driver takes an expired row over only if no other owner's queue entry is
// live. (Its IF conditions on the path of a free key are simple expressions,
// which PL/pgSQL evaluates without running a query, so that the uncontended
// Acquire costs what v2's does.) The function checks that after the upsert, in a statement of its
// own, so with a snapshot taken while it holds the key's row: every waiter
// that queued on the key has committed by then (queueing locks that row
// too). If one is live, the row becomes the waiters' marker instead and the
// call reports o_marked. v2 is kept for v2 clients.
//
// A fair driver releases an Exclusive hold with NAME_release_v1, which
// deletes the row and then, again in a statement of its own (so with a
// snapshot in which every waiter that queued behind the hold has
// committed), inserts the marker of the key's live queue entries, if there
// are any, in the same transaction: no newcomer can slip in between.
type pgOps struct {
	n    names
	fair bool
}

func (pgOps) unit() time.Duration { return time.Microsecond }

func (o pgOps) ddl() []string {
	t, seq, fn, h := o.n.table, o.n.seq, o.n.acquire, o.n.holds
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + t + ` (
	lock_key   text COLLATE "C" PRIMARY KEY,
	owner      text NOT NULL,
	token      bigint NOT NULL,
	info       text NOT NULL,
	expires_at timestamptz NOT NULL
)`,
		`CREATE SEQUENCE IF NOT EXISTS ` + seq,
		`CREATE OR REPLACE FUNCTION ` + fn + `(
	p_key text, p_owner text, p_info text, p_ttl_us bigint,
	OUT o_acquired boolean, OUT o_token bigint, OUT o_retry_us bigint)
LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO ` + t + ` AS l (lock_key, owner, token, info, expires_at)
	VALUES (p_key, p_owner, 0, p_info, clock_timestamp() + p_ttl_us * interval '1 microsecond')
	ON CONFLICT (lock_key) DO UPDATE SET
		owner = excluded.owner,
		info = excluded.info,
		expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond',
		token = CASE WHEN l.owner = excluded.owner AND l.expires_at > clock_timestamp()
			THEN l.token ELSE 0 END
	WHERE l.owner = excluded.owner OR l.expires_at <= clock_timestamp()
	RETURNING l.token INTO o_token;
	IF NOT FOUND THEN
		o_acquired := false;
		SELECT (extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000)::bigint
			INTO o_retry_us FROM ` + t + ` AS l WHERE l.lock_key = p_key;
		RETURN;
	END IF;
	o_acquired := true;
	IF o_token = 0 THEN
		UPDATE ` + t + ` SET token = nextval('` + seq + `')
			WHERE lock_key = p_key RETURNING token INTO o_token;
	END IF;
END
$$`,
		`CREATE TABLE IF NOT EXISTS ` + h + ` (
	lock_key   text COLLATE "C" NOT NULL,
	owner      text NOT NULL,
	waiting    smallint NOT NULL,
	mode       smallint NOT NULL,
	lim        integer NOT NULL,
	token      bigint NOT NULL,
	info       text NOT NULL,
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (lock_key, owner)
)`,
		`CREATE OR REPLACE FUNCTION ` + o.n.acq2 + `(
	p_key text, p_owner text, p_info text, p_ttl_us bigint, p_queued boolean,
	OUT o_acquired boolean, OUT o_token bigint, OUT o_retry_us bigint, OUT o_marked boolean)
LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO ` + t + ` AS l (lock_key, owner, token, info, expires_at)
	VALUES (p_key, p_owner, 0, p_info, clock_timestamp() + p_ttl_us * interval '1 microsecond')
	ON CONFLICT (lock_key) DO UPDATE SET
		owner = excluded.owner,
		info = excluded.info,
		expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond',
		token = CASE WHEN l.owner = excluded.owner AND l.expires_at > clock_timestamp()
			THEN l.token WHEN l.owner = '' THEN -1 ELSE 0 END
	WHERE l.owner = excluded.owner OR l.expires_at <= clock_timestamp()
	RETURNING l.token INTO o_token;
	IF NOT FOUND THEN
		o_acquired := false;
		SELECT (extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000)::bigint, l.owner = ''
			INTO o_retry_us, o_marked FROM ` + t + ` AS l WHERE l.lock_key = p_key;
		RETURN;
	END IF;
	o_acquired := true;
	IF o_token = -1 THEN
		DELETE FROM ` + h + ` WHERE lock_key = p_key AND waiting = 0;
		o_token := 0;
	END IF;
	IF p_queued THEN
		DELETE FROM ` + h + ` WHERE lock_key = p_key AND owner = p_owner;
	END IF;
	IF o_token = 0 THEN
		UPDATE ` + t + ` SET token = nextval('` + seq + `')
			WHERE lock_key = p_key RETURNING token INTO o_token;
	END IF;
END
$$`,
		`CREATE OR REPLACE FUNCTION ` + o.n.acq3 + `(
	p_key text, p_owner text, p_info text, p_ttl_us bigint, p_queued boolean, p_fair boolean,
	OUT o_acquired boolean, OUT o_token bigint, OUT o_retry_us bigint, OUT o_marked boolean)
LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO ` + t + ` AS l (lock_key, owner, token, info, expires_at)
	VALUES (p_key, p_owner, 0, p_info, clock_timestamp() + p_ttl_us * interval '1 microsecond')
	ON CONFLICT (lock_key) DO UPDATE SET
		owner = excluded.owner,
		info = excluded.info,
		expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond',
		token = CASE WHEN l.owner = excluded.owner AND l.expires_at > clock_timestamp()
			THEN l.token WHEN l.owner = '' THEN -1 ELSE -2 END
	WHERE l.owner = excluded.owner OR l.expires_at <= clock_timestamp()
	RETURNING l.token INTO o_token;
	IF NOT FOUND THEN
		o_acquired := false;
		SELECT (extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000)::bigint, l.owner = ''
			INTO o_retry_us, o_marked FROM ` + t + ` AS l WHERE l.lock_key = p_key;
		RETURN;
	END IF;
	IF o_token < 0 AND p_fair THEN
		IF EXISTS (SELECT 1 FROM ` + h + ` WHERE lock_key = p_key AND waiting = 1 AND owner <> p_owner
			AND expires_at > clock_timestamp()) THEN
			UPDATE ` + t + ` SET owner = '', token = 0, info = '', expires_at = (SELECT max(expires_at)
				FROM ` + h + ` WHERE lock_key = p_key AND expires_at > clock_timestamp())
				WHERE lock_key = p_key;
			o_acquired := false;
			o_marked := true;
			RETURN;
		END IF;
	END IF;
	o_acquired := true;
	IF o_token = -1 THEN
		DELETE FROM ` + h + ` WHERE lock_key = p_key AND waiting = 0;
	END IF;
	IF o_token < 0 THEN
		o_token := 0;
	END IF;
	IF p_queued THEN
		DELETE FROM ` + h + ` WHERE lock_key = p_key AND owner = p_owner;
	END IF;
	IF o_token = 0 THEN
		UPDATE ` + t + ` SET token = nextval('` + seq + `')
			WHERE lock_key = p_key RETURNING token INTO o_token;
	END IF;
END
$$`,
		`CREATE OR REPLACE FUNCTION ` + o.n.rel1 + `(p_key text, p_owner text, OUT o_live boolean)
LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM ` + t + ` WHERE lock_key = p_key AND owner = p_owner
		RETURNING expires_at > clock_timestamp() INTO o_live;
	IF NOT FOUND THEN
		RETURN;
	END IF;
	INSERT INTO ` + t + ` (lock_key, owner, token, info, expires_at)
	SELECT p_key, '', 0, '', max(expires_at) FROM ` + h + `
	WHERE lock_key = p_key AND waiting = 1 AND expires_at > clock_timestamp()
	HAVING count(*) > 0;
	PERFORM pg_notify('` + o.n.raw + `', p_key);
END
$$`,
		`CREATE OR REPLACE FUNCTION ` + o.n.wait1 + `(
	p_key text, p_owner text, p_mode smallint, p_lim integer, p_ttl_us bigint,
	OUT o_state smallint, OUT o_retry_us bigint)
LANGUAGE plpgsql AS $$
DECLARE
	w record;
BEGIN
	o_state := 0;
	SELECT (extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000)::bigint AS left_us
		INTO o_retry_us FROM ` + t + ` AS l
		WHERE l.lock_key = p_key AND l.owner <> '' AND l.owner <> p_owner
		AND l.expires_at > clock_timestamp() FOR UPDATE;
	IF NOT FOUND THEN
		o_retry_us := NULL;
		RETURN;
	END IF;
	DELETE FROM ` + h + ` WHERE lock_key = p_key AND expires_at <= clock_timestamp()
		AND (waiting = 0 OR expires_at <= clock_timestamp() - interval '` + strconv.FormatInt(int64(goneFor/time.Second), 10) + ` seconds');
	SELECT waiting, expires_at > clock_timestamp() AS live INTO w FROM ` + h + `
		WHERE lock_key = p_key AND owner = p_owner;
	IF FOUND AND w.live THEN
		UPDATE ` + h + ` SET expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond'
			WHERE lock_key = p_key AND owner = p_owner;
	ELSIF FOUND AND w.waiting = 1 THEN
		o_state := 2;
		RETURN;
	ELSE
		INSERT INTO ` + h + ` (lock_key, owner, waiting, mode, lim, token, info, expires_at)
		VALUES (p_key, p_owner, 1, p_mode, p_lim, nextval('` + seq + `'), '',
			clock_timestamp() + p_ttl_us * interval '1 microsecond')
		ON CONFLICT (lock_key, owner) DO UPDATE SET waiting = excluded.waiting, mode = excluded.mode,
			lim = excluded.lim, token = excluded.token, info = excluded.info, expires_at = excluded.expires_at;
	END IF;
	o_state := 1;
END
$$`,
		o.acquireMultiFunc(),
		o.refreshMultiFunc(),
		o.releaseMultiFunc(),
	}
}

func (pgOps) modes() driver.ModeSet {
	return driver.Modes(driver.Exclusive, driver.Shared, driver.Semaphore)
}

// rebind turns the ? placeholders of q into $1, $2, ...
func rebind(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// pgLeft is the time left on expires_at, in microseconds.
const pgLeft = `(extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint`

// multi returns the statements of the holds-table protocol (see multiSQL):
// the reference for the functions NAME_acq_multi_v1, NAME_ref_multi_v1 and
// NAME_rel_multi_v1, which run the same steps on the server; the driver
// itself no longer runs them (tests do).
// lockKey locks the key's lock-table row, inserting an expired marker if
// there is none, so that every contender for the key, on the fast path or
// not, waits for the transaction.
func (o pgOps) multi() *multiSQL {
	t, h := o.n.table, o.n.holds
	exp := `clock_timestamp() + ?::bigint * interval '1 microsecond'`
	q := upsertMulti(t, h, "clock_timestamp()", exp, pgLeft, "greatest")
	q.lockKey = `WITH p AS (DELETE FROM ` + h + ` WHERE lock_key = ? AND expires_at <= clock_timestamp()
	AND (waiting = 0 OR expires_at <= clock_timestamp() - interval '` + strconv.FormatInt(int64(goneFor/time.Second), 10) + ` seconds'))
INSERT INTO ` + t + ` AS l (lock_key, owner, token, info, expires_at) VALUES (?, '', 0, '', 'epoch')
ON CONFLICT (lock_key) DO UPDATE SET owner = l.owner`
	q.lockMain = `SELECT 1 FROM ` + t + ` WHERE lock_key = ? FOR UPDATE`
	q.notify = `SELECT pg_notify('` + o.n.raw + `', ?)`
	q.nextToken = func(ctx context.Context, tx *sql.Tx) (int64, error) {
		var v int64
		err := tx.QueryRowContext(ctx, `SELECT nextval('`+o.n.seq+`')`).Scan(&v)
		return v, err
	}
	q.unit, q.fair = time.Microsecond, o.fair
	q.rebind(rebind)
	return q
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
	h.Write([]byte("dlock schema " + o.n.raw))
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(h.Sum64())); err != nil {
		return err
	}
	for _, q := range o.ddl() {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func (o pgOps) schemaExists(ctx context.Context, db *sql.DB) (bool, error) {
	var ok bool
	err := db.QueryRowContext(ctx,
		`SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL AND to_regprocedure($3) IS NOT NULL
	AND to_regclass($4) IS NOT NULL AND to_regprocedure($5) IS NOT NULL
	AND to_regprocedure($6) IS NOT NULL AND to_regprocedure($7) IS NOT NULL
	AND to_regprocedure($8) IS NOT NULL AND to_regprocedure($9) IS NOT NULL
	AND to_regprocedure($10) IS NOT NULL AND to_regprocedure($11) IS NOT NULL`,
		o.n.table, o.n.seq, o.n.acquire+"(text,text,text,bigint)",
		o.n.holds, o.n.acq2+"(text,text,text,bigint,boolean)",
		o.n.acq3+"(text,text,text,bigint,boolean,boolean)", o.n.rel1+"(text,text)",
		o.n.wait1+"(text,text,smallint,integer,bigint)",
		o.acqMulti()+"(text,text,text,bigint,smallint,integer,boolean,boolean)",
		o.refMulti()+"(text,text,bigint)", o.relMulti()+"(text,text)").Scan(&ok)
	return ok, err
}

func (o pgOps) acquire(ctx context.Context, db *sql.DB, req driver.Request, ttl int64, queued bool) (driver.Result, error) {
	if req.Queue && req.Mode != driver.Semaphore && (queued || req.Mode == driver.Shared) {
		// Most likely behind another owner's Exclusive hold.
		if res, done, err := o.waitBehind(ctx, db, req, ttl); done || err != nil {
			return res, err
		}
	}
	if req.Mode != driver.Exclusive || o.fair && queued {
		// A queued owner of a fair driver finds a marker anyway.
		return o.acquireMulti(ctx, db, req, ttl)
	}
	var (
		acquired bool
		token    sql.NullInt64
		retry    sql.NullInt64
		marked   sql.NullBool
	)
	err := db.QueryRowContext(ctx,
		`SELECT o_acquired, o_token, o_retry_us, o_marked FROM `+o.n.acq3+`($1, $2, $3, $4, $5, $6)`,
		req.Key, req.Owner, req.Info, ttl, queued, o.fair).Scan(&acquired, &token, &retry, &marked)
	switch {
	case err != nil && pgContention(err) && ctx.Err() == nil:
		// A serialization failure or deadlock (possible under a stricter
		// default isolation level): the statement was rolled back.
		return driver.Result{}, nil
	case err != nil:
		return driver.Result{}, err
	case !acquired && req.Queue && !marked.Bool:
		// Another owner's Exclusive hold: queue behind it.
		if res, done, err := o.waitBehind(ctx, db, req, ttl); done || err != nil {
			return res, err
		}
		return o.acquireMulti(ctx, db, req, ttl)
	case !acquired && (marked.Bool || req.Queue):
		// Readers or permits hold the key (a mode mismatch or an upgrade
		// is possible), or the owner waits in the queue.
		return o.acquireMulti(ctx, db, req, ttl)
	case !acquired:
		return driver.Result{RetryAfter: micros(retry.Int64)}, nil
	case !token.Valid || token.Int64 <= 0:
		return driver.Result{}, errors.New("acquire function returned no token")
	}
	return driver.Result{Acquired: true, Token: uint64(token.Int64)}, nil
}

// waitBehind queues req.Owner, or renews its queue entry, if another owner
// holds the key Exclusive, in one statement (NAME_wait_v1, which locks the
// key's row only while it runs): the common case of a waiter, which
// therefore never keeps the row locked across round trips, so the holder's
// renewal does not wait for a slow waiter. done is false if the key is not
// so held (the caller runs the holds-table transaction).
func (o pgOps) waitBehind(ctx context.Context, db *sql.DB, req driver.Request, ttl int64) (_ driver.Result, done bool, _ error) {
	var (
		state int
		retry sql.NullInt64
	)
	err := db.QueryRowContext(ctx, `SELECT o_state, o_retry_us FROM `+o.n.wait1+`($1, $2, $3, $4, $5)`,
		req.Key, req.Owner, int(req.Mode), req.Limit, ttl).Scan(&state, &retry)
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
// one statement, a call of NAME_acq_multi_v1, which locks the key's rows
// only while it runs: a slow client never keeps them locked across its
// round trips, so other owners' renewals never wait for one.
func (o pgOps) acquireMulti(ctx context.Context, db *sql.DB, req driver.Request, ttl int64) (driver.Result, error) {
	var out multiOut
	err := db.QueryRowContext(ctx, `SELECT o_state, o_token, o_retry_us, o_mode, o_lim FROM `+o.acqMulti()+
		`($1, $2, $3, $4, $5, $6, $7, $8)`,
		req.Key, req.Owner, req.Info, ttl, int(req.Mode), req.Limit, req.Queue, o.fair).
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
	res, err := db.ExecContext(ctx, `UPDATE `+o.n.table+`
SET expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
WHERE lock_key = $1 AND owner = $2 AND expires_at > clock_timestamp()`,
		req.Key, req.Owner, ttl)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if n == 1 || err != nil {
		return n == 1, err
	}
	// A Shared or Semaphore hold: one statement (see acquireMulti).
	var ok bool
	err = db.QueryRowContext(ctx, `SELECT o_ok FROM `+o.refMulti()+`($1, $2, $3)`, req.Key, req.Owner, ttl).Scan(&ok)
	return ok, err
}

// release deletes the row and notifies the key's channel in the same
// statement (so in the same transaction: the notification is delivered
// when, and only if, the delete commits).
func (o pgOps) release(ctx context.Context, db *sql.DB, req driver.Request) (found, live bool, err error) {
	if o.fair {
		// The Exclusive hold, leaving the waiters' marker if needed.
		var l sql.NullBool
		err = db.QueryRowContext(ctx, `SELECT o_live FROM `+o.n.rel1+`($1, $2)`, req.Key, req.Owner).Scan(&l)
		if err != nil || l.Valid {
			return err == nil, l.Bool, err
		}
	} else {
		// Wake the waiters that can take the key next (see
		// parseWaiter): the head of its queue and, if that is a
		// reader, the readers queued before the first writer. With
		// nobody queued, every subscriber of the key, as older clients
		// do.
		err = db.QueryRowContext(ctx, `WITH d AS (
	DELETE FROM `+o.n.table+` WHERE lock_key = $1 AND owner = $2
	RETURNING expires_at > clock_timestamp() AS live),
q AS (
	SELECT owner, row_number() OVER w AS pos, count(*) FILTER (WHERE mode <> $4) OVER w AS writers
	FROM `+o.n.holds+`
	WHERE lock_key = $1 AND waiting = 1 AND expires_at > clock_timestamp() AND EXISTS (SELECT FROM d)
	WINDOW w AS (ORDER BY token)),
n AS (
	SELECT count(pg_notify($3, `+pgWaiterPayload+`)) AS woken
	FROM q WHERE pos = 1 OR writers = 0)
SELECT d.live, CASE WHEN n.woken = 0 THEN pg_notify($3, $1)::text END FROM d, n`,
			req.Key, req.Owner, o.n.raw, int(driver.Shared)).Scan(&live, new(sql.NullString))
		if err == nil || !errors.Is(err, sql.ErrNoRows) {
			return err == nil, live, err
		}
	}
	// A waiter queued behind another owner's live Exclusive hold leaves the
	// queue in one statement: the hold's row stands for the queue, so
	// nothing else changes (and the hold's row stays unlocked).
	err = db.QueryRowContext(ctx, `DELETE FROM `+o.n.holds+` AS h WHERE h.lock_key = $1 AND h.owner = $2 AND h.waiting = 1
	AND EXISTS (SELECT 1 FROM `+o.n.table+` AS l WHERE l.lock_key = $1 AND l.owner <> '' AND l.owner <> $2
		AND l.expires_at > clock_timestamp())
RETURNING h.expires_at > clock_timestamp()`, req.Key, req.Owner).Scan(&live)
	if err == nil || !errors.Is(err, sql.ErrNoRows) {
		return err == nil, live, err
	}
	// A Shared or Semaphore hold, or a queue entry: one statement (see
	// acquireMulti).
	err = db.QueryRowContext(ctx, `SELECT o_found, o_live FROM `+o.relMulti()+`($1, $2)`,
		req.Key, req.Owner).Scan(&found, &live)
	return found, live, err
}

func (o pgOps) forceRelease(ctx context.Context, db *sql.DB, key string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `WITH d AS (
	DELETE FROM `+o.n.table+` WHERE lock_key = $1
	RETURNING owner <> '' AND expires_at > clock_timestamp() AS live),
h AS (
	DELETE FROM `+o.n.holds+` WHERE lock_key = $1
	RETURNING waiting = 0 AND expires_at > clock_timestamp() AS live)
SELECT (SELECT count(*) FILTER (WHERE live) FROM d) + (SELECT count(*) FILTER (WHERE live) FROM h)
FROM pg_notify($2, $1)`,
		key, o.n.raw).Scan(&n)
	return n, err
}

func (o pgOps) list(ctx context.Context, db *sql.DB, prefix string) ([]driver.Holder, error) {
	rows, err := db.QueryContext(ctx, `SELECT lock_key, owner, 0, 0, token, info, `+pgLeft+`
FROM `+o.n.table+`
WHERE lock_key LIKE $1 ESCAPE '!' AND owner <> '' AND expires_at > clock_timestamp()
UNION ALL
SELECT lock_key, owner, mode, lim, token, info, `+pgLeft+`
FROM `+o.n.holds+`
WHERE lock_key LIKE $1 ESCAPE '!' AND waiting = 0 AND expires_at > clock_timestamp()`, likePrefix(prefix))
	if err != nil {
		return nil, err
	}
	return scanModeHolders(rows, time.Microsecond)
}

func (o pgOps) count(ctx context.Context, db *sql.DB, prefix string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM `+o.n.table+` WHERE lock_key LIKE $1 ESCAPE '!')
	+ (SELECT count(*) FROM `+o.n.holds+` WHERE lock_key LIKE $1 ESCAPE '!')`,
		likePrefix(prefix)).Scan(&n)
	return n, err
}

// sweep deletes a batch of long-expired rows, skipping rows another
// transaction has locked (an acquirer taking one over, say); FOR UPDATE
// re-checks the expiry on the latest version of each row it locks. An
// expired Exclusive hold with live waiters behind it stays: it keeps their
// places until one of them turns it into their marker (a change of the row,
// which a sweep that read the holds table before they committed re-checks
// all the same).
func (o pgOps) sweep(ctx context.Context, db *sql.DB, grace time.Duration, limit int) (int, error) {
	res, err := db.ExecContext(ctx, `DELETE FROM `+o.n.table+` WHERE lock_key IN (
	SELECT lock_key FROM `+o.n.table+` AS l
	WHERE expires_at < clock_timestamp() - $1::bigint * interval '1 microsecond'
	AND NOT EXISTS (SELECT 1 FROM `+o.n.holds+` AS h
		WHERE h.lock_key = l.lock_key AND h.expires_at > clock_timestamp())
	LIMIT $2 FOR UPDATE OF l SKIP LOCKED)`, grace.Microseconds(), limit)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return int(n), err
	}
	res, err = db.ExecContext(ctx, `DELETE FROM `+o.n.holds+` WHERE (lock_key, owner) IN (
	SELECT lock_key, owner FROM `+o.n.holds+`
	WHERE expires_at < clock_timestamp() - $1::bigint * interval '1 microsecond'
	AND (waiting = 0 OR expires_at < clock_timestamp() - $3::bigint * interval '1 microsecond')
	LIMIT $2 FOR UPDATE SKIP LOCKED)`, grace.Microseconds(), limit, max(grace, goneFor).Microseconds())
	if err != nil {
		return int(n), err
	}
	m, err := res.RowsAffected()
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

// Names of the functions of schema version 5: the holds-table steps, each
// one statement.
func (o pgOps) acqMulti() string { return Postgres.Quote(o.n.raw + "_acq_multi_v1") }
func (o pgOps) refMulti() string { return Postgres.Quote(o.n.raw + "_ref_multi_v1") }
func (o pgOps) relMulti() string { return Postgres.Quote(o.n.raw + "_rel_multi_v1") }

// indent indents every line of s but the first by tabs tabs, for a
// statement spliced into a function's body.
func indent(tabs int, s string) string {
	return strings.ReplaceAll(s, "\n", "\n"+strings.Repeat("\t", tabs))
}

// pgExp is the expiry of a lease of p_ttl_us from now, in the functions.
const pgExp = `clock_timestamp() + p_ttl_us * interval '1 microsecond'`

// markRowFunc is multiSQL.markRow in the functions.
func (o pgOps) markRowFunc() string {
	t, h := o.n.table, o.n.holds
	return `INSERT INTO ` + t + ` AS l (lock_key, owner, token, info, expires_at)
	SELECT p_key, '', 0, '', x.m FROM (SELECT max(expires_at) AS m FROM ` + h + `
	WHERE lock_key = p_key AND expires_at > clock_timestamp()) AS x
	WHERE x.m IS NOT NULL
	ON CONFLICT (lock_key) DO UPDATE SET owner = '', token = 0, info = '', expires_at = excluded.expires_at
	WHERE l.owner = '' OR l.expires_at <= clock_timestamp();`
}

// upsertHoldFunc is multiSQL.upsertHold in the functions, with the given
// expressions of waiting, mode, lim, token and info.
func (o pgOps) upsertHoldFunc(waiting, mode, lim, token, info string) string {
	return `INSERT INTO ` + o.n.holds + ` (lock_key, owner, waiting, mode, lim, token, info, expires_at)
	VALUES (p_key, p_owner, ` + waiting + `, ` + mode + `, ` + lim + `, ` + token + `, ` + info + `, ` + pgExp + `)
	ON CONFLICT (lock_key, owner) DO UPDATE SET waiting = excluded.waiting, mode = excluded.mode,
	lim = excluded.lim, token = excluded.token, info = excluded.info, expires_at = excluded.expires_at;`
}

// setMainFunc is multiSQL.setMain in the functions, with token tok.
func (o pgOps) setMainFunc(tok string) string {
	return `INSERT INTO ` + o.n.table + ` (lock_key, owner, token, info, expires_at)
	VALUES (p_key, p_owner, ` + tok + `, p_info, ` + pgExp + `)
	ON CONFLICT (lock_key) DO UPDATE SET owner = excluded.owner, token = excluded.token,
	info = excluded.info, expires_at = excluded.expires_at;`
}

// upsertMarkerFunc is multiSQL.upsertMarker in the functions.
func (o pgOps) upsertMarkerFunc() string {
	return `INSERT INTO ` + o.n.table + ` AS l (lock_key, owner, token, info, expires_at)
	VALUES (p_key, '', 0, '', ` + pgExp + `)
	ON CONFLICT (lock_key) DO UPDATE SET expires_at = greatest(l.expires_at, excluded.expires_at)
	WHERE l.owner = '';`
}

// acquireMultiFunc is NAME_acq_multi_v1: multiSQL.acquireMulti (with
// lockKey first) as one statement, so that the key's rows stay locked only
// while it runs. p_mode and p_lim are the request's mode (0 Exclusive, 1
// Shared, 2 Semaphore) and limit; o_state is one of the multi* results (multiOut).
func (o pgOps) acquireMultiFunc() string {
	t, h, seq := o.n.table, o.n.holds, o.n.seq
	left := func(now string) string {
		return `(extract(epoch FROM expires_at - ` + now + `) * 1000000)::bigint`
	}
	touch := `UPDATE ` + h + ` SET expires_at = ` + pgExp + ` WHERE lock_key = p_key AND owner = p_owner;`
	queue := `IF p_queue THEN
	IF v_own_live THEN
		` + indent(2, touch) + `
	ELSE
		` + indent(2, o.upsertHoldFunc("1", "p_mode", "p_lim", "nextval('"+seq+"')", "''")) + `
	END IF;
END IF;`
	return `CREATE OR REPLACE FUNCTION ` + o.acqMulti() + `(
	p_key text, p_owner text, p_info text, p_ttl_us bigint, p_mode smallint, p_lim integer,
	p_queue boolean, p_fair boolean,
	OUT o_state smallint, OUT o_token bigint, OUT o_retry_us bigint, OUT o_mode smallint, OUT o_lim integer)
LANGUAGE plpgsql AS $$
DECLARE
	v_now timestamptz;
	v_main_found boolean;
	v_main_owner text;
	v_main_token bigint;
	v_main_live boolean;
	v_main_left bigint;
	v_own_found boolean;
	v_own_waiting boolean;
	v_own_mode smallint;
	v_own_lim integer;
	v_own_token bigint;
	v_own_live boolean := false;
	v_gone boolean := false;
	v_first_found boolean;
	v_first_mode smallint;
	v_first_lim integer;
	v_holders integer;
	v_holders_excl boolean;
	v_holders_left bigint;
	v_ahead integer;
	v_ahead_excl boolean;
	v_admit boolean;
	v_tok bigint;
BEGIN
	o_state := 0;
	INSERT INTO ` + t + ` AS l (lock_key, owner, token, info, expires_at) VALUES (p_key, '', 0, '', 'epoch')
	ON CONFLICT (lock_key) DO UPDATE SET owner = l.owner;
	DELETE FROM ` + h + ` WHERE lock_key = p_key AND expires_at <= clock_timestamp()
		AND (waiting = 0 OR expires_at <= clock_timestamp() - interval '` + strconv.FormatInt(int64(goneFor/time.Second), 10) + ` seconds');
	v_now := clock_timestamp();
	SELECT owner, token, expires_at > v_now, ` + left("clock_timestamp()") + `
		INTO v_main_owner, v_main_token, v_main_live, v_main_left FROM ` + t + ` WHERE lock_key = p_key;
	v_main_found := FOUND;
	IF v_main_found AND NOT v_main_live THEN
		DELETE FROM ` + t + ` WHERE lock_key = p_key;
		DELETE FROM ` + h + ` WHERE lock_key = p_key AND waiting = 0;
		v_main_found := false;
	END IF;
	SELECT waiting = 1, mode, lim, token, expires_at > v_now
		INTO v_own_waiting, v_own_mode, v_own_lim, v_own_token, v_own_live
		FROM ` + h + ` WHERE lock_key = p_key AND owner = p_owner;
	v_own_found := FOUND;
	IF v_own_found THEN
		v_gone := NOT v_own_live AND v_own_waiting;
	ELSE
		v_own_live := false;
	END IF;

	IF v_main_found AND v_main_owner <> '' THEN
		IF v_main_owner = p_owner THEN
			IF p_mode = 1 THEN
				UPDATE ` + t + ` SET owner = '', token = 0, info = '', expires_at = ` + pgExp + ` WHERE lock_key = p_key;
				` + indent(4, o.upsertHoldFunc("0", "1", "0", "v_main_token", "p_info")) + `
				` + indent(4, o.markRowFunc()) + `
				PERFORM pg_notify('` + o.n.raw + `', p_key);
				o_state := 1;
				o_token := v_main_token;
				RETURN;
			ELSIF p_mode = 2 THEN
				o_state := 3;
				RETURN;
			END IF;
			` + indent(3, o.setMainFunc("v_main_token")) + `
			o_state := 1;
			o_token := v_main_token;
			RETURN;
		END IF;
		IF p_mode = 2 THEN
			o_state := 4;
			RETURN;
		END IF;
		IF v_gone AND p_queue THEN
			o_state := 2;
			RETURN;
		END IF;
		` + indent(2, queue) + `
		o_retry_us := greatest(v_main_left, 0);
		RETURN;
	END IF;

	IF v_own_live AND NOT v_own_waiting THEN
		IF v_own_mode <> p_mode OR p_mode = 2 AND v_own_lim <> p_lim THEN
			o_state := 5;
			o_mode := v_own_mode;
			o_lim := v_own_lim;
			RETURN;
		END IF;
		` + indent(2, touch) + `
		` + indent(2, o.upsertMarkerFunc()) + `
		o_state := 1;
		o_token := v_own_token;
		RETURN;
	END IF;
	SELECT count(*), coalesce(bool_or(mode = 0), false), min(` + left("v_now") + `)
		INTO v_holders, v_holders_excl, v_holders_left FROM ` + h + `
		WHERE lock_key = p_key AND owner <> p_owner AND waiting = 0 AND expires_at > v_now;
	SELECT mode, lim INTO v_first_mode, v_first_lim FROM ` + h + `
		WHERE lock_key = p_key AND owner <> p_owner AND waiting = 0 AND expires_at > v_now
		ORDER BY token LIMIT 1;
	v_first_found := FOUND;
	IF NOT v_first_found THEN
		SELECT mode, lim INTO v_first_mode, v_first_lim FROM ` + h + `
			WHERE lock_key = p_key AND waiting = 1 AND expires_at > v_now
			AND (owner <> p_owner OR v_own_live)
			ORDER BY token LIMIT 1;
		v_first_found := FOUND;
	END IF;
	IF v_first_found AND ((p_mode = 2) <> (v_first_mode = 2) OR v_first_mode = 2 AND v_first_lim <> p_lim) THEN
		o_state := 6;
		o_mode := v_first_mode;
		o_lim := v_first_lim;
		RETURN;
	END IF;
	IF v_gone AND p_queue THEN
		o_state := 2;
		RETURN;
	END IF;
	SELECT count(*), coalesce(bool_or(mode = 0), false) INTO v_ahead, v_ahead_excl FROM ` + h + `
		WHERE lock_key = p_key AND owner <> p_owner AND waiting = 1 AND expires_at > v_now
		AND (NOT v_own_live OR token < v_own_token);
	IF p_mode = 0 THEN
		v_admit := v_holders = 0 AND (NOT p_fair OR v_ahead = 0);
	ELSIF p_mode = 1 THEN
		v_admit := NOT v_holders_excl AND NOT v_ahead_excl;
	ELSIF p_fair THEN
		v_admit := v_holders + v_ahead < p_lim;
	ELSE
		v_admit := v_holders < p_lim;
	END IF;
	IF NOT v_admit THEN
		` + indent(2, queue) + `
		` + indent(2, o.markRowFunc()) + `
		o_retry_us := greatest(coalesce(v_holders_left, 0), 0);
		RETURN;
	END IF;
	v_tok := nextval('` + seq + `');
	IF p_mode = 0 THEN
		IF v_own_live OR v_gone THEN
			DELETE FROM ` + h + ` WHERE lock_key = p_key AND owner = p_owner;
		END IF;
		` + indent(2, o.setMainFunc("v_tok")) + `
		o_state := 1;
		o_token := v_tok;
		RETURN;
	END IF;
	` + indent(1, o.upsertHoldFunc("0", "p_mode", "p_lim", "v_tok", "p_info")) + `
	` + indent(1, o.markRowFunc()) + `
	IF v_own_live THEN
		PERFORM pg_notify('` + o.n.raw + `', p_key);
	END IF;
	o_state := 1;
	o_token := v_tok;
END
$$`
}

// refreshMultiFunc is NAME_ref_multi_v1: multiSQL.refreshMulti as one
// statement. o_ok reports whether the owner's live hold was extended.
func (o pgOps) refreshMultiFunc() string {
	t, h := o.n.table, o.n.holds
	return `CREATE OR REPLACE FUNCTION ` + o.refMulti() + `(p_key text, p_owner text, p_ttl_us bigint, OUT o_ok boolean)
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM 1 FROM ` + t + ` WHERE lock_key = p_key FOR UPDATE;
	UPDATE ` + h + ` SET expires_at = ` + pgExp + `
		WHERE lock_key = p_key AND owner = p_owner AND waiting = 0 AND expires_at > clock_timestamp();
	o_ok := FOUND;
	IF o_ok THEN
		` + indent(2, o.upsertMarkerFunc()) + `
	END IF;
END
$$`
}

// releaseMultiFunc is NAME_rel_multi_v1: multiSQL.releaseMulti as one
// statement. o_found reports whether the owner had a row in the holds
// table, o_live whether it was live.
func (o pgOps) releaseMultiFunc() string {
	t, h := o.n.table, o.n.holds
	return `CREATE OR REPLACE FUNCTION ` + o.relMulti() + `(p_key text, p_owner text, OUT o_found boolean, OUT o_live boolean)
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM 1 FROM ` + t + ` WHERE lock_key = p_key FOR UPDATE;
	DELETE FROM ` + h + ` WHERE lock_key = p_key AND owner = p_owner
		RETURNING expires_at > clock_timestamp() INTO o_live;
	o_found := FOUND;
	IF NOT o_found THEN
		o_live := false;
		RETURN;
	END IF;
	` + indent(1, o.markRowFunc()) + `
	DELETE FROM ` + t + ` WHERE lock_key = p_key AND (owner = '' OR expires_at <= clock_timestamp())
		AND NOT EXISTS (SELECT 1 FROM ` + h + ` WHERE lock_key = p_key AND expires_at > clock_timestamp());
	DELETE FROM ` + h + ` WHERE lock_key = p_key AND waiting = 0 AND expires_at <= clock_timestamp()
		AND NOT EXISTS (SELECT 1 FROM ` + t + ` WHERE lock_key = p_key);
	PERFORM pg_notify('` + o.n.raw + `', p_key);
END
$$`
}
