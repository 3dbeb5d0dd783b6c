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
//	-- no row returned: held by another owner; read its expiry, roll back
//	-- token 0 (a new hold):
//	UPDATE t_seq SET v = v + 1 WHERE id = 1 RETURNING v
//	UPDATE t SET token = ? WHERE lock_key = ?
//	COMMIT
//
// Times are integer milliseconds since the Unix epoch on the host's clock,
// the database clock of every process that opens the file.
type liteOps struct{ n names }

func (liteOps) unit() time.Duration { return time.Millisecond }

// liteNow is the current time in Unix milliseconds. julianday('now') is
// fixed for the duration of one sqlite3_step call, so every use in one
// statement sees the same instant; it works on every SQLite 3.
const liteNow = `CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER)`

func (o liteOps) ddl() []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + o.n.table + ` (
	lock_key   TEXT NOT NULL PRIMARY KEY,
	owner      TEXT NOT NULL,
	token      INTEGER NOT NULL,
	info       TEXT NOT NULL,
	expires_at INTEGER NOT NULL
) WITHOUT ROWID`,
		`CREATE TABLE IF NOT EXISTS ` + o.n.seq + ` (
	id INTEGER PRIMARY KEY CHECK (id = 1),
	v  INTEGER NOT NULL
)`,
		`INSERT OR IGNORE INTO ` + o.n.seq + ` (id, v) VALUES (1, 0)`,
	}
}

// createSchema runs the statements one by one, each in its own implicit
// transaction: each is idempotent, and SQLite serializes writers.
func (o liteOps) createSchema(ctx context.Context, db *sql.DB) error {
	for _, q := range o.ddl() {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

func (o liteOps) schemaExists(ctx context.Context, db *sql.DB) (bool, error) {
	return counterExists(ctx, db, o.n)
}

func (o liteOps) acquire(ctx context.Context, db *sql.DB, req driver.Request, ttl int64) (driver.Result, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return driver.Result{}, err
	}
	defer rollback(tx)
	var token int64
	err = tx.QueryRowContext(ctx, `INSERT INTO `+o.n.table+` AS l (lock_key, owner, token, info, expires_at)
VALUES (?1, ?2, 0, ?3, `+liteNow+` + ?4)
ON CONFLICT (lock_key) DO UPDATE SET
	owner = excluded.owner,
	info = excluded.info,
	expires_at = excluded.expires_at,
	token = CASE WHEN l.owner = excluded.owner AND l.expires_at > `+liteNow+` THEN l.token ELSE 0 END
WHERE l.owner = excluded.owner OR l.expires_at <= `+liteNow+`
RETURNING token`, req.Key, req.Owner, req.Info, ttl).Scan(&token)
	if errors.Is(err, sql.ErrNoRows) {
		var left int64
		err := tx.QueryRowContext(ctx, `SELECT expires_at - `+liteNow+` FROM `+o.n.table+` WHERE lock_key = ?`, req.Key).Scan(&left)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return driver.Result{}, err
		}
		return driver.Result{RetryAfter: time.Duration(max(left, 0)) * time.Millisecond}, nil
	}
	if err != nil {
		return driver.Result{}, err
	}
	if token == 0 {
		if err := tx.QueryRowContext(ctx, `UPDATE `+o.n.seq+` SET v = v + 1 WHERE id = 1 RETURNING v`).Scan(&token); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				err = errors.New("the token counter row is missing from " + o.n.seq)
			}
			return driver.Result{}, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+o.n.table+` SET token = ? WHERE lock_key = ?`, token, req.Key); err != nil {
			return driver.Result{}, err
		}
	}
	if err := tx.Commit(); err != nil {
		return driver.Result{}, err
	}
	return driver.Result{Acquired: true, Token: uint64(token)}, nil
}

func (o liteOps) refresh(ctx context.Context, db *sql.DB, req driver.Request, ttl int64) (bool, error) {
	n, err := execCount(ctx, db, `UPDATE `+o.n.table+` SET expires_at = `+liteNow+` + ?
WHERE lock_key = ? AND owner = ? AND expires_at > `+liteNow, ttl, req.Key, req.Owner)
	return n == 1, err
}

func (o liteOps) release(ctx context.Context, db *sql.DB, req driver.Request) (found, live bool, err error) {
	err = db.QueryRowContext(ctx, `DELETE FROM `+o.n.table+` WHERE lock_key = ? AND owner = ?
RETURNING expires_at > `+liteNow, req.Key, req.Owner).Scan(&live)
	if errors.Is(err, sql.ErrNoRows) {
		return false, false, nil
	}
	return err == nil, live, err
}

func (o liteOps) forceRelease(ctx context.Context, db *sql.DB, key string) (int, error) {
	var live bool
	err := db.QueryRowContext(ctx, `DELETE FROM `+o.n.table+` WHERE lock_key = ?
RETURNING expires_at > `+liteNow, key).Scan(&live)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, err
	case live:
		return 1, nil
	}
	return 0, nil
}

// keyRange returns the condition and arguments selecting keys that start
// with prefix: a range on the primary key, since SQLite's LIKE ignores
// ASCII case.
func keyRange(prefix string) (string, []any) {
	end, ok := prefixEnd(prefix)
	if !ok {
		return `lock_key >= ?`, []any{prefix}
	}
	return `lock_key >= ? AND lock_key < ?`, []any{prefix, end}
}

func (o liteOps) list(ctx context.Context, db *sql.DB, prefix string) ([]driver.Holder, error) {
	cond, args := keyRange(prefix)
	rows, err := db.QueryContext(ctx, `SELECT lock_key, owner, token, info, expires_at - `+liteNow+`
FROM `+o.n.table+` WHERE `+cond+` AND expires_at > `+liteNow+` ORDER BY lock_key`, args...)
	if err != nil {
		return nil, err
	}
	return scanHolders(rows, time.Millisecond)
}

func (o liteOps) count(ctx context.Context, db *sql.DB, prefix string) (int, error) {
	cond, args := keyRange(prefix)
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+o.n.table+` WHERE `+cond, args...).Scan(&n)
	return n, err
}

func (o liteOps) sweep(ctx context.Context, db *sql.DB, grace time.Duration, limit int) (int, error) {
	n, err := execCount(ctx, db, `DELETE FROM `+o.n.table+` WHERE lock_key IN (
	SELECT lock_key FROM `+o.n.table+` WHERE expires_at < `+liteNow+` - ? LIMIT ?)`, grace.Milliseconds(), limit)
	return int(n), err
}
