-- The statements of sqldlock's MySQL/MariaDB driver (myStmts), rendered
-- like mysql.sql. Times are in microseconds on UTC_TIMESTAMP(6).

-- name: SchemaExists(table name)
SELECT TABLE_COMMENT FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?;
-- name: SchemaObjects
-- 4 once every object exists: the counter's row and the three procedures (a
-- missing table is an error).
SELECT (SELECT COUNT(*) FROM {{.Seq}} WHERE id = 1 AND NOT EXISTS (SELECT 1 FROM {{.Holds}} WHERE 1 = 0))
	+ (SELECT COUNT(*) FROM information_schema.ROUTINES
	WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_TYPE = 'PROCEDURE'
		AND ROUTINE_NAME IN ('{{.Name}}_acquire_multi', '{{.Name}}_refresh_multi', '{{.Name}}_release_multi'));
-- name: Peek(owner, key)
SELECT l.owner, l.expires_at > UTC_TIMESTAMP(6), TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires_at),
	w.waiting, w.expires_at > UTC_TIMESTAMP(6), w.expires_at > UTC_TIMESTAMP(6) - INTERVAL {{.GoneSeconds}} SECOND
FROM {{.Table}} AS l LEFT JOIN {{.Holds}} AS w ON w.lock_key = l.lock_key AND w.owner = ?
WHERE l.lock_key = ?;
-- name: InsertMarker(key)
INSERT INTO {{.Table}} (lock_key, owner, token, info, expires_at)
VALUES (?, '', 0, '', '1970-01-01') ON DUPLICATE KEY UPDATE owner = owner;
-- name: RenewBehind(ttl, key, owner, key, owner)
-- Renews a queue entry while another owner holds the key Exclusive, live.
UPDATE {{.Holds}} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE lock_key = ? AND owner = ? AND waiting = 1 AND expires_at > UTC_TIMESTAMP(6)
AND EXISTS (SELECT 1 FROM {{.Table}}
	WHERE lock_key = ? AND owner <> '' AND owner <> ? AND expires_at > UTC_TIMESTAMP(6));
-- name: DeleteStale(key, owner)
DELETE FROM {{.Holds}} WHERE lock_key = ? AND owner = ? AND expires_at <= UTC_TIMESTAMP(6)
AND (waiting = 0 OR expires_at <= UTC_TIMESTAMP(6) - INTERVAL {{.GoneSeconds}} SECOND);
-- name: Enqueue(key, owner, mode, limit, place, ttl, key, owner)
-- Queues the owner while another owner holds the key Exclusive, live. LOCK
-- IN SHARE MODE: a fair driver's takeover of the expired key locks the row
-- first, and so sees every entry queued while the key was held.
INSERT INTO {{.Holds}} (lock_key, owner, waiting, mode, lim, token, info, expires_at)
SELECT ?, ?, 1, ?, ?, ?, '', UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND FROM {{.Table}}
WHERE lock_key = ? AND owner <> '' AND owner <> ? AND expires_at > UTC_TIMESTAMP(6) LOCK IN SHARE MODE;
-- name: DrawToken
UPDATE {{.Seq}} SET v = LAST_INSERT_ID(v + 1) WHERE id = 1;
-- name: Refresh(ttl, key, owner)
UPDATE {{.Table}}
SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE lock_key = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6);
-- name: IsHeld(key, owner)
SELECT COUNT(*) FROM {{.Table}}
WHERE lock_key = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6);
-- name: ReleaseLive(key, owner)
DELETE FROM {{.Table}} WHERE lock_key = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6);
-- name: ReleaseExpired(key, owner)
DELETE FROM {{.Table}} WHERE lock_key = ? AND owner = ?;
-- name: ReleaseFair(key, owner)
-- A fair driver's release of a live Exclusive hold while the key has no live
-- queue entry (see myOps). NO_SEMIJOIN keeps MySQL from turning the subquery
-- into a join that reads the holds table first (MariaDB reads it as a comment).
DELETE FROM {{.Table}} WHERE lock_key = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)
AND NOT EXISTS (SELECT /*+ NO_SEMIJOIN() */ 1 FROM {{.Holds}} AS w
	WHERE w.lock_key = {{.Table}}.lock_key AND w.waiting = 1 AND w.expires_at > UTC_TIMESTAMP(6));
