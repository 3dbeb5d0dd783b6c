-- The statements of sqldlock's SQLite driver (liteStmts), rendered like
-- sqlite.sql, and with .Fair (WithFair). Times are Unix milliseconds: now_ms
-- is fixed for one sqlite3_step call, so one statement sees one instant.
{{define "now_ms"}}CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER){{end}}

-- name: SchemaExists(table name)
SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?;
-- name: NextToken
UPDATE {{.Seq}} SET v = v + 1 WHERE id = 1 RETURNING v;
-- name: RenewBehind(key, owner, ttl)
UPDATE {{.Holds}} SET expires_at = {{template "now_ms"}} + ?3
WHERE lock_key = ?1 AND owner = ?2 AND waiting = 1 AND expires_at > {{template "now_ms"}}
AND EXISTS (SELECT 1 FROM {{.Table}} WHERE lock_key = ?1 AND owner <> '' AND owner <> ?2
	AND expires_at > {{template "now_ms"}})
RETURNING (SELECT expires_at - {{template "now_ms"}} FROM {{.Table}} WHERE lock_key = ?1);
-- name: AcquireExclusive(key, owner, info, ttl)
-- Takes the key's row if expired (and, for a fair driver, no other owner
-- waits) or extends the owner's own live row; the token: see settleToken.
INSERT INTO {{.Table}} AS l (lock_key, owner, token, info, expires_at)
VALUES (?1, ?2, 0, ?3, {{template "now_ms"}} + ?4)
ON CONFLICT (lock_key) DO UPDATE SET
	owner = excluded.owner,
	info = excluded.info,
	expires_at = excluded.expires_at,
	token = CASE WHEN l.owner = excluded.owner AND l.expires_at > {{template "now_ms"}} THEN l.token
		WHEN l.owner = '' THEN -1 ELSE 0 END
{{- if .Fair}}
WHERE l.owner = excluded.owner AND l.expires_at > {{template "now_ms"}} OR l.expires_at <= {{template "now_ms"}}
	AND NOT EXISTS (SELECT 1 FROM {{.Holds}} WHERE lock_key = ?1 AND waiting = 1 AND owner <> ?2
		AND expires_at > {{template "now_ms"}})
{{- else}}
WHERE l.owner = excluded.owner OR l.expires_at <= {{template "now_ms"}}
{{- end}}
RETURNING token;
-- name: SetToken(token, key)
UPDATE {{.Table}} SET token = ? WHERE lock_key = ?;
-- name: Refresh(ttl, key, owner)
UPDATE {{.Table}} SET expires_at = {{template "now_ms"}} + ?
WHERE lock_key = ? AND owner = ? AND expires_at > {{template "now_ms"}};
-- name: Release(key, owner)
-- Deletes the owner's Exclusive hold; a fair driver's, only while the key
-- has no live queue entry (otherwise a transaction leaves the waiters'
-- marker).
DELETE FROM {{.Table}} WHERE lock_key = ?1 AND owner = ?2
{{- if .Fair}} AND NOT EXISTS (SELECT 1 FROM {{.Holds}} WHERE lock_key = ?1 AND waiting = 1
	AND expires_at > {{template "now_ms"}})
{{- end}}
RETURNING expires_at > {{template "now_ms"}};
-- name: ForceLive(key)
DELETE FROM {{.Table}} WHERE lock_key = ? AND owner <> '' AND expires_at > {{template "now_ms"}};
-- name: ForceLiveHolds(key)
DELETE FROM {{.Holds}} WHERE lock_key = ? AND waiting = 0 AND expires_at > {{template "now_ms"}};
-- name: ForceHolds(key)
DELETE FROM {{.Holds}} WHERE lock_key = ?;
-- name: List(from, to)
-- The live holds of the keys from ?1 up to ?2, the range of a prefix (a
-- range of the primary key, since SQLite's LIKE ignores ASCII case); ?2 is
-- NULL if the range has no end: every text sorts before a blob.
SELECT lock_key, owner, 0, 0, token, info, expires_at - {{template "now_ms"}}
FROM {{.Table}} WHERE lock_key >= ?1 AND lock_key < coalesce(?2, x'')
	AND owner <> '' AND expires_at > {{template "now_ms"}}
UNION ALL
SELECT lock_key, owner, mode, lim, token, info, expires_at - {{template "now_ms"}}
FROM {{.Holds}} WHERE lock_key >= ?1 AND lock_key < coalesce(?2, x'')
	AND waiting = 0 AND expires_at > {{template "now_ms"}}
ORDER BY 1, 5;
-- name: Count(from, to)
-- The rows of the keys from ?1 up to ?2 (see List).
SELECT (SELECT count(*) FROM {{.Table}} WHERE lock_key >= ?1 AND lock_key < coalesce(?2, x''))
	+ (SELECT count(*) FROM {{.Holds}} WHERE lock_key >= ?1 AND lock_key < coalesce(?2, x''));
-- name: SweepLocks(grace, limit)
-- A batch of long-expired lock-table rows. An expired Exclusive hold with
-- live waiters behind it stays: it keeps their places until one of them
-- turns it into their marker.
DELETE FROM {{.Table}} WHERE lock_key IN (
	SELECT lock_key FROM {{.Table}} AS l WHERE expires_at < {{template "now_ms"}} - ?
	AND NOT EXISTS (SELECT 1 FROM {{.Holds}} AS h WHERE h.lock_key = l.lock_key AND h.expires_at > {{template "now_ms"}})
	LIMIT ?);
-- name: SweepHolds(grace, max(grace, goneFor), limit)
-- A batch of long-expired holds-table rows: of holders, and of waiters once
-- they no longer record lost places.
DELETE FROM {{.Holds}} WHERE (lock_key, owner) IN (
	SELECT lock_key, owner FROM {{.Holds}} WHERE expires_at < {{template "now_ms"}} - ?
	AND (waiting = 0 OR expires_at < {{template "now_ms"}} - ?) LIMIT ?);
-- name: LockKey(key)
-- The first statement of the holds-table protocol (multiStmts): a write,
-- which takes the file's write lock: deletes the key's expired holder rows
-- and the waiter rows whose lease ended more than goneFor ago.
DELETE FROM {{.Holds}} WHERE lock_key = ? AND expires_at <= {{template "now_ms"}}
AND (waiting = 0 OR expires_at <= {{template "now_ms"}} - {{.GoneSeconds}} * 1000);
-- name: ReadMain(key)
SELECT owner, token, expires_at > {{template "now_ms"}}, expires_at - {{template "now_ms"}} FROM {{.Table}} WHERE lock_key = ?;
-- name: DeleteMain(key)
DELETE FROM {{.Table}} WHERE lock_key = ?;
-- name: ReadHolds(key)
SELECT owner, waiting, mode, lim, token, expires_at - {{template "now_ms"}}, expires_at > {{template "now_ms"}} FROM {{.Holds}}
WHERE lock_key = ? ORDER BY waiting, token;
-- name: UpsertHold(key, owner, waiting, mode, lim, token, info, ttl)
INSERT INTO {{.Holds}} (lock_key, owner, waiting, mode, lim, token, info, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, {{template "now_ms"}} + ?)
ON CONFLICT (lock_key, owner) DO UPDATE SET waiting = excluded.waiting, mode = excluded.mode,
	lim = excluded.lim, token = excluded.token, info = excluded.info, expires_at = excluded.expires_at;
-- name: TouchHold(ttl, key, owner)
UPDATE {{.Holds}} SET expires_at = {{template "now_ms"}} + ? WHERE lock_key = ? AND owner = ?;
-- name: UpsertMarker(key, ttl)
INSERT INTO {{.Table}} AS l (lock_key, owner, token, info, expires_at)
VALUES (?, '', 0, '', {{template "now_ms"}} + ?)
ON CONFLICT (lock_key) DO UPDATE SET expires_at = max(l.expires_at, excluded.expires_at) WHERE l.owner = '';
-- name: MarkRow(key, key)
INSERT INTO {{.Table}} AS l (lock_key, owner, token, info, expires_at)
SELECT ?, '', 0, '', m FROM (SELECT max(expires_at) AS m FROM {{.Holds}} WHERE lock_key = ? AND expires_at > {{template "now_ms"}}) AS x
WHERE m IS NOT NULL
ON CONFLICT (lock_key) DO UPDATE SET owner = '', token = 0, info = '', expires_at = excluded.expires_at
WHERE l.owner = '' OR l.expires_at <= {{template "now_ms"}};
-- name: Downgrade(ttl, key)
UPDATE {{.Table}} SET owner = '', token = 0, info = '', expires_at = {{template "now_ms"}} + ? WHERE lock_key = ?;
-- name: SetMain(key, owner, token, info, ttl)
INSERT INTO {{.Table}} (lock_key, owner, token, info, expires_at) VALUES (?, ?, ?, ?, {{template "now_ms"}} + ?)
ON CONFLICT (lock_key) DO UPDATE SET owner = excluded.owner, token = excluded.token,
	info = excluded.info, expires_at = excluded.expires_at;
-- name: DeleteHold(key, owner)
DELETE FROM {{.Holds}} WHERE lock_key = ? AND owner = ?;
-- name: DeleteHolders(key)
DELETE FROM {{.Holds}} WHERE lock_key = ? AND waiting = 0;
-- name: ReleaseHold(key, owner)
DELETE FROM {{.Holds}} WHERE lock_key = ? AND owner = ? RETURNING waiting, expires_at > {{template "now_ms"}};
-- name: ReleaseRow(key, owner)
DELETE FROM {{.Table}} WHERE lock_key = ? AND owner = ? RETURNING expires_at > {{template "now_ms"}};
-- name: IdleMain(key, key)
DELETE FROM {{.Table}} WHERE lock_key = ? AND (owner = '' OR expires_at <= {{template "now_ms"}})
AND NOT EXISTS (SELECT 1 FROM {{.Holds}} WHERE lock_key = ? AND expires_at > {{template "now_ms"}});
-- name: IdleHolds(key, key)
DELETE FROM {{.Holds}} WHERE lock_key = ? AND waiting = 0 AND expires_at <= {{template "now_ms"}}
AND NOT EXISTS (SELECT 1 FROM {{.Table}} WHERE lock_key = ?);
-- name: RefreshHold(ttl, key, owner)
UPDATE {{.Holds}} SET expires_at = {{template "now_ms"}} + ?
WHERE lock_key = ? AND owner = ? AND waiting = 0 AND expires_at > {{template "now_ms"}};
