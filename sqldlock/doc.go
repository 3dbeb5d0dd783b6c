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
// LISTEN/NOTIFY; on MySQL and SQLite waiters poll. PostgreSQL signals every
// listening connection of the database on each notifying commit, so a
// waiting process listens only while it can take the key next: the
// Exclusive and Semaphore waiters of a driver that is not fair wait in line
// for the key's gate, a session advisory lock, each on a connection of its
// own, and only the head of the line, which holds the gate, listens; it
// lets go of the gate once it has the key (or gives up), and the server
// hands the gate to one waiter. A release thus wakes one process, whatever
// the number waiting; a process waiting for k keys keeps k connections
// besides its pool, and a head that dies hands the gate on with its
// connection. Readers (Shared) and the waiters of a fair driver listen on
// one connection per driver: the release of an Exclusive hold by a driver
// that is not fair wakes only the readers queued before the first writer
// and the subscribers that do not queue; other releases (a fair driver's,
// of Shared and Semaphore holds, ForceRelease) wake every subscriber of the
// key, and every listening connection costs every release.
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
// An Exclusive hold is one row of the lock table: the uncontended
// Exclusive Acquire is a single statement or short transaction (a Driver remembers which owners' Acquire with Request.Queue did
// not succeed; only for them does a successful Acquire also delete a queue
// entry). Shared holds and permits are rows of the holds table (NAME_holds),
// one per (key, owner), with their mode, the semaphore's limit, token, info
// and lease; so are the queue entries of waiters (waiting = 1, their place
// in line in the token column, drawn from the token counter), written when
// an Acquire with Request.Queue fails and renewed by each further one.
// While a key has live rows in the holds table and no Exclusive holder, its
// lock-table row is a marker: its owner is the empty string (never a real
// owner), its expiry the latest of those rows'. To the Exclusive path,
// which does not read the holds table, the marker is a key
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
// NAME_acquire_multi (and the holds-table Refresh and Release below are
// NAME_refresh_multi and NAME_release_multi), on MySQL a CALL of the
// stored procedure of the same name: the key's rows are locked only while
// it runs on the server, never across a client's round trips, so that a
// slow client cannot hold up the renewal of a live holder until its lease
// runs out. (On SQLite it is a transaction of several statements.)
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
// and Release try the Exclusive statement on the lock table first and, if the owner
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
//     newcomer's Exclusive fast path takes the key from the
//     head of the queue before it wakes. While the key has no queue entry
//     this is one statement, as before, with a condition on the holds table
//     (PostgreSQL: the function NAME_release).
//   - The takeover of an expired hold (of a crashed holder) checks for live
//     waiters first, and leaves the key to them, as their marker, if there
//     are any (PostgreSQL: NAME_acquire with p_fair).
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
// that were queued behind it.
//
// # Schema
//
// The driver creates its schema on first use unless it exists (so an
// application whose user may not run DDL works once CreateSchema has been run
// by a more privileged one); creation is idempotent and safe when several
// processes do it at once. On MySQL/MariaDB the user that creates it needs
// the CREATE ROUTINE privilege, and the application's user EXECUTE.
//
// The schema of each dialect is in the package's sql folder (sql/postgres.sql,
// sql/mysql.sql, sql/sqlite.sql; the statements the driver runs beside it, in
// sql/DIALECT_stmts.sql), embedded in the program; `dlock schema --print
// --url URL` prints it with the URL's table name, for psql, mysql or sqlite3. The lock table records the schema
// version ("dlock schema 1"). A driver neither uses nor changes a lock
// table that records another version, or none (one made by an earlier
// development version): it reports a *SchemaError.
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
