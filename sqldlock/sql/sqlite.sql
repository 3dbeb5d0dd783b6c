-- The SQLite schema of dlock's sqldlock, schema version 1 (the lock
-- table records it). In sqldlock/sql/sqlite.sql the names are text/template
-- actions: the lock table's name (WithTable, the URL's table parameter) and
-- the names derived from it, each a plain identifier, quoted. `dlock schema
-- --print --url URL` prints the file with the names filled in, for sqlite3.
-- Each statement follows its "-- name:" line.

-- name: lock_table
-- The lock table: one row per key held Exclusive, or the marker (owner '')
-- of the key's rows in the holds table. The comment in it is the schema
-- version, which the driver checks before it uses the schema: SQLite keeps
-- the text of CREATE TABLE. expires_at is in Unix milliseconds.
CREATE TABLE IF NOT EXISTS {{.Table}} ( -- dlock schema 1
	lock_key   TEXT NOT NULL PRIMARY KEY,
	owner      TEXT NOT NULL,
	token      INTEGER NOT NULL,
	info       TEXT NOT NULL,
	expires_at INTEGER NOT NULL
) WITHOUT ROWID;

-- name: token_seq
-- The fencing-token counter (one row), shared by every key and mode.
CREATE TABLE IF NOT EXISTS {{.Seq}} (
	id INTEGER PRIMARY KEY CHECK (id = 1),
	v  INTEGER NOT NULL
);

-- name: token_seq_row
-- The counter's row.
INSERT OR IGNORE INTO {{.Seq}} (id, v) VALUES (1, 0);

-- name: holds
-- Shared and Semaphore holds, and waiters' queue entries (waiting = 1).
CREATE TABLE IF NOT EXISTS {{.Holds}} (
	lock_key   TEXT NOT NULL,
	owner      TEXT NOT NULL,
	waiting    INTEGER NOT NULL,
	mode       INTEGER NOT NULL,
	lim        INTEGER NOT NULL,
	token      INTEGER NOT NULL,
	info       TEXT NOT NULL,
	expires_at INTEGER NOT NULL,
	PRIMARY KEY (lock_key, owner)
) WITHOUT ROWID;
