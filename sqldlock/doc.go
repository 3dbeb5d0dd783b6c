// Package sqldlock is the dlock backend for SQL databases: PostgreSQL,
// MySQL/MariaDB and SQLite, through database/sql.
//
// Each dialect has a package of its own, which compiles in its database/sql
// driver and registers its URL schemes; package sqldlock itself compiles in
// none, so that a program builds only the database drivers it uses:
//
//	import _ "github.com/dlockhq/dlock/sqldlock/postgres" // pgx; postgres://, postgresql://
//	import _ "github.com/dlockhq/dlock/sqldlock/mysql"    // go-sql-driver/mysql; mysql://
//	import _ "github.com/dlockhq/dlock/sqldlock/sqlite"   // modernc.org/sqlite; sqlite: (dlock.OpenDefault's store)
//
// With the dialect's package imported, use a database you already have:
//
//	d, err := sqldlock.New(db, sqldlock.Postgres)
//	c, err := dlock.New(d)
//
// or open one by URL (the driver then owns the connection pool it opened
// and closes it in Close):
//
//	c, err := dlock.Open(ctx, "postgres://user:pass@db.example:5432/app?table=dlock_locks")
//	c, err := dlock.Open(ctx, "mysql://user:pass@db.example:3306/app")
//	c, err := dlock.Open(ctx, "sqlite:///var/lib/app/locks.db")
//
// # URLs
//
//   - postgres://... and postgresql://... are passed to pgx (see
//     github.com/jackc/pgx/v5/pgconn.ParseConfig for the parameters), minus
//     the dlock parameters table and fair.
//   - mysql://user:password@host:port/database?params connects over TCP (port
//     3306 by default) with github.com/go-sql-driver/mysql; params other than
//     table and fair are go-sql-driver DSN parameters; parseTime and
//     clientFoundRows default to true.
//   - sqlite:///absolute/path.db, or sqlite:relative/path.db (resolved
//     against the working directory when opened). The file is created if
//     missing, not its directory. The database is opened in WAL mode with a
//     busy timeout of 10s and BEGIN IMMEDIATE transactions. The only
//     parameters are table and fair.
//
// Every scheme accepts table=NAME (see WithTable) and fair=1 (see WithFair,
// and Fairness below; fair=0, the default, leaves it off).
//
// # TLS
//
// PostgreSQL URLs take pgx's (libpq's) TLS parameters. Use
// sslmode=verify-full, which verifies the server's certificate and its name
// (pgx's default, prefer, verifies nothing and falls back to plain TCP),
// with sslrootcert (the authorities, a PEM file; the system's roots
// without it) and, for a server that asks for a client certificate
// (clientcert=verify-ca or the cert method in pg_hba.conf), sslcert and
// sslkey:
//
//	postgres://app:pw@db.example:5432/app?sslmode=verify-full&sslrootcert=/etc/dlock/ca.pem&sslcert=/etc/dlock/client.pem&sslkey=/etc/dlock/client-key.pem
//
// MySQL URLs take the TLS parameters of dlock's other store URLs: cacert (the
// authorities, a PEM file), cert and key (a client certificate and its key,
// for an account with REQUIRE X509) and servername (the name the server's
// certificate must carry when it is not the URL's host). Any of them makes
// the connection TLS, verifying the certificate and its name; tls may then
// only be true:
//
//	mysql://app:pw@db.example:3306/app?cacert=/etc/dlock/ca.pem&cert=/etc/dlock/client.pem&key=/etc/dlock/client-key.pem
//
// Without them, go-sql-driver's tls parameter applies: tls=true (verifying,
// with the system's roots, against the URL's host), skip-verify and
// preferred (encrypted but not verified: not for untrusted networks), or the
// name of a configuration registered with mysql.RegisterTLSConfig. On both,
// a certificate that does not verify fails the open at once with Go's x509
// error ("certificate signed by unknown authority"); passwords and key file
// names are never quoted in errors.
//
// Opening a PostgreSQL or MySQL connection is bounded: a server that accepts
// connections and never answers makes dlock.Open (and any later connection
// of the pool) fail, with an error wrapping context.DeadlineExceeded, after
// 5s by default. The bound covers the dial and the whole handshake (TLS,
// authentication). Set it with connect_timeout=SECONDS on postgres: URLs
// (pgx's parameter) and timeout=DURATION on mysql: URLs (go-sql-driver's
// parameter, a Go duration such as 10s; the driver applies it to the whole
// handshake, not only the dial). A deadline on the context given to
// dlock.Open ends the open earlier. What go-sql-driver/mysql would log to
// stderr about the connections it opens goes to log/slog at debug level
// instead (set per connection pool, so other users of go-sql-driver in the
// process are unaffected).
//
// # How locks are stored
//
// An Exclusive hold is one row of the lock table, keyed by the lock's key,
// with the owner, the fencing token, the holder's info and the lease's
// expiry. Shared holds, semaphore permits and queue entries are rows of a
// second table, the holds table (see Modes). Leases
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
// A semaphore's limit is at most math.MaxInt32 (the holds table's lim column
// is a 32-bit integer) and a lease at most dlock.DefaultMaxTTL
// (Capabilities.MaxLimit, MaxTTL); package dlock refuses larger ones with a
// *dlock.ArgError before any statement runs.
//
// Release notification (driver.Notifier) works on PostgreSQL, with
// LISTEN/NOTIFY; on MySQL and SQLite waiters poll. The release of an
// Exclusive hold by a driver that is not fair wakes only the queued waiters
// that can take the key next (the head of the queue, or the readers queued
// before the first writer) and the subscribers that do not queue; the other
// queued waiters sleep on. Other releases (a fair driver's, of Shared and
// Semaphore holds, ForceRelease, and every release by an older client) wake
// every subscriber of the key. PostgreSQL itself still signals every
// listening connection of the database on each notifying commit, so its work
// per release still grows with the number of waiting clients, only less.
//
// # Durability and server crashes
//
// An acquisition is only as durable as the commit that recorded it. With
// commits that are acknowledged before they reach disk — PostgreSQL with
// synchronous_commit=off (or fsync=off), MySQL/MariaDB with
// innodb_flush_log_at_trx_commit other than 1 or sync_binlog other than 1
// (with binary logging on), SQLite with synchronous below FULL — a server
// crash can lose an acquisition, a renewal or a release the client was told
// succeeded; in crash tests with synchronous_commit=off this happened in 6 of
// 8 runs. After such a crash the database forgets the hold, so the key can be
// granted again while the first holder still believes it holds it, and the
// token counter can go back: a new holder may get a token that was already
// handed out, or one lower than a token a resource has already accepted a
// write with. Fencing still stops the stale writer only if the resource keeps
// the highest token it has seen and refuses anything not above it (a
// repeated token then fails too, rather than being accepted twice); a
// resource that only compares against the previous writer's token does not
// help. For locks that guard correctness, keep the durable defaults:
// synchronous_commit=on (or remote_apply with synchronous replicas),
// innodb_flush_log_at_trx_commit=1 and sync_binlog=1, and synchronous=FULL.
// A replica promoted after an asynchronous failover may likewise lack the
// latest acquisitions.
//
// # Modes
//
// Every dialect implements the three modes natively (Capabilities.Modes):
// Exclusive, Shared (read-write locks, with writer preference and
// downgrade) and Semaphore (at most Limit holders, each with its own lease
// and token). Waiters queue in the holds table (see below); by default the
// queue serves writer preference only, and a fair driver (WithFair) also
// admits waiters in the order they first asked (see Fairness).
//
// Exclusive holds keep the v1 layout and statements: the uncontended
// Exclusive Acquire is the same single statement or short transaction as
// before (a Driver remembers which owners' Acquire with Request.Queue did
// not succeed; only for them does a successful Acquire also delete a queue
// entry). Shared holds and permits are rows of the holds table (NAME_holds),
// one per (key, owner), with their mode, the semaphore's limit, token, info
// and lease; so are the queue entries of waiters (waiting = 1, their place
// in line in the token column, drawn from the token counter), written when
// an Acquire with Request.Queue fails and renewed by each further one.
// While a key has live rows in the holds table and no Exclusive holder, its
// lock-table row is a marker: its owner is the empty string (never a real
// owner), its expiry the latest of those rows'. To the Exclusive path, and
// to v1 clients, which know nothing of the holds table, the marker is a key
// held by someone else, so they do not take a key that readers, permits or
// waiters hold or wait for; when it expires every row behind it has expired
// too, and an Exclusive Acquire takes the key over and deletes their rows.
// While an Exclusive holder holds the key, its own row keeps newcomers out
// on the waiters' behalf.
//
// A Shared or Semaphore Acquire, and an Exclusive one that meets a marker or
// waits in the queue, is one transaction that first locks the key (SQLite:
// the database's write lock; PostgreSQL and MySQL: the key's lock-table row,
// inserted as an expired marker if missing, since the Exclusive path locks
// that row too), deletes the key's expired holder rows, reads the key's
// holders and waiters and decides as the reference driver (memdlock) does:
//
//   - Shared is admitted if no Exclusive hold exists and no live Exclusive
//     waiter queued before the requester (writer preference: once a writer
//     waits, new readers wait behind it; granted holds are unaffected).
//   - Semaphore is admitted while fewer than Limit permits are held (fair:
//     counting the live waiters queued before the requester as held).
//   - Exclusive is admitted if the key has no holder (fair: and no live
//     waiter queued before the requester).
//   - A Shared Acquire by the Exclusive holder is a downgrade: the lock-table
//     row becomes a marker and the hold moves to the holds table, same
//     token, lease renewed; waiting readers are notified (PostgreSQL).
//   - A Semaphore request on a key held or awaited as Exclusive/Shared (or
//     the other way round), with another Limit, or an Exclusive request by a
//     Shared holder (an upgrade) fails with driver.ErrModeMismatch; the
//     transaction is rolled back. (The marker that stands for waiters is
//     what sends an Exclusive request on a key that only semaphore waiters
//     wait for to this check.)
//   - A request that is not admitted keeps or renews the requester's queue
//     entry (with Request.Queue) and sets the marker to cover the key's live
//     rows.
//
// On PostgreSQL this transaction is one statement, a call of the function
// NAME_acq_multi_v1 (and the holds-table Refresh and Release below are
// NAME_ref_multi_v1 and NAME_rel_multi_v1): the key's rows are locked only
// while the function runs on the server, never across a client's round
// trips, so that a slow client cannot hold up the renewal of a live
// holder until its lease runs out. (On MySQL and SQLite it is a
// transaction of several statements.)
//
// A queue entry whose lease has ended (its owner stopped asking: it crashed,
// paused or lost its connection for longer than the lease) no longer holds
// anyone up, but its row is kept as the record of a lost place: the owner's
// next Acquire with Request.Queue fails with an error wrapping
// driver.ErrNotOwner instead of queueing it again at the back (on a fair
// driver, even if the key has become free meanwhile), and package dlock
// releases it, which deletes the row, and queues the waiter again at the
// back as a new owner.
// The record of an owner that never comes back goes a minute after its
// lease ended (when its key is next used, or by the cleanup); ForceRelease
// deletes it with the key's other rows.
//
// Tokens of every mode, and waiters' places, are drawn from the same counter
// after the key is locked, so they increase per key across modes. Refresh
// and Release try the v1 statement on the lock table first and, if the owner
// has no row there, run a transaction on the holds table that also brings
// the marker's expiry down to the remaining live rows (or deletes it, with
// the key's dead rows). On PostgreSQL and MySQL every such transaction locks
// the lock-table row before holds-table rows, so they cannot deadlock each
// other. List returns every live holder (lock table and holds table), with
// Mode and Limit; ForceRelease deletes both tables' rows of the key, queue
// entries included (their owners queue again); the cleanup sweeps both
// tables, but keeps an expired Exclusive hold while live waiters are queued
// behind it.
//
// # Fairness
//
// A driver made with WithFair (URL parameter fair=1) declares
// Capabilities.FIFO: waiters that Acquire with Request.Queue (package dlock
// sets it on every waiting Lock) acquire in the order they first asked, as
// dlock.Fair requires, across processes and across modes (readers queued
// behind a writer are admitted together once it leaves). Besides the
// admission rules above, three things differ from the default:
//
//   - Release of an Exclusive hold leaves a marker behind if the key has
//     live queue entries, in the same transaction, so that neither a
//     newcomer's Exclusive fast path nor a v1 client takes the key from the
//     head of the queue before it wakes. While the key has no queue entry
//     this is one statement, as before, with a condition on the holds table
//     (PostgreSQL: the function NAME_release_v1).
//   - The takeover of an expired hold (of a crashed holder) checks for live
//     waiters first, and leaves the key to them, as their marker, if there
//     are any (PostgreSQL: NAME_acquire_v3 with p_fair).
//   - A queued owner's Acquire goes straight to the holds-table
//     transaction, which admits it only when its turn has come; on MySQL
//     and SQLite, while a live Exclusive hold keeps it waiting, one
//     statement renews its queue entry instead.
//
// A waiter that dies holds the queue up for at most its entry's lease (the
// lock's TTL). Fairness has a price on a contended key: each release hands
// the key to the next waiter in line instead of to whichever client asks
// first (often the releasing client itself), and on MySQL and SQLite, which
// have no notifications, that waiter must first wake from its polling
// backoff, so the key may stay free for up to that backoff
// (dlock.WithBackoff bounds it). On PostgreSQL the release notification
// wakes it at once. Uncontended, Acquire and Release are one statement or
// one short transaction, as without fairness.
//
// Fairness is a property of the clients: every client of a table must be
// fair for the order to hold. A client that is not fair takes a key that
// has no holder whether waiters wait for it or not, and its release of an
// Exclusive hold leaves no marker, so that newcomers may pass the waiters
// that were queued behind it; a v1 client's release does the same.
//
// Mixed versions: v1 clients are safe against newer ones (they see markers
// as foreign holds) but do not know the holds table: a v1 ForceRelease of a
// key held Shared removes the marker only, letting Exclusive requests in
// beside the readers until their leases end; a v1 takeover of an expired
// marker leaves the expired holder rows to the cleanup; and the release or
// takeover of an Exclusive hold by a v1 client leaves no marker for waiters
// queued behind it.
//
// # Schema
//
// The driver creates its schema on first use unless it exists (so an
// application whose user may not run DDL works once CreateSchema has been run
// by a more privileged one); creation is idempotent and safe when several
// processes do it at once. With the default table name the statements are
// below. The schema is versioned additively: version 2 adds the holds table
// (and, on PostgreSQL, the function NAME_acquire_v2) to the v1 objects, and
// version 3 (fairness) adds, on PostgreSQL only, the functions
// NAME_acquire_v3 and NAME_release_v1, version 4 adds, on PostgreSQL
// only, the function NAME_wait_v1 (a waiter queues behind an Exclusive hold
// in one statement), and version 5 adds, on PostgreSQL only, the functions
// NAME_acq_multi_v1, NAME_ref_multi_v1 and NAME_rel_multi_v1 (the
// holds-table steps of Shared and Semaphore holds and of waiters, each in
// one statement, so that no client keeps a key's rows locked across its
// round trips), and version 6 adds, on MySQL/MariaDB only, the stored
// procedures NAME_acq_multi_v1, NAME_ref_multi_v1 and NAME_rel_multi_v1
// (acquire, and the refresh and release of Shared and Semaphore holds, each
// one CALL, for the same reason; the database user needs the CREATE ROUTINE
// privilege to create them, EXECUTE to call them); each version leaves the
// objects before it as they are, so older clients keep working against a newer
// schema and a client upgrades an older schema itself on first use (it
// checks for every object, and creates what is missing).
//
// PostgreSQL (the acquire functions are the one-round-trip acquire, and
// NAME_release_v1 the one-round-trip release of a fair driver; see pgOps;
// NAME_acquire_v1 and NAME_acquire_v2 are kept for older clients):
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
//	CREATE TABLE IF NOT EXISTS "dlock_locks_holds" (
//		lock_key   text COLLATE "C" NOT NULL,
//		owner      text NOT NULL,
//		waiting    smallint NOT NULL,
//		mode       smallint NOT NULL,
//		lim        integer NOT NULL,
//		token      bigint NOT NULL,
//		info       text NOT NULL,
//		expires_at timestamptz NOT NULL,
//		PRIMARY KEY (lock_key, owner)
//	)
//	CREATE OR REPLACE FUNCTION "dlock_locks_acquire_v2"(
//		p_key text, p_owner text, p_info text, p_ttl_us bigint, p_queued boolean,
//		OUT o_acquired boolean, OUT o_token bigint, OUT o_retry_us bigint, OUT o_marked boolean)
//	LANGUAGE plpgsql AS $$
//	BEGIN
//		INSERT INTO "dlock_locks" AS l (lock_key, owner, token, info, expires_at)
//		VALUES (p_key, p_owner, 0, p_info, clock_timestamp() + p_ttl_us * interval '1 microsecond')
//		ON CONFLICT (lock_key) DO UPDATE SET
//			owner = excluded.owner,
//			info = excluded.info,
//			expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond',
//			token = CASE WHEN l.owner = excluded.owner AND l.expires_at > clock_timestamp()
//				THEN l.token WHEN l.owner = '' THEN -1 ELSE 0 END
//		WHERE l.owner = excluded.owner OR l.expires_at <= clock_timestamp()
//		RETURNING l.token INTO o_token;
//		IF NOT FOUND THEN
//			o_acquired := false;
//			SELECT (extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000)::bigint, l.owner = ''
//				INTO o_retry_us, o_marked FROM "dlock_locks" AS l WHERE l.lock_key = p_key;
//			RETURN;
//		END IF;
//		o_acquired := true;
//		IF o_token = -1 THEN
//			DELETE FROM "dlock_locks_holds" WHERE lock_key = p_key AND waiting = 0;
//			o_token := 0;
//		END IF;
//		IF p_queued THEN
//			DELETE FROM "dlock_locks_holds" WHERE lock_key = p_key AND owner = p_owner;
//		END IF;
//		IF o_token = 0 THEN
//			UPDATE "dlock_locks" SET token = nextval('"dlock_locks_token_seq"')
//				WHERE lock_key = p_key RETURNING token INTO o_token;
//		END IF;
//	END
//	$$
//	CREATE OR REPLACE FUNCTION "dlock_locks_acquire_v3"(
//		p_key text, p_owner text, p_info text, p_ttl_us bigint, p_queued boolean, p_fair boolean,
//		OUT o_acquired boolean, OUT o_token bigint, OUT o_retry_us bigint, OUT o_marked boolean)
//	LANGUAGE plpgsql AS $$
//	BEGIN
//		INSERT INTO "dlock_locks" AS l (lock_key, owner, token, info, expires_at)
//		VALUES (p_key, p_owner, 0, p_info, clock_timestamp() + p_ttl_us * interval '1 microsecond')
//		ON CONFLICT (lock_key) DO UPDATE SET
//			owner = excluded.owner,
//			info = excluded.info,
//			expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond',
//			token = CASE WHEN l.owner = excluded.owner AND l.expires_at > clock_timestamp()
//				THEN l.token WHEN l.owner = '' THEN -1 ELSE -2 END
//		WHERE l.owner = excluded.owner OR l.expires_at <= clock_timestamp()
//		RETURNING l.token INTO o_token;
//		IF NOT FOUND THEN
//			o_acquired := false;
//			SELECT (extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000)::bigint, l.owner = ''
//				INTO o_retry_us, o_marked FROM "dlock_locks" AS l WHERE l.lock_key = p_key;
//			RETURN;
//		END IF;
//		IF o_token < 0 AND p_fair THEN
//			IF EXISTS (SELECT 1 FROM "dlock_locks_holds" WHERE lock_key = p_key AND waiting = 1 AND owner <> p_owner
//				AND expires_at > clock_timestamp()) THEN
//				UPDATE "dlock_locks" SET owner = '', token = 0, info = '', expires_at = (SELECT max(expires_at)
//					FROM "dlock_locks_holds" WHERE lock_key = p_key AND expires_at > clock_timestamp())
//					WHERE lock_key = p_key;
//				o_acquired := false;
//				o_marked := true;
//				RETURN;
//			END IF;
//		END IF;
//		o_acquired := true;
//		IF o_token = -1 THEN
//			DELETE FROM "dlock_locks_holds" WHERE lock_key = p_key AND waiting = 0;
//		END IF;
//		IF o_token < 0 THEN
//			o_token := 0;
//		END IF;
//		IF p_queued THEN
//			DELETE FROM "dlock_locks_holds" WHERE lock_key = p_key AND owner = p_owner;
//		END IF;
//		IF o_token = 0 THEN
//			UPDATE "dlock_locks" SET token = nextval('"dlock_locks_token_seq"')
//				WHERE lock_key = p_key RETURNING token INTO o_token;
//		END IF;
//	END
//	$$
//	CREATE OR REPLACE FUNCTION "dlock_locks_release_v1"(p_key text, p_owner text, OUT o_live boolean)
//	LANGUAGE plpgsql AS $$
//	BEGIN
//		DELETE FROM "dlock_locks" WHERE lock_key = p_key AND owner = p_owner
//			RETURNING expires_at > clock_timestamp() INTO o_live;
//		IF NOT FOUND THEN
//			RETURN;
//		END IF;
//		INSERT INTO "dlock_locks" (lock_key, owner, token, info, expires_at)
//		SELECT p_key, '', 0, '', max(expires_at) FROM "dlock_locks_holds"
//		WHERE lock_key = p_key AND waiting = 1 AND expires_at > clock_timestamp()
//		HAVING count(*) > 0;
//		PERFORM pg_notify('dlock_locks', p_key);
//	END
//	$$
//
//	CREATE OR REPLACE FUNCTION "dlock_locks_wait_v1"(
//		p_key text, p_owner text, p_mode smallint, p_lim integer, p_ttl_us bigint,
//		OUT o_state smallint, OUT o_retry_us bigint)
//	LANGUAGE plpgsql AS $$
//	DECLARE
//		w record;
//	BEGIN
//		o_state := 0;
//		SELECT (extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000)::bigint AS left_us
//			INTO o_retry_us FROM "dlock_locks" AS l
//			WHERE l.lock_key = p_key AND l.owner <> '' AND l.owner <> p_owner
//			AND l.expires_at > clock_timestamp() FOR UPDATE;
//		IF NOT FOUND THEN
//			o_retry_us := NULL;
//			RETURN;
//		END IF;
//		DELETE FROM "dlock_locks_holds" WHERE lock_key = p_key AND expires_at <= clock_timestamp()
//			AND (waiting = 0 OR expires_at <= clock_timestamp() - interval '60 seconds');
//		SELECT waiting, expires_at > clock_timestamp() AS live INTO w FROM "dlock_locks_holds"
//			WHERE lock_key = p_key AND owner = p_owner;
//		IF FOUND AND w.live THEN
//			UPDATE "dlock_locks_holds" SET expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond'
//				WHERE lock_key = p_key AND owner = p_owner;
//		ELSIF FOUND AND w.waiting = 1 THEN
//			o_state := 2;
//			RETURN;
//		ELSE
//			INSERT INTO "dlock_locks_holds" (lock_key, owner, waiting, mode, lim, token, info, expires_at)
//			VALUES (p_key, p_owner, 1, p_mode, p_lim, nextval('"dlock_locks_token_seq"'), '',
//				clock_timestamp() + p_ttl_us * interval '1 microsecond')
//			ON CONFLICT (lock_key, owner) DO UPDATE SET waiting = excluded.waiting, mode = excluded.mode,
//				lim = excluded.lim, token = excluded.token, info = excluded.info, expires_at = excluded.expires_at;
//		END IF;
//		o_state := 1;
//	END
//	$$
//
//	CREATE OR REPLACE FUNCTION "dlock_locks_acq_multi_v1"(
//		p_key text, p_owner text, p_info text, p_ttl_us bigint, p_mode smallint, p_lim integer,
//		p_queue boolean, p_fair boolean,
//		OUT o_state smallint, OUT o_token bigint, OUT o_retry_us bigint, OUT o_mode smallint, OUT o_lim integer)
//	LANGUAGE plpgsql AS $$
//	DECLARE
//		v_now timestamptz;
//		v_main_found boolean;
//		v_main_owner text;
//		v_main_token bigint;
//		v_main_live boolean;
//		v_main_left bigint;
//		v_own_found boolean;
//		v_own_waiting boolean;
//		v_own_mode smallint;
//		v_own_lim integer;
//		v_own_token bigint;
//		v_own_live boolean := false;
//		v_gone boolean := false;
//		v_first_found boolean;
//		v_first_mode smallint;
//		v_first_lim integer;
//		v_holders integer;
//		v_holders_excl boolean;
//		v_holders_left bigint;
//		v_ahead integer;
//		v_ahead_excl boolean;
//		v_admit boolean;
//		v_tok bigint;
//	BEGIN
//		o_state := 0;
//		INSERT INTO "dlock_locks" AS l (lock_key, owner, token, info, expires_at) VALUES (p_key, '', 0, '', 'epoch')
//		ON CONFLICT (lock_key) DO UPDATE SET owner = l.owner;
//		DELETE FROM "dlock_locks_holds" WHERE lock_key = p_key AND expires_at <= clock_timestamp()
//			AND (waiting = 0 OR expires_at <= clock_timestamp() - interval '60 seconds');
//		v_now := clock_timestamp();
//		SELECT owner, token, expires_at > v_now, (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint
//			INTO v_main_owner, v_main_token, v_main_live, v_main_left FROM "dlock_locks" WHERE lock_key = p_key;
//		v_main_found := FOUND;
//		IF v_main_found AND NOT v_main_live THEN
//			DELETE FROM "dlock_locks" WHERE lock_key = p_key;
//			DELETE FROM "dlock_locks_holds" WHERE lock_key = p_key AND waiting = 0;
//			v_main_found := false;
//		END IF;
//		SELECT waiting = 1, mode, lim, token, expires_at > v_now
//			INTO v_own_waiting, v_own_mode, v_own_lim, v_own_token, v_own_live
//			FROM "dlock_locks_holds" WHERE lock_key = p_key AND owner = p_owner;
//		v_own_found := FOUND;
//		IF v_own_found THEN
//			v_gone := NOT v_own_live AND v_own_waiting;
//		ELSE
//			v_own_live := false;
//		END IF;
//
//		IF v_main_found AND v_main_owner <> '' THEN
//			IF v_main_owner = p_owner THEN
//				IF p_mode = 1 THEN
//					UPDATE "dlock_locks" SET owner = '', token = 0, info = '', expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond' WHERE lock_key = p_key;
//					INSERT INTO "dlock_locks_holds" (lock_key, owner, waiting, mode, lim, token, info, expires_at)
//						VALUES (p_key, p_owner, 0, 1, 0, v_main_token, p_info, clock_timestamp() + p_ttl_us * interval '1 microsecond')
//						ON CONFLICT (lock_key, owner) DO UPDATE SET waiting = excluded.waiting, mode = excluded.mode,
//						lim = excluded.lim, token = excluded.token, info = excluded.info, expires_at = excluded.expires_at;
//					INSERT INTO "dlock_locks" AS l (lock_key, owner, token, info, expires_at)
//						SELECT p_key, '', 0, '', x.m FROM (SELECT max(expires_at) AS m FROM "dlock_locks_holds"
//						WHERE lock_key = p_key AND expires_at > clock_timestamp()) AS x
//						WHERE x.m IS NOT NULL
//						ON CONFLICT (lock_key) DO UPDATE SET owner = '', token = 0, info = '', expires_at = excluded.expires_at
//						WHERE l.owner = '' OR l.expires_at <= clock_timestamp();
//					PERFORM pg_notify('dlock_locks', p_key);
//					o_state := 1;
//					o_token := v_main_token;
//					RETURN;
//				ELSIF p_mode = 2 THEN
//					o_state := 3;
//					RETURN;
//				END IF;
//				INSERT INTO "dlock_locks" (lock_key, owner, token, info, expires_at)
//					VALUES (p_key, p_owner, v_main_token, p_info, clock_timestamp() + p_ttl_us * interval '1 microsecond')
//					ON CONFLICT (lock_key) DO UPDATE SET owner = excluded.owner, token = excluded.token,
//					info = excluded.info, expires_at = excluded.expires_at;
//				o_state := 1;
//				o_token := v_main_token;
//				RETURN;
//			END IF;
//			IF p_mode = 2 THEN
//				o_state := 4;
//				RETURN;
//			END IF;
//			IF v_gone AND p_queue THEN
//				o_state := 2;
//				RETURN;
//			END IF;
//			IF p_queue THEN
//				IF v_own_live THEN
//					UPDATE "dlock_locks_holds" SET expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond' WHERE lock_key = p_key AND owner = p_owner;
//				ELSE
//					INSERT INTO "dlock_locks_holds" (lock_key, owner, waiting, mode, lim, token, info, expires_at)
//						VALUES (p_key, p_owner, 1, p_mode, p_lim, nextval('"dlock_locks_token_seq"'), '', clock_timestamp() + p_ttl_us * interval '1 microsecond')
//						ON CONFLICT (lock_key, owner) DO UPDATE SET waiting = excluded.waiting, mode = excluded.mode,
//						lim = excluded.lim, token = excluded.token, info = excluded.info, expires_at = excluded.expires_at;
//				END IF;
//			END IF;
//			o_retry_us := greatest(v_main_left, 0);
//			RETURN;
//		END IF;
//
//		IF v_own_live AND NOT v_own_waiting THEN
//			IF v_own_mode <> p_mode OR p_mode = 2 AND v_own_lim <> p_lim THEN
//				o_state := 5;
//				o_mode := v_own_mode;
//				o_lim := v_own_lim;
//				RETURN;
//			END IF;
//			UPDATE "dlock_locks_holds" SET expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond' WHERE lock_key = p_key AND owner = p_owner;
//			INSERT INTO "dlock_locks" AS l (lock_key, owner, token, info, expires_at)
//				VALUES (p_key, '', 0, '', clock_timestamp() + p_ttl_us * interval '1 microsecond')
//				ON CONFLICT (lock_key) DO UPDATE SET expires_at = greatest(l.expires_at, excluded.expires_at)
//				WHERE l.owner = '';
//			o_state := 1;
//			o_token := v_own_token;
//			RETURN;
//		END IF;
//		SELECT count(*), coalesce(bool_or(mode = 0), false), min((extract(epoch FROM expires_at - v_now) * 1000000)::bigint)
//			INTO v_holders, v_holders_excl, v_holders_left FROM "dlock_locks_holds"
//			WHERE lock_key = p_key AND owner <> p_owner AND waiting = 0 AND expires_at > v_now;
//		SELECT mode, lim INTO v_first_mode, v_first_lim FROM "dlock_locks_holds"
//			WHERE lock_key = p_key AND owner <> p_owner AND waiting = 0 AND expires_at > v_now
//			ORDER BY token LIMIT 1;
//		v_first_found := FOUND;
//		IF NOT v_first_found THEN
//			SELECT mode, lim INTO v_first_mode, v_first_lim FROM "dlock_locks_holds"
//				WHERE lock_key = p_key AND waiting = 1 AND expires_at > v_now
//				AND (owner <> p_owner OR v_own_live)
//				ORDER BY token LIMIT 1;
//			v_first_found := FOUND;
//		END IF;
//		IF v_first_found AND ((p_mode = 2) <> (v_first_mode = 2) OR v_first_mode = 2 AND v_first_lim <> p_lim) THEN
//			o_state := 6;
//			o_mode := v_first_mode;
//			o_lim := v_first_lim;
//			RETURN;
//		END IF;
//		IF v_gone AND p_queue THEN
//			o_state := 2;
//			RETURN;
//		END IF;
//		SELECT count(*), coalesce(bool_or(mode = 0), false) INTO v_ahead, v_ahead_excl FROM "dlock_locks_holds"
//			WHERE lock_key = p_key AND owner <> p_owner AND waiting = 1 AND expires_at > v_now
//			AND (NOT v_own_live OR token < v_own_token);
//		IF p_mode = 0 THEN
//			v_admit := v_holders = 0 AND (NOT p_fair OR v_ahead = 0);
//		ELSIF p_mode = 1 THEN
//			v_admit := NOT v_holders_excl AND NOT v_ahead_excl;
//		ELSIF p_fair THEN
//			v_admit := v_holders + v_ahead < p_lim;
//		ELSE
//			v_admit := v_holders < p_lim;
//		END IF;
//		IF NOT v_admit THEN
//			IF p_queue THEN
//				IF v_own_live THEN
//					UPDATE "dlock_locks_holds" SET expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond' WHERE lock_key = p_key AND owner = p_owner;
//				ELSE
//					INSERT INTO "dlock_locks_holds" (lock_key, owner, waiting, mode, lim, token, info, expires_at)
//						VALUES (p_key, p_owner, 1, p_mode, p_lim, nextval('"dlock_locks_token_seq"'), '', clock_timestamp() + p_ttl_us * interval '1 microsecond')
//						ON CONFLICT (lock_key, owner) DO UPDATE SET waiting = excluded.waiting, mode = excluded.mode,
//						lim = excluded.lim, token = excluded.token, info = excluded.info, expires_at = excluded.expires_at;
//				END IF;
//			END IF;
//			INSERT INTO "dlock_locks" AS l (lock_key, owner, token, info, expires_at)
//				SELECT p_key, '', 0, '', x.m FROM (SELECT max(expires_at) AS m FROM "dlock_locks_holds"
//				WHERE lock_key = p_key AND expires_at > clock_timestamp()) AS x
//				WHERE x.m IS NOT NULL
//				ON CONFLICT (lock_key) DO UPDATE SET owner = '', token = 0, info = '', expires_at = excluded.expires_at
//				WHERE l.owner = '' OR l.expires_at <= clock_timestamp();
//			o_retry_us := greatest(coalesce(v_holders_left, 0), 0);
//			RETURN;
//		END IF;
//		v_tok := nextval('"dlock_locks_token_seq"');
//		IF p_mode = 0 THEN
//			IF v_own_live OR v_gone THEN
//				DELETE FROM "dlock_locks_holds" WHERE lock_key = p_key AND owner = p_owner;
//			END IF;
//			INSERT INTO "dlock_locks" (lock_key, owner, token, info, expires_at)
//				VALUES (p_key, p_owner, v_tok, p_info, clock_timestamp() + p_ttl_us * interval '1 microsecond')
//				ON CONFLICT (lock_key) DO UPDATE SET owner = excluded.owner, token = excluded.token,
//				info = excluded.info, expires_at = excluded.expires_at;
//			o_state := 1;
//			o_token := v_tok;
//			RETURN;
//		END IF;
//		INSERT INTO "dlock_locks_holds" (lock_key, owner, waiting, mode, lim, token, info, expires_at)
//			VALUES (p_key, p_owner, 0, p_mode, p_lim, v_tok, p_info, clock_timestamp() + p_ttl_us * interval '1 microsecond')
//			ON CONFLICT (lock_key, owner) DO UPDATE SET waiting = excluded.waiting, mode = excluded.mode,
//			lim = excluded.lim, token = excluded.token, info = excluded.info, expires_at = excluded.expires_at;
//		INSERT INTO "dlock_locks" AS l (lock_key, owner, token, info, expires_at)
//			SELECT p_key, '', 0, '', x.m FROM (SELECT max(expires_at) AS m FROM "dlock_locks_holds"
//			WHERE lock_key = p_key AND expires_at > clock_timestamp()) AS x
//			WHERE x.m IS NOT NULL
//			ON CONFLICT (lock_key) DO UPDATE SET owner = '', token = 0, info = '', expires_at = excluded.expires_at
//			WHERE l.owner = '' OR l.expires_at <= clock_timestamp();
//		IF v_own_live THEN
//			PERFORM pg_notify('dlock_locks', p_key);
//		END IF;
//		o_state := 1;
//		o_token := v_tok;
//	END
//	$$
//
//	CREATE OR REPLACE FUNCTION "dlock_locks_ref_multi_v1"(p_key text, p_owner text, p_ttl_us bigint, OUT o_ok boolean)
//	LANGUAGE plpgsql AS $$
//	BEGIN
//		PERFORM 1 FROM "dlock_locks" WHERE lock_key = p_key FOR UPDATE;
//		UPDATE "dlock_locks_holds" SET expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond'
//			WHERE lock_key = p_key AND owner = p_owner AND waiting = 0 AND expires_at > clock_timestamp();
//		o_ok := FOUND;
//		IF o_ok THEN
//			INSERT INTO "dlock_locks" AS l (lock_key, owner, token, info, expires_at)
//				VALUES (p_key, '', 0, '', clock_timestamp() + p_ttl_us * interval '1 microsecond')
//				ON CONFLICT (lock_key) DO UPDATE SET expires_at = greatest(l.expires_at, excluded.expires_at)
//				WHERE l.owner = '';
//		END IF;
//	END
//	$$
//
//	CREATE OR REPLACE FUNCTION "dlock_locks_rel_multi_v1"(p_key text, p_owner text, OUT o_found boolean, OUT o_live boolean)
//	LANGUAGE plpgsql AS $$
//	BEGIN
//		PERFORM 1 FROM "dlock_locks" WHERE lock_key = p_key FOR UPDATE;
//		DELETE FROM "dlock_locks_holds" WHERE lock_key = p_key AND owner = p_owner
//			RETURNING expires_at > clock_timestamp() INTO o_live;
//		o_found := FOUND;
//		IF NOT o_found THEN
//			o_live := false;
//			RETURN;
//		END IF;
//		INSERT INTO "dlock_locks" AS l (lock_key, owner, token, info, expires_at)
//			SELECT p_key, '', 0, '', x.m FROM (SELECT max(expires_at) AS m FROM "dlock_locks_holds"
//			WHERE lock_key = p_key AND expires_at > clock_timestamp()) AS x
//			WHERE x.m IS NOT NULL
//			ON CONFLICT (lock_key) DO UPDATE SET owner = '', token = 0, info = '', expires_at = excluded.expires_at
//			WHERE l.owner = '' OR l.expires_at <= clock_timestamp();
//		DELETE FROM "dlock_locks" WHERE lock_key = p_key AND (owner = '' OR expires_at <= clock_timestamp())
//			AND NOT EXISTS (SELECT 1 FROM "dlock_locks_holds" WHERE lock_key = p_key AND expires_at > clock_timestamp());
//		DELETE FROM "dlock_locks_holds" WHERE lock_key = p_key AND waiting = 0 AND expires_at <= clock_timestamp()
//			AND NOT EXISTS (SELECT 1 FROM "dlock_locks" WHERE lock_key = p_key);
//		PERFORM pg_notify('dlock_locks', p_key);
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
//	CREATE TABLE IF NOT EXISTS `dlock_locks_holds` (
//		lock_key   VARBINARY(255) NOT NULL,
//		owner      VARBINARY(255) NOT NULL,
//		waiting    TINYINT NOT NULL,
//		mode       TINYINT NOT NULL,
//		lim        INT NOT NULL,
//		token      BIGINT UNSIGNED NOT NULL,
//		info       VARBINARY(1024) NOT NULL,
//		expires_at DATETIME(6) NOT NULL,
//		PRIMARY KEY (lock_key, owner)
//	) ENGINE=InnoDB
//	CREATE PROCEDURE `dlock_locks_acq_multi_v1`(IN p_key VARBINARY(255), IN p_owner VARBINARY(255), IN p_info VARBINARY(1024),
//		IN p_ttl BIGINT, IN p_mode TINYINT, IN p_lim INT, IN p_queue BOOLEAN, IN p_fair BOOLEAN)
//		MODIFIES SQL DATA
//	BEGIN
//		DECLARE v_now DATETIME(6);
//		DECLARE v_main_owner VARBINARY(255) DEFAULT NULL;
//		DECLARE v_main_token BIGINT;
//		DECLARE v_main_live BOOLEAN;
//		DECLARE v_main_left BIGINT;
//		DECLARE v_main_found BOOLEAN DEFAULT FALSE;
//		DECLARE v_own_waiting BOOLEAN DEFAULT NULL;
//		DECLARE v_own_mode TINYINT;
//		DECLARE v_own_lim INT;
//		DECLARE v_own_token BIGINT;
//		DECLARE v_own_live BOOLEAN DEFAULT FALSE;
//		DECLARE v_gone BOOLEAN DEFAULT FALSE;
//		DECLARE v_first_mode TINYINT DEFAULT NULL;
//		DECLARE v_first_lim INT;
//		DECLARE v_holders INT;
//		DECLARE v_holders_excl BOOLEAN;
//		DECLARE v_holders_left BIGINT;
//		DECLARE v_ahead INT;
//		DECLARE v_ahead_excl BOOLEAN;
//		DECLARE v_admit BOOLEAN;
//		DECLARE v_tok BIGINT;
//		DECLARE o_state TINYINT DEFAULT 0;
//		DECLARE o_token BIGINT DEFAULT NULL;
//		DECLARE o_retry BIGINT DEFAULT NULL;
//		DECLARE o_mode TINYINT DEFAULT NULL;
//		DECLARE o_lim INT DEFAULT NULL;
//		DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
//		SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
//		START TRANSACTION;
//		body: BEGIN
//			INSERT INTO `dlock_locks` (lock_key, owner, token, info, expires_at) VALUES (p_key, '', 0, '', '1970-01-01')
//	ON DUPLICATE KEY UPDATE owner = owner;
//			DELETE FROM `dlock_locks_holds` WHERE lock_key = p_key AND expires_at <= UTC_TIMESTAMP(6)
//				AND (waiting = 0 OR expires_at <= UTC_TIMESTAMP(6) - INTERVAL 60 SECOND);
//			SET v_now = UTC_TIMESTAMP(6);
//			SELECT owner, token, expires_at > v_now, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
//				INTO v_main_owner, v_main_token, v_main_live, v_main_left FROM `dlock_locks` WHERE lock_key = p_key;
//			SET v_main_found = v_main_owner IS NOT NULL;
//			IF v_main_found AND NOT v_main_live THEN
//				DELETE FROM `dlock_locks` WHERE lock_key = p_key;
//				DELETE FROM `dlock_locks_holds` WHERE lock_key = p_key AND waiting = 0;
//				SET v_main_found = FALSE;
//			END IF;
//			SELECT waiting = 1, mode, lim, token, expires_at > v_now
//				INTO v_own_waiting, v_own_mode, v_own_lim, v_own_token, v_own_live
//				FROM `dlock_locks_holds` WHERE lock_key = p_key AND owner = p_owner;
//			IF v_own_waiting IS NULL THEN
//				SET v_own_live = FALSE;
//			ELSE
//				SET v_gone = NOT v_own_live AND v_own_waiting;
//			END IF;
//			IF v_main_found AND v_main_owner <> '' THEN
//				IF v_main_owner = p_owner THEN
//					IF p_mode = 1 THEN
//						UPDATE `dlock_locks` SET owner = '', token = 0, info = '', expires_at = UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND WHERE lock_key = p_key;
//						INSERT INTO `dlock_locks_holds` (lock_key, owner, waiting, mode, lim, token, info, expires_at)
//	VALUES (p_key, p_owner, 0, 1, 0, v_main_token, p_info, UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND)
//	ON DUPLICATE KEY UPDATE waiting = VALUES(waiting), mode = VALUES(mode), lim = VALUES(lim),
//		token = VALUES(token), info = VALUES(info), expires_at = VALUES(expires_at);
//						INSERT INTO `dlock_locks` (lock_key, owner, token, info, expires_at)
//	SELECT p_key, '', 0, '', m FROM (SELECT MAX(expires_at) AS m FROM `dlock_locks_holds` WHERE lock_key = p_key AND expires_at > UTC_TIMESTAMP(6)) AS x
//	WHERE m IS NOT NULL
//	ON DUPLICATE KEY UPDATE token = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), 0, token), info = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), '', info),
//		owner = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), '', owner), expires_at = IF(owner = '', VALUES(expires_at), expires_at);
//						SET o_state = 1, o_token = v_main_token;
//						LEAVE body;
//					ELSEIF p_mode = 2 THEN
//						SET o_state = 3;
//						LEAVE body;
//					END IF;
//					INSERT INTO `dlock_locks` (lock_key, owner, token, info, expires_at) VALUES (p_key, p_owner, v_main_token, p_info, UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND)
//	ON DUPLICATE KEY UPDATE owner = VALUES(owner), token = VALUES(token), info = VALUES(info),
//		expires_at = VALUES(expires_at);
//					SET o_state = 1, o_token = v_main_token;
//					LEAVE body;
//				END IF;
//				IF p_mode = 2 THEN
//					SET o_state = 4;
//					LEAVE body;
//				END IF;
//				IF v_gone AND p_queue THEN
//					SET o_state = 2;
//					LEAVE body;
//				END IF;
//				IF p_queue THEN
//				IF v_own_live THEN
//					UPDATE `dlock_locks_holds` SET expires_at = UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND WHERE lock_key = p_key AND owner = p_owner;
//				ELSE
//					UPDATE `dlock_locks_seq` SET v = LAST_INSERT_ID(v + 1) WHERE id = 1;
//			SET v_tok = LAST_INSERT_ID();
//					INSERT INTO `dlock_locks_holds` (lock_key, owner, waiting, mode, lim, token, info, expires_at)
//	VALUES (p_key, p_owner, 1, p_mode, p_lim, v_tok, '', UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND)
//	ON DUPLICATE KEY UPDATE waiting = VALUES(waiting), mode = VALUES(mode), lim = VALUES(lim),
//		token = VALUES(token), info = VALUES(info), expires_at = VALUES(expires_at);
//				END IF;
//			END IF;
//				SET o_retry = GREATEST(v_main_left, 0);
//				LEAVE body;
//			END IF;
//			IF v_own_live AND NOT v_own_waiting THEN
//				IF v_own_mode <> p_mode OR p_mode = 2 AND v_own_lim <> p_lim THEN
//					SET o_state = 5, o_mode = v_own_mode, o_lim = v_own_lim;
//					LEAVE body;
//				END IF;
//				UPDATE `dlock_locks_holds` SET expires_at = UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND WHERE lock_key = p_key AND owner = p_owner;
//				INSERT INTO `dlock_locks` (lock_key, owner, token, info, expires_at) VALUES (p_key, '', 0, '', UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND)
//	ON DUPLICATE KEY UPDATE expires_at = IF(owner = '', GREATEST(expires_at, VALUES(expires_at)), expires_at);
//				SET o_state = 1, o_token = v_own_token;
//				LEAVE body;
//			END IF;
//			SELECT COUNT(*), COALESCE(MAX(mode = 0), FALSE), MIN(TIMESTAMPDIFF(MICROSECOND, v_now, expires_at))
//				INTO v_holders, v_holders_excl, v_holders_left FROM `dlock_locks_holds`
//				WHERE lock_key = p_key AND owner <> p_owner AND waiting = 0 AND expires_at > v_now;
//			SELECT mode, lim INTO v_first_mode, v_first_lim FROM `dlock_locks_holds`
//				WHERE lock_key = p_key AND owner <> p_owner AND waiting = 0 AND expires_at > v_now
//				ORDER BY token LIMIT 1;
//			IF v_first_mode IS NULL THEN
//				SELECT mode, lim INTO v_first_mode, v_first_lim FROM `dlock_locks_holds`
//					WHERE lock_key = p_key AND waiting = 1 AND expires_at > v_now
//					AND (owner <> p_owner OR v_own_live)
//					ORDER BY token LIMIT 1;
//			END IF;
//			IF v_first_mode IS NOT NULL AND ((p_mode = 2) <> (v_first_mode = 2) OR v_first_mode = 2 AND v_first_lim <> p_lim) THEN
//				SET o_state = 6, o_mode = v_first_mode, o_lim = v_first_lim;
//				LEAVE body;
//			END IF;
//			IF v_gone AND p_queue THEN
//				SET o_state = 2;
//				LEAVE body;
//			END IF;
//			SELECT COUNT(*), COALESCE(MAX(mode = 0), FALSE) INTO v_ahead, v_ahead_excl FROM `dlock_locks_holds`
//				WHERE lock_key = p_key AND owner <> p_owner AND waiting = 1 AND expires_at > v_now
//				AND (NOT v_own_live OR token < v_own_token);
//			IF p_mode = 0 THEN
//				SET v_admit = v_holders = 0 AND (NOT p_fair OR v_ahead = 0);
//			ELSEIF p_mode = 1 THEN
//				SET v_admit = NOT v_holders_excl AND NOT v_ahead_excl;
//			ELSEIF p_fair THEN
//				SET v_admit = v_holders + v_ahead < p_lim;
//			ELSE
//				SET v_admit = v_holders < p_lim;
//			END IF;
//			IF NOT v_admit THEN
//				IF p_queue THEN
//				IF v_own_live THEN
//					UPDATE `dlock_locks_holds` SET expires_at = UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND WHERE lock_key = p_key AND owner = p_owner;
//				ELSE
//					UPDATE `dlock_locks_seq` SET v = LAST_INSERT_ID(v + 1) WHERE id = 1;
//			SET v_tok = LAST_INSERT_ID();
//					INSERT INTO `dlock_locks_holds` (lock_key, owner, waiting, mode, lim, token, info, expires_at)
//	VALUES (p_key, p_owner, 1, p_mode, p_lim, v_tok, '', UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND)
//	ON DUPLICATE KEY UPDATE waiting = VALUES(waiting), mode = VALUES(mode), lim = VALUES(lim),
//		token = VALUES(token), info = VALUES(info), expires_at = VALUES(expires_at);
//				END IF;
//			END IF;
//				INSERT INTO `dlock_locks` (lock_key, owner, token, info, expires_at)
//	SELECT p_key, '', 0, '', m FROM (SELECT MAX(expires_at) AS m FROM `dlock_locks_holds` WHERE lock_key = p_key AND expires_at > UTC_TIMESTAMP(6)) AS x
//	WHERE m IS NOT NULL
//	ON DUPLICATE KEY UPDATE token = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), 0, token), info = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), '', info),
//		owner = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), '', owner), expires_at = IF(owner = '', VALUES(expires_at), expires_at);
//				SET o_retry = GREATEST(COALESCE(v_holders_left, 0), 0);
//				LEAVE body;
//			END IF;
//			UPDATE `dlock_locks_seq` SET v = LAST_INSERT_ID(v + 1) WHERE id = 1;
//			SET v_tok = LAST_INSERT_ID();
//			IF p_mode = 0 THEN
//				IF v_own_live OR v_gone THEN
//					DELETE FROM `dlock_locks_holds` WHERE lock_key = p_key AND owner = p_owner;
//				END IF;
//				INSERT INTO `dlock_locks` (lock_key, owner, token, info, expires_at) VALUES (p_key, p_owner, v_tok, p_info, UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND)
//	ON DUPLICATE KEY UPDATE owner = VALUES(owner), token = VALUES(token), info = VALUES(info),
//		expires_at = VALUES(expires_at);
//				SET o_state = 1, o_token = v_tok;
//				LEAVE body;
//			END IF;
//			INSERT INTO `dlock_locks_holds` (lock_key, owner, waiting, mode, lim, token, info, expires_at)
//	VALUES (p_key, p_owner, 0, p_mode, p_lim, v_tok, p_info, UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND)
//	ON DUPLICATE KEY UPDATE waiting = VALUES(waiting), mode = VALUES(mode), lim = VALUES(lim),
//		token = VALUES(token), info = VALUES(info), expires_at = VALUES(expires_at);
//			INSERT INTO `dlock_locks` (lock_key, owner, token, info, expires_at)
//	SELECT p_key, '', 0, '', m FROM (SELECT MAX(expires_at) AS m FROM `dlock_locks_holds` WHERE lock_key = p_key AND expires_at > UTC_TIMESTAMP(6)) AS x
//	WHERE m IS NOT NULL
//	ON DUPLICATE KEY UPDATE token = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), 0, token), info = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), '', info),
//		owner = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), '', owner), expires_at = IF(owner = '', VALUES(expires_at), expires_at);
//			SET o_state = 1, o_token = v_tok;
//		END body;
//		COMMIT;
//		SELECT o_state, o_token, o_retry, o_mode, o_lim;
//	END
//	CREATE PROCEDURE `dlock_locks_ref_multi_v1`(IN p_key VARBINARY(255), IN p_owner VARBINARY(255), IN p_ttl BIGINT)
//		MODIFIES SQL DATA
//	BEGIN
//		DECLARE v_one INT;
//		DECLARE v_n INT DEFAULT 0;
//		DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
//		SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
//		START TRANSACTION;
//		body: BEGIN
//			SELECT 1 INTO v_one FROM `dlock_locks` WHERE lock_key = p_key FOR UPDATE;
//			SELECT COUNT(*) INTO v_n FROM `dlock_locks_holds`
//				WHERE lock_key = p_key AND owner = p_owner AND waiting = 0 AND expires_at > UTC_TIMESTAMP(6) FOR UPDATE;
//			IF v_n = 1 THEN
//				UPDATE `dlock_locks_holds` SET expires_at = UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND
//	WHERE lock_key = p_key AND owner = p_owner AND waiting = 0 AND expires_at > UTC_TIMESTAMP(6);
//				INSERT INTO `dlock_locks` (lock_key, owner, token, info, expires_at) VALUES (p_key, '', 0, '', UTC_TIMESTAMP(6) + INTERVAL p_ttl MICROSECOND)
//	ON DUPLICATE KEY UPDATE expires_at = IF(owner = '', GREATEST(expires_at, VALUES(expires_at)), expires_at);
//			END IF;
//		END body;
//		COMMIT;
//		SELECT v_n = 1;
//	END
//	CREATE PROCEDURE `dlock_locks_rel_multi_v1`(IN p_key VARBINARY(255), IN p_owner VARBINARY(255), IN p_main BOOLEAN)
//		MODIFIES SQL DATA
//	BEGIN
//		DECLARE v_one INT;
//		DECLARE v_live BOOLEAN DEFAULT NULL;
//		DECLARE v_found BOOLEAN DEFAULT FALSE;
//		DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
//		SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
//		START TRANSACTION;
//		body: BEGIN
//			SELECT 1 INTO v_one FROM `dlock_locks` WHERE lock_key = p_key FOR UPDATE;
//			IF p_main THEN
//				SELECT expires_at > UTC_TIMESTAMP(6) INTO v_live FROM `dlock_locks`
//					WHERE lock_key = p_key AND owner = p_owner FOR UPDATE;
//				IF v_live IS NOT NULL THEN
//					DELETE FROM `dlock_locks` WHERE lock_key = p_key AND owner = p_owner;
//					SET v_found = TRUE;
//				END IF;
//			END IF;
//			IF NOT v_found THEN
//				SELECT expires_at > UTC_TIMESTAMP(6) INTO v_live FROM `dlock_locks_holds`
//					WHERE lock_key = p_key AND owner = p_owner FOR UPDATE;
//				IF v_live IS NOT NULL THEN
//					DELETE FROM `dlock_locks_holds` WHERE lock_key = p_key AND owner = p_owner;
//					SET v_found = TRUE;
//				END IF;
//			END IF;
//			IF v_found THEN
//				INSERT INTO `dlock_locks` (lock_key, owner, token, info, expires_at)
//	SELECT p_key, '', 0, '', m FROM (SELECT MAX(expires_at) AS m FROM `dlock_locks_holds` WHERE lock_key = p_key AND expires_at > UTC_TIMESTAMP(6)) AS x
//	WHERE m IS NOT NULL
//	ON DUPLICATE KEY UPDATE token = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), 0, token), info = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), '', info),
//		owner = IF(owner = '' OR expires_at <= UTC_TIMESTAMP(6), '', owner), expires_at = IF(owner = '', VALUES(expires_at), expires_at);
//				DELETE FROM `dlock_locks` WHERE lock_key = p_key AND (owner = '' OR expires_at <= UTC_TIMESTAMP(6))
//	AND NOT EXISTS (SELECT 1 FROM `dlock_locks_holds` WHERE lock_key = p_key AND expires_at > UTC_TIMESTAMP(6));
//				DELETE FROM `dlock_locks_holds` WHERE lock_key = p_key AND waiting = 0 AND expires_at <= UTC_TIMESTAMP(6)
//	AND NOT EXISTS (SELECT 1 FROM `dlock_locks` WHERE lock_key = p_key);
//			END IF;
//		END body;
//		COMMIT;
//		SELECT v_found, COALESCE(v_live, FALSE);
//	END
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
//	CREATE TABLE IF NOT EXISTS "dlock_locks_holds" (
//		lock_key   TEXT NOT NULL,
//		owner      TEXT NOT NULL,
//		waiting    INTEGER NOT NULL,
//		mode       INTEGER NOT NULL,
//		lim        INTEGER NOT NULL,
//		token      INTEGER NOT NULL,
//		info       TEXT NOT NULL,
//		expires_at INTEGER NOT NULL,
//		PRIMARY KEY (lock_key, owner)
//	) WITHOUT ROWID
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
// SQLite has one write lock per file. A process that is stopped (SIGSTOP, a
// debugger) or hangs inside a write transaction, such as a lock's renewal,
// keeps it: until it resumes or dies, no other process can acquire, renew
// or release any lock in the file, and their calls fail with SQLITE_BUSY
// after the busy timeout. (A process that dies releases the write lock at
// once.) The server stores do not share this: a stopped PostgreSQL or
// MySQL client holds only the rows it locked.
//
// While one connection writes, SQLite makes the others wait in its busy
// handler, which sleeps between attempts (up to 100ms at a time), so a
// steady stream of writes can keep a connection waiting long enough for a
// lock's renewal to come too late. The waiters of fair drivers make such
// streams (they renew their queue entries until their turn comes), so the
// fair drivers that one process opens by URL on one file take turns at an
// in-process gate before they write, in order, and SQLite's busy handler
// only waits for other processes.
//
// # Helpers for application tables
//
// Two designs that do not need a lock table are provided as helpers for
// application tables: optimistic concurrency on a versioned row (Versioned)
// and claiming one free row of a resource table (Claim).
package sqldlock
