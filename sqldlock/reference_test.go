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
// LockKey locks the key's lock-table row, inserting an expired marker if
// there is none, so that every contender for the key, on the fast path or
// not, waits for the transaction.
func (o pgOps) multi() *multiSQL {
	t, h := o.n.Table, o.n.Holds
	exp := `clock_timestamp() + ?::bigint * interval '1 microsecond'`
	q := upsertMulti(t, h, "clock_timestamp()", exp, pgLeft, "greatest")
	q.LockKey = `WITH p AS (DELETE FROM ` + h + ` WHERE lock_key = ? AND expires_at <= clock_timestamp()
	AND (waiting = 0 OR expires_at <= clock_timestamp() - interval '` + strconv.FormatInt(int64(goneFor/time.Second), 10) + ` seconds'))
INSERT INTO ` + t + ` AS l (lock_key, owner, token, info, expires_at) VALUES (?, '', 0, '', 'epoch')
ON CONFLICT (lock_key) DO UPDATE SET owner = l.owner`
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
// LockKey locks the key's lock-table row, inserting an expired marker if
// there is none (a locking read of a missing row locks nothing under READ
// COMMITTED), so that every contender for the key waits for the
// transaction. ReleaseHold and ReleaseRow are locking reads here, after
// which NAME_release_multi deletes the row.
func (o myOps) multi() *multiSQL {
	t, h := o.n.Table, o.n.Holds
	exp := myNow + ` + INTERVAL ? MICROSECOND`
	// The marker's condition, evaluated before the assignments that change
	// the columns it reads (MySQL assigns left to right).
	mark := `owner = '' OR expires_at <= ` + myNow
	return &multiSQL{multiStmts: &multiStmts{
		LockKey: `INSERT INTO ` + t + ` (lock_key, owner, token, info, expires_at) VALUES (?, '', 0, '', '1970-01-01')
ON DUPLICATE KEY UPDATE owner = owner`,
		ReadMain:   `SELECT owner, token, expires_at > ` + myNow + `, ` + myLeft + ` FROM ` + t + ` WHERE lock_key = ?`,
		DeleteMain: `DELETE FROM ` + t + ` WHERE lock_key = ?`,
		ReadHolds: `SELECT owner, waiting, mode, lim, token, ` + myLeft + `, expires_at > ` + myNow + ` FROM ` + h + `
WHERE lock_key = ? ORDER BY waiting, token`,
		UpsertHold: `INSERT INTO ` + h + ` (lock_key, owner, waiting, mode, lim, token, info, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ` + exp + `)
ON DUPLICATE KEY UPDATE waiting = VALUES(waiting), mode = VALUES(mode), lim = VALUES(lim),
	token = VALUES(token), info = VALUES(info), expires_at = VALUES(expires_at)`,
		TouchHold: `UPDATE ` + h + ` SET expires_at = ` + exp + ` WHERE lock_key = ? AND owner = ?`,
		UpsertMarker: `INSERT INTO ` + t + ` (lock_key, owner, token, info, expires_at) VALUES (?, '', 0, '', ` + exp + `)
ON DUPLICATE KEY UPDATE expires_at = IF(owner = '', GREATEST(expires_at, VALUES(expires_at)), expires_at)`,
		MarkRow: `INSERT INTO ` + t + ` (lock_key, owner, token, info, expires_at)
SELECT ?, '', 0, '', m FROM (SELECT MAX(expires_at) AS m FROM ` + h + ` WHERE lock_key = ? AND expires_at > ` + myNow + `) AS x
WHERE m IS NOT NULL
ON DUPLICATE KEY UPDATE token = IF(` + mark + `, 0, token), info = IF(` + mark + `, '', info),
	owner = IF(` + mark + `, '', owner), expires_at = IF(owner = '', VALUES(expires_at), expires_at)`,
		Downgrade: `UPDATE ` + t + ` SET owner = '', token = 0, info = '', expires_at = ` + exp + ` WHERE lock_key = ?`,
		SetMain: `INSERT INTO ` + t + ` (lock_key, owner, token, info, expires_at) VALUES (?, ?, ?, ?, ` + exp + `)
ON DUPLICATE KEY UPDATE owner = VALUES(owner), token = VALUES(token), info = VALUES(info),
	expires_at = VALUES(expires_at)`,
		DeleteHold:    `DELETE FROM ` + h + ` WHERE lock_key = ? AND owner = ?`,
		DeleteHolders: `DELETE FROM ` + h + ` WHERE lock_key = ? AND waiting = 0`,
		ReleaseHold:   `SELECT waiting, expires_at > ` + myNow + ` FROM ` + h + ` WHERE lock_key = ? AND owner = ? FOR UPDATE`,
		ReleaseRow:    `SELECT expires_at > ` + myNow + ` FROM ` + t + ` WHERE lock_key = ? AND owner = ? FOR UPDATE`,
		IdleMain: `DELETE FROM ` + t + ` WHERE lock_key = ? AND (owner = '' OR expires_at <= ` + myNow + `)
AND NOT EXISTS (SELECT 1 FROM ` + h + ` WHERE lock_key = ? AND expires_at > ` + myNow + `)`,
		IdleHolds: `DELETE FROM ` + h + ` WHERE lock_key = ? AND waiting = 0 AND expires_at <= ` + myNow + `
AND NOT EXISTS (SELECT 1 FROM ` + t + ` WHERE lock_key = ?)`,
		RefreshHold: `UPDATE ` + h + ` SET expires_at = ` + exp + `
WHERE lock_key = ? AND owner = ? AND waiting = 0 AND expires_at > ` + myNow,
	},
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
	for _, p := range []*string{&q.LockKey, &q.ReadMain, &q.DeleteMain,
		&q.ReadHolds, &q.UpsertHold, &q.TouchHold, &q.UpsertMarker, &q.MarkRow, &q.Downgrade, &q.SetMain,
		&q.DeleteHold, &q.DeleteHolders, &q.ReleaseHold, &q.ReleaseRow,
		&q.IdleMain, &q.IdleHolds, &q.RefreshHold} {
		*p = f(*p)
	}
}

// The time left on expires_at and the current time, in microseconds, on
// PostgreSQL and MySQL.
const (
	pgLeft = `(extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint`
	myNow  = `UTC_TIMESTAMP(6)`
	myLeft = `TIMESTAMPDIFF(MICROSECOND, ` + myNow + `, expires_at)`
)

// upsertMulti returns the statements of the holds-table protocol in the
// form of SQLite's (sql/sqlite_stmts.sql), given the tables t and h and the dialect's
// expressions: now (the database's clock), exp (now plus the lease in the
// statement's parameter), left (the time left on expires_at, in the
// dialect's unit) and greatest (its two-argument maximum). The caller adds
// the statements that differ.
func upsertMulti(t, h, now, exp, left, greatest string) *multiSQL {
	return &multiSQL{multiStmts: &multiStmts{
		ReadMain:   `SELECT owner, token, expires_at > ` + now + `, ` + left + ` FROM ` + t + ` WHERE lock_key = ?`,
		DeleteMain: `DELETE FROM ` + t + ` WHERE lock_key = ?`,
		ReadHolds: `SELECT owner, waiting, mode, lim, token, ` + left + `, expires_at > ` + now + ` FROM ` + h + `
WHERE lock_key = ? ORDER BY waiting, token`,
		UpsertHold: `INSERT INTO ` + h + ` (lock_key, owner, waiting, mode, lim, token, info, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ` + exp + `)
ON CONFLICT (lock_key, owner) DO UPDATE SET waiting = excluded.waiting, mode = excluded.mode,
	lim = excluded.lim, token = excluded.token, info = excluded.info, expires_at = excluded.expires_at`,
		TouchHold: `UPDATE ` + h + ` SET expires_at = ` + exp + ` WHERE lock_key = ? AND owner = ?`,
		UpsertMarker: `INSERT INTO ` + t + ` AS l (lock_key, owner, token, info, expires_at)
VALUES (?, '', 0, '', ` + exp + `)
ON CONFLICT (lock_key) DO UPDATE SET expires_at = ` + greatest + `(l.expires_at, excluded.expires_at) WHERE l.owner = ''`,
		MarkRow: `INSERT INTO ` + t + ` AS l (lock_key, owner, token, info, expires_at)
SELECT ?, '', 0, '', m FROM (SELECT max(expires_at) AS m FROM ` + h + ` WHERE lock_key = ? AND expires_at > ` + now + `) AS x
WHERE m IS NOT NULL
ON CONFLICT (lock_key) DO UPDATE SET owner = '', token = 0, info = '', expires_at = excluded.expires_at
WHERE l.owner = '' OR l.expires_at <= ` + now,
		Downgrade: `UPDATE ` + t + ` SET owner = '', token = 0, info = '', expires_at = ` + exp + ` WHERE lock_key = ?`,
		SetMain: `INSERT INTO ` + t + ` (lock_key, owner, token, info, expires_at) VALUES (?, ?, ?, ?, ` + exp + `)
ON CONFLICT (lock_key) DO UPDATE SET owner = excluded.owner, token = excluded.token,
	info = excluded.info, expires_at = excluded.expires_at`,
		DeleteHold:    `DELETE FROM ` + h + ` WHERE lock_key = ? AND owner = ?`,
		DeleteHolders: `DELETE FROM ` + h + ` WHERE lock_key = ? AND waiting = 0`,
		ReleaseHold:   `DELETE FROM ` + h + ` WHERE lock_key = ? AND owner = ? RETURNING waiting, expires_at > ` + now,
		ReleaseRow:    `DELETE FROM ` + t + ` WHERE lock_key = ? AND owner = ? RETURNING expires_at > ` + now,
		IdleMain: `DELETE FROM ` + t + ` WHERE lock_key = ? AND (owner = '' OR expires_at <= ` + now + `)
AND NOT EXISTS (SELECT 1 FROM ` + h + ` WHERE lock_key = ? AND expires_at > ` + now + `)`,
		IdleHolds: `DELETE FROM ` + h + ` WHERE lock_key = ? AND waiting = 0 AND expires_at <= ` + now + `
AND NOT EXISTS (SELECT 1 FROM ` + t + ` WHERE lock_key = ?)`,
		RefreshHold: `UPDATE ` + h + ` SET expires_at = ` + exp + `
WHERE lock_key = ? AND owner = ? AND waiting = 0 AND expires_at > ` + now,
	}}
}
