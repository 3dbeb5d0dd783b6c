package sqldlock

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"time"
)

// The statements of the holds-table protocol (multiSQL) on PostgreSQL and
// MySQL, which the driver runs on the server instead, as the functions and
// procedures of sql/postgres.sql and sql/mysql.sql; tests read the rows
// with them.

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

// multi returns the statements of the holds-table protocol (see multiSQL):
// the reference for the functions NAME_acquire_multi, NAME_refresh_multi
// and NAME_release_multi, which run the same steps on the server; the driver
// itself no longer runs them (tests do).
// lockKey locks the key's lock-table row, inserting an expired marker if
// there is none, so that every contender for the key, on the fast path or
// not, waits for the transaction.
func (o pgOps) multi() *multiSQL {
	t, h := o.n.Table, o.n.Holds
	exp := `clock_timestamp() + ?::bigint * interval '1 microsecond'`
	q := upsertMulti(t, h, "clock_timestamp()", exp, pgLeft, "greatest")
	q.lockKey = `WITH p AS (DELETE FROM ` + h + ` WHERE lock_key = ? AND expires_at <= clock_timestamp()
	AND (waiting = 0 OR expires_at <= clock_timestamp() - interval '` + strconv.FormatInt(int64(goneFor/time.Second), 10) + ` seconds'))
INSERT INTO ` + t + ` AS l (lock_key, owner, token, info, expires_at) VALUES (?, '', 0, '', 'epoch')
ON CONFLICT (lock_key) DO UPDATE SET owner = l.owner`
	q.lockMain = `SELECT 1 FROM ` + t + ` WHERE lock_key = ? FOR UPDATE`
	q.notify = `SELECT pg_notify('` + o.n.Name + `', ?)`
	q.nextToken = func(ctx context.Context, tx *sql.Tx) (int64, error) {
		var v int64
		err := tx.QueryRowContext(ctx, `SELECT nextval('`+o.n.Seq+`')`).Scan(&v)
		return v, err
	}
	q.unit, q.fair = time.Microsecond, o.fair
	q.rebind(rebind)
	return q
}

