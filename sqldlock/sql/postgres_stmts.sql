-- The statements of sqldlock's PostgreSQL driver (pgStmts), rendered like
-- postgres.sql. Times are in microseconds.

-- name: SchemaLock(hash of the table name)
SELECT pg_advisory_xact_lock($1);
-- name: SchemaExists(quoted table name)
SELECT coalesce(obj_description(c, 'pg_class'), '') FROM to_regclass($1) AS c WHERE c IS NOT NULL;
-- name: Acquire(key, owner, info, ttl, queued, fair)
SELECT o_acquired, o_token, o_retry_us, o_marked FROM {{.Acquire}}($1, $2, $3, $4, $5, $6);
-- name: Wait(key, owner, mode, limit, ttl)
SELECT o_state, o_retry_us FROM {{.Wait}}($1, $2, $3, $4, $5);
-- name: AcquireMulti(key, owner, info, ttl, mode, limit, queue, fair)
SELECT o_state, o_token, o_retry_us, o_mode, o_lim FROM {{.AcquireMulti}}($1, $2, $3, $4, $5, $6, $7, $8);
-- name: Refresh(key, owner, ttl)
UPDATE {{.Table}}
SET expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
WHERE lock_key = $1 AND owner = $2 AND expires_at > clock_timestamp();
-- name: RefreshMulti(key, owner, ttl)
SELECT o_ok FROM {{.RefreshMulti}}($1, $2, $3);
-- name: ReleaseFair(key, owner)
SELECT o_live FROM {{.Release}}($1, $2);
-- name: Release(key, owner, channel, Shared)
-- Deletes the Exclusive hold and, in the same transaction, wakes the waiters
-- that can take the key next: the head of its queue and, if that is a
-- reader, the readers queued before the first writer, each with a waiter
-- payload (chr(1), the owner's length in bytes, ':', the owner, the key: see
-- parseWaiter). With nobody queued, every subscriber of the key.
WITH d AS (
	DELETE FROM {{.Table}} WHERE lock_key = $1 AND owner = $2
	RETURNING expires_at > clock_timestamp() AS live),
q AS (
	SELECT owner, row_number() OVER w AS pos, count(*) FILTER (WHERE mode <> $4) OVER w AS writers
	FROM {{.Holds}}
	WHERE lock_key = $1 AND waiting = 1 AND expires_at > clock_timestamp() AND EXISTS (SELECT FROM d)
	WINDOW w AS (ORDER BY token)),
n AS (
	SELECT count(pg_notify($3, chr(1) || octet_length(owner) || ':' || owner || $1)) AS woken
	FROM q WHERE pos = 1 OR writers = 0)
SELECT d.live, CASE WHEN n.woken = 0 THEN pg_notify($3, $1)::text END FROM d, n;
-- name: LeaveQueue(key, owner)
-- A waiter queued behind another owner's live Exclusive hold leaves the
-- queue: the hold's row stands for the queue, so nothing else changes (and
-- the hold's row stays unlocked).
DELETE FROM {{.Holds}} AS h WHERE h.lock_key = $1 AND h.owner = $2 AND h.waiting = 1
	AND EXISTS (SELECT 1 FROM {{.Table}} AS l WHERE l.lock_key = $1 AND l.owner <> '' AND l.owner <> $2
		AND l.expires_at > clock_timestamp())
RETURNING h.expires_at > clock_timestamp();
-- name: Gate(the number of the key's gate, written in: see gate.go)
-- Waits in the key's line for its gate, a session advisory lock, and
-- listens once it has it: one round trip, in the simple query protocol,
-- which takes no parameters.
SELECT pg_advisory_lock(%d); LISTEN {{.Table}};
-- name: LeaveGate
-- Stops listening and lets go of the gate (one taken just as the wait was
-- cancelled too).
UNLISTEN *; SELECT pg_advisory_unlock_all();
-- name: CancelGate(backend process ID)
-- Cancels a wait for a gate, from another connection.
SELECT pg_cancel_backend($1);
-- name: ReleaseMulti(key, owner)
-- A Shared or Semaphore hold, or a queue entry.
SELECT o_found, o_live FROM {{.ReleaseMulti}}($1, $2);
-- name: ForceRelease(key, channel)
-- Deletes every row of the key, counts the live holds and wakes the key's
-- subscribers.
WITH d AS (
	DELETE FROM {{.Table}} WHERE lock_key = $1
	RETURNING owner <> '' AND expires_at > clock_timestamp() AS live),
h AS (
	DELETE FROM {{.Holds}} WHERE lock_key = $1
	RETURNING waiting = 0 AND expires_at > clock_timestamp() AS live)
SELECT (SELECT count(*) FILTER (WHERE live) FROM d) + (SELECT count(*) FILTER (WHERE live) FROM h)
FROM pg_notify($2, $1);
-- name: List(pattern)
-- The live holds of the keys that match a LIKE pattern.
SELECT lock_key, owner, 0, 0, token, info, (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint
FROM {{.Table}}
WHERE lock_key LIKE $1 ESCAPE '!' AND owner <> '' AND expires_at > clock_timestamp()
UNION ALL
SELECT lock_key, owner, mode, lim, token, info, (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint
FROM {{.Holds}}
WHERE lock_key LIKE $1 ESCAPE '!' AND waiting = 0 AND expires_at > clock_timestamp();
-- name: Count(pattern)
SELECT (SELECT count(*) FROM {{.Table}} WHERE lock_key LIKE $1 ESCAPE '!')
	+ (SELECT count(*) FROM {{.Holds}} WHERE lock_key LIKE $1 ESCAPE '!');
-- name: SweepLocks(grace, limit)
-- A batch of long-expired lock-table rows, skipping rows another transaction
-- has locked (an acquirer taking one over, say); FOR UPDATE re-checks the
-- expiry on the latest version of each row it locks. An expired Exclusive
-- hold with live waiters behind it stays: it keeps their places until one of
-- them turns it into their marker (a change of the row, which a sweep that
-- read the holds table before they committed re-checks all the same).
DELETE FROM {{.Table}} WHERE lock_key IN (
	SELECT lock_key FROM {{.Table}} AS l
	WHERE expires_at < clock_timestamp() - $1::bigint * interval '1 microsecond'
	AND NOT EXISTS (SELECT 1 FROM {{.Holds}} AS h
		WHERE h.lock_key = l.lock_key AND h.expires_at > clock_timestamp())
	LIMIT $2 FOR UPDATE OF l SKIP LOCKED);
-- name: SweepHolds(grace, limit, max(grace, goneFor))
-- A batch of long-expired holds-table rows: of holders, and of waiters once
-- they no longer record lost places.
DELETE FROM {{.Holds}} WHERE (lock_key, owner) IN (
	SELECT lock_key, owner FROM {{.Holds}}
	WHERE expires_at < clock_timestamp() - $1::bigint * interval '1 microsecond'
	AND (waiting = 0 OR expires_at < clock_timestamp() - $3::bigint * interval '1 microsecond')
	LIMIT $2 FOR UPDATE SKIP LOCKED);
