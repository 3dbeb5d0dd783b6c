// Package sqldlock is the dlock backend for SQL databases: PostgreSQL,
// MySQL/MariaDB and SQLite, through database/sql.
//
// Use it with a database you already have:
//
//	d, err := sqldlock.New(db, sqldlock.Postgres)
//	c, err := dlock.New(d)
//
// or open it by URL after importing the package (the driver then owns the
// connection pool it opened and closes it in Close):
//
//	import _ "github.com/dlockhq/dlock/sqldlock"
//
//	c, err := dlock.Open(ctx, "postgres://user:pass@db.example:5432/app?table=dlock_locks")
//	c, err := dlock.Open(ctx, "mysql://user:pass@db.example:3306/app")
//	c, err := dlock.Open(ctx, "sqlite:///var/lib/app/locks.db")
//
// # URLs
//
//   - postgres://... and postgresql://... are passed to pgx (see
//     github.com/jackc/pgx/v5/pgconn.ParseConfig for the parameters), minus
//     the dlock parameter table.
//   - mysql://user:password@host:port/database?params connects over TCP (port
//     3306 by default) with github.com/go-sql-driver/mysql; params other than
//     table are go-sql-driver DSN parameters; parseTime and clientFoundRows
//     default to true.
//   - sqlite:///absolute/path.db, or sqlite:relative/path.db (resolved
//     against the working directory when opened). The file is created if
//     missing, not its directory. The database is opened in WAL mode with a
//     busy timeout of 10s and BEGIN IMMEDIATE transactions. The only
//     parameter is table.
//
// Every scheme accepts table=NAME (see WithTable).
//
// # How locks are stored
//
// A hold is one row of the lock table, keyed by the lock's key, with the
// owner, the fencing token, the holder's info and the lease's expiry. Leases
// expire on the database's clock, never the client's: expiry times are
// computed and compared in SQL (clock_timestamp() on PostgreSQL,
// UTC_TIMESTAMP(6) on MySQL, the host clock on SQLite, which every process
// opening the file shares). Acquire, Refresh and Release are each one
// statement or one short transaction; see the comments on the dialect
// implementations for the statements and why they are atomic.
//
// Rows are deleted on release, so no row outlives its lock. Rows of holders
// that crashed are removed when their key is taken over, and by an
// opportunistic cleanup: an Acquire call starts, at most once every 2s per
// Driver, a background deletion of up to 100 rows that expired more than 1s
// ago. Expired rows of keys nobody acquires again may therefore linger until
// some client acquires something.
//
// Fencing tokens come from one counter per database and table (a sequence on
// PostgreSQL, a one-row table elsewhere), so they increase across all keys,
// and across releases, expiries and restarts, with the durability of the
// database's commits. A token is drawn only after the acquiring transaction
// holds the key's row, which makes it larger than the token of every earlier
// holder of the key.
//
// Keys are compared byte by byte (text COLLATE "C" on PostgreSQL, VARBINARY
// on MySQL, TEXT with the default BINARY collation on SQLite) and are at most
// 255 bytes. Request.Info is stored as valid UTF-8 of at most 1024 bytes.
//
// Release notification (driver.Notifier) works on PostgreSQL, with
// LISTEN/NOTIFY; on MySQL and SQLite waiters poll.
//
// # Schema
//
// The driver creates its schema on first use unless it exists (so an
// application whose user may not run DDL works once CreateSchema has been run
// by a more privileged one); creation is idempotent and safe when several
// processes do it at once. With the default table name the statements are:
//
// PostgreSQL (the function is the one-round-trip acquire; see pgOps):
//
//	CREATE TABLE IF NOT EXISTS "dlock_locks" (
//		lock_key   text COLLATE "C" PRIMARY KEY,
//		owner      text NOT NULL,
//		token      bigint NOT NULL,
//		info       text NOT NULL,
//		expires_at timestamptz NOT NULL
//	)
//	CREATE SEQUENCE IF NOT EXISTS "dlock_locks_token_seq"
//	CREATE OR REPLACE FUNCTION "dlock_locks_acquire_v1"(
//		p_key text, p_owner text, p_info text, p_ttl_us bigint,
//		OUT o_acquired boolean, OUT o_token bigint, OUT o_retry_us bigint)
//	LANGUAGE plpgsql AS $$
//	BEGIN
//		INSERT INTO "dlock_locks" AS l (lock_key, owner, token, info, expires_at)
//		VALUES (p_key, p_owner, 0, p_info, clock_timestamp() + p_ttl_us * interval '1 microsecond')
//		ON CONFLICT (lock_key) DO UPDATE SET
//			owner = excluded.owner,
//			info = excluded.info,
//			expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond',
//			token = CASE WHEN l.owner = excluded.owner AND l.expires_at > clock_timestamp()
//				THEN l.token ELSE 0 END
//		WHERE l.owner = excluded.owner OR l.expires_at <= clock_timestamp()
//		RETURNING l.token INTO o_token;
//		IF NOT FOUND THEN
//			o_acquired := false;
//			SELECT (extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000)::bigint
//				INTO o_retry_us FROM "dlock_locks" AS l WHERE l.lock_key = p_key;
//			RETURN;
//		END IF;
//		o_acquired := true;
//		IF o_token = 0 THEN
//			UPDATE "dlock_locks" SET token = nextval('"dlock_locks_token_seq"')
//				WHERE lock_key = p_key RETURNING token INTO o_token;
//		END IF;
//	END
//	$$
//
// MySQL and MariaDB:
//
//	CREATE TABLE IF NOT EXISTS `dlock_locks` (
//		lock_key   VARBINARY(255) NOT NULL PRIMARY KEY,
//		owner      VARBINARY(255) NOT NULL,
//		token      BIGINT UNSIGNED NOT NULL,
//		info       VARBINARY(1024) NOT NULL,
//		expires_at DATETIME(6) NOT NULL
//	) ENGINE=InnoDB
//	CREATE TABLE IF NOT EXISTS `dlock_locks_seq` (
//		id TINYINT UNSIGNED NOT NULL PRIMARY KEY,
//		v  BIGINT UNSIGNED NOT NULL
//	) ENGINE=InnoDB
//	INSERT IGNORE INTO `dlock_locks_seq` (id, v) VALUES (1, 0)
//
// SQLite (expires_at in Unix milliseconds):
//
//	CREATE TABLE IF NOT EXISTS "dlock_locks" (
//		lock_key   TEXT NOT NULL PRIMARY KEY,
//		owner      TEXT NOT NULL,
//		token      INTEGER NOT NULL,
//		info       TEXT NOT NULL,
//		expires_at INTEGER NOT NULL
//	) WITHOUT ROWID
//	CREATE TABLE IF NOT EXISTS "dlock_locks_seq" (
//		id INTEGER PRIMARY KEY CHECK (id = 1),
//		v  INTEGER NOT NULL
//	)
//	INSERT OR IGNORE INTO "dlock_locks_seq" (id, v) VALUES (1, 0)
//
// # SQLite and several processes
//
// SQLite coordinates the processes of one host that open the same file (not
// hosts sharing a network file system, where its locking is unreliable).
// Open it in WAL mode with a busy timeout of several seconds and
// _txlock=immediate, as the sqlite: URL does: a statement that cannot get the
// write lock within the busy timeout fails with SQLITE_BUSY, which is
// reported as an error, never as success. Tokens are durable only with
// synchronous=FULL (SQLite's default).
//
// # Helpers for application tables
//
// Two designs that do not need a lock table are provided as helpers for
// application tables: optimistic concurrency on a versioned row (Versioned)
// and claiming one free row of a resource table (Claim).
package sqldlock