// multi returns the statements of the holds-table protocol (see multiSQL).
// lockKey locks the key's lock-table row, inserting an expired marker if
// there is none (a locking read of a missing row locks nothing under READ
// COMMITTED), so that every contender for the key waits for the
// transaction.
func (o myOps) multi() *multiSQL {
	t, h := o.n.Table, o.n.Holds
	exp := myNow + ` + INTERVAL ? MICROSECOND`
	// The marker's condition, evaluated before the assignments that change
	// the columns it reads (MySQL assigns left to right).
	mark := `owner = '' OR expires_at <= ` + myNow
	return &multiSQL{
		lockKey: `INSERT INTO ` + t + ` (lock_key, owner, token, info, expires_at) VALUES (?, '', 0, '', '1970-01-01')
ON DUPLICATE KEY UPDATE owner = owner`,
		lockMain:   `SELECT 1 FROM ` + t + ` WHERE lock_key = ? FOR UPDATE`,
		readMain:   `SELECT owner, token, expires_at > ` + myNow + `, ` + myLeft + ` FROM ` + t + ` WHERE lock_key = ?`,
		deleteMain: `DELETE FROM ` + t + ` WHERE lock_key = ?`,
		readHolds: `SELECT owner, waiting, mode, lim, token, ` + myLeft + `, expires_at > ` + myNow + ` FROM ` + h + `
WHERE lock_key = ? ORDER BY waiting, token`,
		upsertHold: `INSERT INTO ` + h + ` (lock_key, owner, waiting, mode, lim, token, info, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ` + exp + `)
ON DUPLICATE KEY UPDATE waiting = VALUES(waiting), mode = VALUES(mode), lim = VALUES(lim),
	token = VALUES(token), info = VALUES(info), expires_at = VALUES(expires_at)`,
		touchHold: `UPDATE ` + h + ` SET expires_at = ` + exp + ` WHERE lock_key = ? AND owner = ?`,
		upsertMarker: `INSERT INTO ` + t + ` (lock_key, owner, token, info, expires_at) VALUES (?, '', 0, '', ` + exp + `)
ON DUPLICATE KEY UPDATE expires_at = IF(owner = '', GREATEST(expires_at, VALUES(expires_at)), expires_at)`,
		markRow: `INSERT INTO ` + t + ` (lock_key, owner, token, info, expires_at)
SELECT ?, '', 0, '', m FROM (SELECT MAX(expires_at) AS m FROM ` + h + ` WHERE lock_key = ? AND expires_at > ` + myNow + `) AS x
WHERE m IS NOT NULL
ON DUPLICATE KEY UPDATE token = IF(` + mark + `, 0, token), info = IF(` + mark + `, '', info),
	owner = IF(` + mark + `, '', owner), expires_at = IF(owner = '', VALUES(expires_at), expires_at)`,
		downgrade: `UPDATE ` + t + ` SET owner = '', token = 0, info = '', expires_at = ` + exp + ` WHERE lock_key = ?`,
		setMain: `INSERT INTO ` + t + ` (lock_key, owner, token, info, expires_at) VALUES (?, ?, ?, ?, ` + exp + `)
ON DUPLICATE KEY UPDATE owner = VALUES(owner), token = VALUES(token), info = VALUES(info),
	expires_at = VALUES(expires_at)`,
		deleteHold:    `DELETE FROM ` + h + ` WHERE lock_key = ? AND owner = ?`,
		deleteHolders: `DELETE FROM ` + h + ` WHERE lock_key = ? AND waiting = 0`,
		releaseHold:   `SELECT waiting, expires_at > ` + myNow + ` FROM ` + h + ` WHERE lock_key = ? AND owner = ? FOR UPDATE`,
		releaseRow:    `SELECT expires_at > ` + myNow + ` FROM ` + t + ` WHERE lock_key = ? AND owner = ? FOR UPDATE`,
		deleteOwnMain: `DELETE FROM ` + t + ` WHERE lock_key = ? AND owner = ?`,
		noReturning:   true,
		idleMain: `DELETE FROM ` + t + ` WHERE lock_key = ? AND (owner = '' OR expires_at <= ` + myNow + `)
AND NOT EXISTS (SELECT 1 FROM ` + h + ` WHERE lock_key = ? AND expires_at > ` + myNow + `)`,
		idleHolds: `DELETE FROM ` + h + ` WHERE lock_key = ? AND waiting = 0 AND expires_at <= ` + myNow + `
AND NOT EXISTS (SELECT 1 FROM ` + t + ` WHERE lock_key = ?)`,
		refreshHold: `UPDATE ` + h + ` SET expires_at = ` + exp + `
WHERE lock_key = ? AND owner = ? AND waiting = 0 AND expires_at > ` + myNow,
		nextToken: o.nextToken,
		unit:      time.Microsecond,
		fair:      o.fair,
	}
}

// nextToken increments the counter row, which stays locked until the
// transaction ends, and returns the new value (LAST_INSERT_ID(expr) passes
// it back in the statement's result, without another round trip).
func (o myOps) nextToken(ctx context.Context, tx *sql.Tx) (int64, error) {
	return o.drawToken(ctx, tx)
}

// rebind rewrites every statement with f.
func (q *multiSQL) rebind(f func(string) string) {
	for _, p := range []*string{&q.lockKey, &q.lockMain, &q.notify, &q.readMain, &q.deleteMain,
		&q.readHolds, &q.upsertHold, &q.touchHold, &q.upsertMarker, &q.markRow, &q.downgrade, &q.setMain,
		&q.deleteHold, &q.deleteHolders, &q.releaseHold, &q.releaseRow, &q.deleteOwnMain,
		&q.idleMain, &q.idleHolds, &q.refreshHold} {
		*p = f(*p)
	}
}