-- name: ReadEntry(key, owner, key, owner, key, owner)
SELECT (SELECT COUNT(*) FROM {{.Table}} WHERE lock_key = ? AND owner = ?),
	(SELECT waiting FROM {{.Holds}} WHERE lock_key = ? AND owner = ?),
	(SELECT expires_at > UTC_TIMESTAMP(6) FROM {{.Holds}} WHERE lock_key = ? AND owner = ?);
-- name: LeaveQueue(key, owner, key, owner)
DELETE FROM {{.Holds}} WHERE lock_key = ? AND owner = ? AND waiting = 1
AND EXISTS (SELECT 1 FROM {{.Table}}
	WHERE lock_key = ? AND owner <> '' AND owner <> ? AND expires_at > UTC_TIMESTAMP(6));
-- name: ForceLive(key)
DELETE FROM {{.Table}} WHERE lock_key = ? AND owner <> '' AND expires_at > UTC_TIMESTAMP(6);
-- name: ForceLiveHolds
DELETE FROM {{.Holds}} WHERE lock_key = ? AND waiting = 0 AND expires_at > UTC_TIMESTAMP(6);
-- name: ForceMain
DELETE FROM {{.Table}} WHERE lock_key = ?;
-- name: ForceHolds
DELETE FROM {{.Holds}} WHERE lock_key = ?;
-- name: List(pattern, pattern)
-- The live holds of the keys that match a LIKE pattern.
SELECT lock_key, owner, 0, 0, token, info, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
FROM {{.Table}}
WHERE lock_key LIKE ? ESCAPE '!' AND owner <> '' AND expires_at > UTC_TIMESTAMP(6)
UNION ALL
SELECT lock_key, owner, mode, lim, token, info, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
FROM {{.Holds}}
WHERE lock_key LIKE ? ESCAPE '!' AND waiting = 0 AND expires_at > UTC_TIMESTAMP(6);
-- name: Count(pattern, pattern)
SELECT (SELECT COUNT(*) FROM {{.Table}} WHERE lock_key LIKE ? ESCAPE '!')
	+ (SELECT COUNT(*) FROM {{.Holds}} WHERE lock_key LIKE ? ESCAPE '!');
-- name: SweepHolds(grace, max(grace, goneFor), limit)
DELETE FROM {{.Holds}}
WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
AND (waiting = 0 OR expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND) LIMIT ?;
-- name: ExpiredLocks(grace, limit)
-- A plain read of long-expired lock-table rows. An expired Exclusive hold
-- with live waiters behind it stays: it keeps their places until one of them
-- turns it into their marker.
SELECT lock_key FROM {{.Table}}
WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
AND NOT EXISTS (SELECT /*+ NO_SEMIJOIN() */ 1 FROM {{.Holds}} AS w
	WHERE w.lock_key = {{.Table}}.lock_key AND w.expires_at > UTC_TIMESTAMP(6))
ORDER BY lock_key LIMIT ?;
-- name: SweepLocks(key, ..., grace)
-- Deletes the rows that ExpiredLocks found, by primary key, re-checking
-- their expiry under the row locks. The driver writes one ? in the IN list
-- per key.
DELETE FROM {{.Table}} WHERE lock_key IN (?)
AND expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
AND NOT EXISTS (SELECT /*+ NO_SEMIJOIN() */ 1 FROM {{.Holds}} AS w
	WHERE w.lock_key = {{.Table}}.lock_key AND w.expires_at > UTC_TIMESTAMP(6));
-- name: AcquireMulti(key, owner, info, ttl, mode, limit, queue, fair)
CALL {{.AcquireMulti}}(?, ?, ?, ?, ?, ?, ?, ?);
-- name: RefreshMulti(key, owner, ttl)
CALL {{.RefreshMulti}}(?, ?, ?);
-- name: ReleaseMulti(key, owner, main)
CALL {{.ReleaseMulti}}(?, ?, ?);
