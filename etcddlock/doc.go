// Package etcddlock is a dlock backend over etcd v3, through
// go.etcd.io/etcd/client/v3.
//
// etcd replicates every write through Raft and serves linearizable
// transactions (a compare and the writes it guards are one atomic step on a
// majority of members), and its revision counter only grows and is as
// durable as the data. The driver builds on that: Capabilities reports
// Consensus, DurableTokens and ServerClock, a FIFO wait queue, and every
// mode: exclusive locks, read-write locks (Shared, with writer preference
// and downgrade) and semaphores, all native, on the one queue (see Modes).
// Use it for locks whose holders must never overlap, together with the
// fencing tokens and IsOwner below.
//
// # Records
//
// The wait queue of the dlock key K is the set of etcd keys PREFIX K "/" E,
// where E is an entry name without a slash (PREFIX is "/dlock/" unless
// WithPrefix says otherwise). That is the layout of etcd's own lock,
// concurrency.Mutex (used by etcdctl lock and by etcd's v3lock service),
// which names its keys NAME "/" LEASE: the dlock key K under the prefix P is
// the etcd lock name P+K (dlock key "jobs/x" with the default prefix is
// `etcdctl lock /dlock/jobs/x`), and both exclude each other (see "Other
// lock clients"). The entries are in CreateRevision order, and whether an
// entry holds the key depends only on the entries ahead of it (see Modes):
// the entry with the lowest CreateRevision holds an exclusive lock, and the
// others wait in CreateRevision order, so the lock is granted in the order
// owners first asked. (Earlier versions of the driver named entries PREFIX K
// NUL ...; they and this one do not see each other's entries: do not run
// both on one key.)
//
// The queue prefix of K also covers the entries of the keys nested in it
// (those of "a/b" are "a/b/E", under "a/"); their names have a slash after
// the prefix, so the driver tells them apart and leaves them out: "a" and
// "a/b" are distinct locks. etcd cannot filter a range that way, so reads of
// a queue return the entries of nested keys too (see Limits).
//
// An exclusive or shared entry is named E = LEASE, the ID of the driver's
// session lease in hex (see Sessions), exactly as concurrency.Mutex names
// the lock of a session; for a slot above 0, LEASE "." SLOT in hex. SLOT is
// the lowest number that no other owner of this driver uses on K and that
// lease. A driver usually has one owner of a key at a time, so every
// acquisition re-creates the same name, slot 0, as concurrency.Mutex does:
// etcd keeps each deleted key in its index until the history is compacted,
// and reads of a queue walk those, so a new name for every acquisition would
// slow a busy key down until the next compaction. Overlapping owners of one
// driver (a waiter while a holder releases, two Clients sharing the driver,
// readers and permits) take slots 1, 2 and so on. A slot is in use until the
// driver knows its entry is gone. The entry of a semaphore permit is named
// NUL "s" LIMIT "." LEASE "." SLOT, LIMIT being the semaphore's limit (LIMIT,
// LEASE and SLOT in 16, 16 and 8 hex digits): no dlock key contains a NUL
// byte, so the permits of K, and those of each limit, are name ranges that
// hold no other entry of K nor of a nested key.
//
// The value of an entry is JSON holding the raw owner, the holder's Info and
// the entry's mode ("shared", or "semaphore" and the limit; nothing for an
// exclusive entry): it says whose entry it is and what it asks for, and
// listings show it. An entry without such a value is foreign (the value of
// concurrency.Mutex's is empty) and counts as an exclusive entry. Since
// names are reused, every transaction that checks,
// refreshes or deletes an entry compares its CreateRevision (the
// incarnation: each creation of a key gets the revision of its transaction,
// and no two incarnations of a name share one), so a late call for an
// earlier owner never touches a later owner's entry of the same name. The
// value is not compared: a downgrade rewrites it.
//
// # Sessions
//
// Every entry is attached to the driver's session: one etcd lease, with a
// TTL S of 15s by default (WithSessionTTL, or session= in the URL; etcd
// leases are whole seconds, so S is rounded up, and the server raises it to
// its minimum, about 1.5 election timeouts, 2s with etcd's defaults). The
// first acquisition grants the lease and the client's lessor keeps it alive
// in the background (KeepAlive) from then on. One lease per driver, rather
// than one per lock, saves a round trip on every acquisition.
//
//   - A process that dies, pauses or is cut off from etcd loses all its
//     holds when its lease expires on the etcd leader's clock: S after the
//     last renewal the leader received. Its waiters are woken by the
//     deletion.
//   - The TTL of each request still holds for a process that is alive but
//     stops renewing (dlock.WithoutRenewal, a TTL used as a business
//     deadline): the driver keeps each entry's deadline on the local clock,
//     moves it on Refresh (and, for a waiter, on each Acquire), and when it
//     passes, deletes the entry (if it is still the same incarnation,
//     retrying until that succeeds or the session ends). A lock therefore
//     frees at its TTL while its process lives and at most S after its
//     process stopped talking to etcd.
//   - The lessor's keep-alive stream stops when it goes unanswered for S (it
//     ran on a member that died or hangs) or the server says the lease
//     expired. The driver then renews the lease once, on whichever member
//     answers, for as long as its latest proven renewal still covers the
//     lease: if the lease lives, the session goes on with a new stream and
//     no hold is lost.
//   - Otherwise the session ends (as it does when a request finds the lease
//     gone): every hold and queue entry of it is lost. Refresh and Release
//     report driver.ErrNotOwner, and so does a waiter's next Acquire (its
//     place in the queue is gone; package dlock queues the waiter again
//     at the back). The next acquisition grants a new lease. The old one
//     is revoked, in case it is still alive on the server, but only once
//     its latest proven renewal has run out: the driver reported holds on
//     it valid until then, and revoking earlier would free their keys for
//     other clients while the holders may still work.
//   - Close revokes the lease, which deletes every entry of the driver at
//     once.
//
// # Lock delay
//
// The driver keeps a lock delay D (dlock.WithLockDelay; it declares
// driver.Capabilities.SessionLockDelay) on the store's clock. The
// transaction that creates an entry with a delay also creates its shadow,
// E "~delay" (no entry name ends so), with the entry's value and hence its
// CreateRevision, its place in the queue: every waiter, the driver's and
// concurrency.Mutex's alike, waits for it as for the entry (the driver
// counts the two as one entry, and watches the shadow). The shadow is
// attached to a second lease of the session, one per distinct D in whole
// seconds (a hold keeps its own delay, not the longest asked), with a TTL
// of 1.5 times S+D, which the lessor keeps alive with the session lease:
//
//   - a Release (and a forced one) deletes the entry and its shadow in one
//     transaction, and a downgrade rewrites both;
//   - when the session ends (its process died, paused or was cut off, or
//     the lease was revoked by mistake, etcd-io/etcd#15247), the entry
//     goes with the session lease, and the shadow stays until its own
//     lease expires: at least D later, at most S/2+1.5D (the lessor renews
//     each lease every third of its TTL, the two at different times). A
//     driver that sees its session gone and still reaches etcd moves the
//     shadows to new leases of D (and revokes the delay leases), so they
//     last D from then;
//   - when the TTL of the request runs out (the process lives but stopped
//     renewing), the deletion of the entry moves the shadow, in the same
//     transaction, to a new lease of D, and the entry's slot stays in use
//     for D.
//
// Lock.ReleaseAfter ends a hold without delay. Close revokes the delay
// leases of the live session (a Close releases), but not those of a session
// that had ended before. Listings show a hold with a delay with the time
// left on its shadow's lease, no more than the lease it was acquired with
// plus D, and a shadow whose entry has gone as its holder: the key is
// taken until the delay ends, as on the stores whose leases include it.
//
// # Validity
//
// A hold is valid for the time the lease is known to last: a KeepAliveOnce
// that succeeds proves that the server moved the lease's expiry to at least
// S after the request was sent. Every Refresh sends one alongside its
// transaction (both after the call began; the call fails if either does),
// so after a Refresh the lease outlasts the call's start plus S. An
// acquisition sends one alongside its transaction too, unless the latest
// renewal the driver saw succeed (a refresh's, an earlier acquisition's, or
// the grant) still covers two thirds of the lease it wants; it then reports
// Result.TTL = min(TTL, S, what that renewal still covers) without another
// request. Either way the reported lease never outlasts the session lease
// on the server, so package dlock's validity (measured from before the
// request was sent, less its drift margin) ends before the server can
// expire the lease. This assumes that the client's and the leader's clocks
// run at about the same rate, as every lease does, and that the server
// revokes a lease only once it has expired. etcd breaks the latter when a
// leader is paused (SIGSTOP, a stalled disk, a starved VM) for more than
// about two thirds of S (the lessor renews every third of S) and then
// resumes: it revokes the leases that expired in its frozen
// view, and the cluster applies the revocations although their clients have
// renewed the leases with the new leader meanwhile (etcd-io/etcd#15247;
// mitigated, not entirely, from etcd 3.4.30 and 3.5.13). A hold can then be
// taken by another client while it is valid. Keep the pauses a member may
// suffer under two thirds of S (10s with the default 15s), and guard writes
// with the fencing token.
//
// # Modes
//
// Every mode uses the same queue, and an entry's admission depends only on
// the entries ahead of it, which never grow (new entries go to the back), so
// an admitted entry stays admitted until it goes:
//
//   - Exclusive: admitted if it is first.
//   - Shared: admitted if no exclusive entry is ahead of it. Readers share
//     the key; a writer waits for the readers ahead of it; and a reader
//     that comes after a queued writer waits behind it, which is writer
//     preference: while a writer waits (its entry lives), a new reader is
//     not admitted, and readers already admitted are not affected. A
//     TryLock (no Queue) of a reader fails if any writer is in the queue.
//   - Semaphore: admitted if fewer than Limit entries are ahead of it and
//     all of them are permits, so the holders are the first Limit entries
//     and each permit has an entry, a session lease, a deadline and a token
//     of its own.
//
// A foreign entry counts as exclusive: readers and permits wait for it as
// for a writer.
//
// The transaction that creates an entry reads, in the same atomic step, the
// whole queue with its values (it cannot limit the read to what decides
// the admission: the first entries of the range may be those of a nested
// key). A waiter's later Acquire reads the same up to its own CreateRevision
// (WithMaxCreateRev; an exclusive waiter's without values); a holder's reads
// nothing.
//
// Modes that cannot share a key are kept apart in that transaction too: it
// creates the entry only if the queue has no permit the entry cannot share
// the key with (comparisons on the CreateRevision of the permits' name
// ranges: for a lock request, no permit; for a permit, no permit of another
// limit). Otherwise nothing is written, and the request fails with an error
// wrapping driver.ErrModeMismatch. A permit whose transaction read a lock
// entry of this driver's format (exclusive or shared) ahead of it deletes
// its entry again in a second transaction and fails the same way: one of any
// two such requests sees the other in its transaction, whichever came
// first. An exclusive Acquire by an owner that holds the key Shared (an
// upgrade) is refused the same way.
//
// A downgrade (a shared Acquire by the exclusive holder) is one transaction:
// it checks the entry's incarnation and rewrites its value to shared. A Put
// keeps the key's CreateRevision, so the hold keeps its token and its place;
// the readers waiting behind it, which watch it for any change, are woken
// and admitted (unless another writer is ahead of them).
//
// # Acquire, Refresh, Release
//
//   - A new owner's Acquire is one transaction: if the owner has no entry
//     and the queue has no permit it cannot share the key with, create it and
//     read the queue (see Modes). An entry that is not admitted at once is
//     deleted again by a second transaction when the request has no
//     Request.Queue (package dlock sets it when Lock waits): a TryLock
//     never waits in line. An exclusive TryLock creates its entry only if
//     nothing is under the queue prefix, as a plain mutex does, and
//     otherwise reads the queue: it writes nothing on a held key (only if
//     entries of nested keys alone were there does it go the general way).
//     An uncontended lock costs one transaction whether it waits or not.
//   - A waiter's later Acquire checks that its entry is the same
//     incarnation (its CreateRevision) and whether it is admitted now, in
//     one transaction. An entry that is gone is never created again: the
//     waiter gets driver.ErrNotOwner.
//   - Refresh checks the entry's incarnation and that it holds, renews the
//     session alongside, and moves the local deadline.
//   - Release deletes the entry if it is still the incarnation the driver
//     recorded (a compare on its CreateRevision and the delete in one
//     transaction), so it never deletes a newer entry of the same name.
//     Entries the driver has no record of (the reply to their Acquire was
//     lost, or another driver made them) are found by their owner among the
//     values of the key's queue, and each is deleted only if it is still
//     the incarnation read.
//   - Every request honours its context, except the transaction that
//     creates an entry: it runs to its reply (for at most ten seconds, or
//     until Close) even if the context ends first, because the server may
//     apply a creation cancelled on the wire after a Release that followed
//     has looked for it. Its outcome recorded, the Release that package
//     dlock makes after an abandoned Acquire removes what it created, so
//     nothing stays behind. Package dlock, not the driver, returns to its
//     caller promptly (see "Contexts" in package driver).
//
// # Failover
//
// The client spreads requests over the members of the cluster. A member
// that hangs (a stopped process, a network that drops its packets) keeps
// the requests sent to it without an answer, and a request that a member
// forwarded to a leader that has just failed is lost: the member answers
// only when its own request timeout passes (about seven seconds). So that
// neither holds up a lock for longer than the cluster needs to elect a new
// leader, every request whose repetition is harmless is made in attempts
// of two seconds each: after an attempt that times out, or that the cluster
// answers with the error of a leader election, the request is sent again,
// and the client's balancer sends it to the next member. Such are every
// read, a waiter's or holder's later Acquire and Refresh (each compares the
// entry's incarnation first), and every deletion: Release, the deletion of
// an entry whose deadline passed, which is retried until it succeeds, and
// the session's grant, renewals and revocation. A Release whose earlier
// attempt may have deleted the entry reports driver.ErrNotOwner when a later
// one finds it gone: the safe side. The transaction that
// creates an entry is not repeated this way (see above).
//
// A client opened from a URL also pings each connection that has requests
// in flight after 10s without a reply (gRPC's shortest interval) and
// closes it if the ping goes unanswered for 3s: the requests and streams of
// a member that hangs for longer (the lessor's keep-alive, watches) move to
// the other members. A client passed to New keeps its own settings
// (clientv3.Config's DialKeepAliveTime and DialKeepAliveTimeout).
//
// # Fencing tokens and guarded writes
//
// The token of a hold is its entry's CreateRevision: the store's revision
// when the entry was created. Revisions increase with every write to the
// cluster and survive restarts, so tokens strictly increase per key across
// holders of every mode (each reader and permit has an entry, hence a token,
// of its own), released or expired (with gaps), and a repeated Acquire by
// the holder, or its downgrade, returns the same token.
//
// IsOwner returns a comparison that holds only while a lock's entry exists
// with the lock's token as CreateRevision (the driver knows the entry's name
// from its records; for a lock it does not hold, the comparison never
// holds), in every mode: for a reader or a permit it holds while that hold
// lasts. A transaction that writes the data the lock protects under that comparison writes only if the lock is
// still held, in the same atomic step: a holder that was paused past its
// lease cannot write, even before it notices the loss.
//
// # Waiting
//
// The driver implements driver.Notifier. A waiter watches what keeps it
// waiting, as its last Acquire read it (for an owner without an entry, a
// read of the queue that its subscription makes, so that Subscribe returns
// at once):
//
//   - an exclusive waiter watches its predecessor in the queue (the entry
//     created just before its own) for its deletion, then the next one;
//   - a reader watches the exclusive entry nearest ahead of it for its
//     deletion or any change of its value (a downgrade), then the next one;
//   - a permit that waits watches the deletions in its queue (one prefix
//     watch) and counts those of the entries that were ahead of it, until
//     fewer than Limit are left, none of them a lock entry.
//
// Entries ahead of an entry only ever go (new ones go to the back) and never
// become exclusive, so when that read shows that the watched entry is the
// last thing keeping the waiter out (an exclusive waiter's predecessor is
// first in the queue, no other writer is ahead of a reader, or a permit's
// count falls below Limit), its end admits the waiter, which is signalled
// at once. Otherwise the queue is read again after a change, and the waiter
// is signalled when that read finds nothing blocking it. Either way the
// driver notes that the waiter is admitted, and the Acquire that the signal
// prompts reads only the waiter's entry; an Acquire of a waiter reads the
// queue only if what kept it out has gone. So a handoff costs the release,
// its watch event, at most one read of the queue (which etcd scans whole,
// whatever the read's filters) and the waiter's Acquire.
//
// So a release of an exclusive lock wakes the next writer or the readers
// behind it (who are then all admitted), a reader's release wakes at most
// the writer right behind it, and a waiter is woken to find itself still
// blocked only when a writer ahead of it gave up waiting (or was a TryLock
// that found the key held). Waiting permits receive every deletion on their
// key (and on the keys nested in it) as a watch event (a semaphore's
// waiters cannot know which release admits which of them without
// counting), but only those that may be admitted are signalled. A watch starts at the server's current revision and is
// followed by a read of the watched entry (for a permit, of the entries
// ahead), which counts as a change if it is gone, created again (names are
// reused: the CreateRevision tells the incarnations apart) or changed. etcd
// delivers events at once only to a watch that was up to date when it was
// registered; one registered just after another write catches up in a loop
// that runs every 100ms. The reply that confirms the watch carries its
// start revision: if the store has moved on by the time of the read and
// the watched entry is the last thing keeping the waiter out, the read is
// repeated a few times over the next 130ms (for other waiters a late event
// costs at most that loop's period). Lease expiry of a
// blocking entry deletes it, which wakes the waiter like a release.
//
// The driver also implements driver.Lister (holders only, of every mode:
// the admitted entries of each queue, with the time left on their session
// lease as etcd sees it, but no more than the lease the hold was acquired
// with, which each entry's value records: a 3s lock of a 15s session lists
// with at most 3s; a foreign holder lists with no owner and its etcd key as
// Info) and driver.ForceReleaser (it deletes the holders and all waiters of
// a key, foreign ones included, newest first, and counts the holders).
//
// # Other lock clients
//
// concurrency.Mutex (go.etcd.io/etcd/client/v3/concurrency), `etcdctl lock
// NAME` and etcd's v3lock service (the Lock API of the server, which runs a
// concurrency.Mutex on the caller's lease) create the key NAME "/" LEASE
// with an empty value, hold the lock while no key under NAME "/" has a lower
// CreateRevision, and wait for the deletion of each such key. On the etcd
// lock name P+K (P the driver's prefix, K the dlock key) they and the driver
// exclude each other both ways, in one FIFO queue:
//
//   - an exclusive dlock lock is their peer: whichever asked first holds;
//   - a dlock reader or permit is a key under NAME "/" too, so they wait for
//     it, and the driver counts their key as an exclusive entry: readers and
//     permits wait for it (and for them, readers are writers);
//   - their holder's lease is its session: when their process dies, its
//     lock goes when the lease expires (etcdctl lock's --ttl, 60s in
//     concurrency.NewSession unless WithTTL says otherwise), and the next
//     in the queue, dlock or not, is woken by the deletion;
//   - the CreateRevision of their key (which their IsOwner compares; a Get
//     of Mutex.Key reads it) and the driver's fencing token are numbers of
//     one sequence: a resource fenced with both rejects the older holders
//     of either;
//   - dlock's ls lists their holder with its etcd key, and ForceRelease
//     deletes its key, which they do not notice: their holder goes on as if
//     it held the lock.
//
// Nested names differ: the driver leaves the entries of "a/b" out of the
// queue of "a", but concurrency.Mutex on "a" counts every key under "a/",
// so it waits for the holders and waiters of "a/b" (dlock's or its own)
// too; it never lets two holders of one name in, it only waits longer.
//
// # Limits
//
//   - Every Acquire that creates an entry and every subscription read the
//     entries ahead of it with their values (an etcd range cannot filter on
//     values, nor leave out the entries of nested keys), so their cost grows
//     with the length of the queue and with the entries of the keys nested
//     in the key ("a/..." for "a"): keep a key that is held often apart from
//     the names of many other keys. A waiting permit receives a watch event
//     for every release on its key and on the keys nested in it.
//   - A lock of a process that died stays held until its session expires:
//     up to S after the process's last renewal, whatever the lock's TTL.
//     Choose S with that in mind.
//   - Lock.ReleaseAfter keeps the hold only while the driver is open (Close
//     revokes the session) and at most S after its process stopped.
//   - Every acquisition writes a revision of an etcd key and its release
//     deletes it. Names are reused per session, so the index grows by one
//     key per session and lock, not per acquisition, but the revisions
//     stay until the history is compacted: run etcd with automatic
//     compaction (--auto-compaction-retention), as any etcd in production
//     should.
//   - The deadlines of request TTLs are kept on the local monotonic clock;
//     a hold made by one driver is refreshed and released through that
//     driver (another driver with the same owner can check, refresh and
//     release the entry, but does not move its deadline, and its IsOwner
//     does not know the lock).
//
// # URL
//
// Importing the package registers the etcd scheme with package dlock:
//
//	etcd://[user:password@]host:port[,host:port...][?session=15s&prefix=/dlock/&connect_timeout=5s]
//
// The port defaults to 2379. session is the session TTL, prefix the key
// prefix, connect_timeout (or dial-timeout, as etcdctl names it) the
// client's dial timeout, which also bounds the request that checks the
// connection when the URL is opened. A driver
// opened from a URL owns its client (and discards its log); one built with
// New uses the caller's client and leaves it open.
//
// # TLS and authentication
//
// These parameters make a URL connect over TLS, which verifies the
// members' certificates (they are named as etcdctl names its flags):
//
//   - cacert=FILE: the PEM certificates of the authorities the members'
//     certificates must chain to, instead of the system's roots.
//   - cert=FILE and key=FILE: a client certificate and its private key
//     (PEM), for members run with --client-cert-auth.
//   - servername=NAME: the name the members' certificates must carry, when
//     it is not the host of the URL.
//   - tls=true: TLS with the system's roots and no other parameter.
//
// A member whose certificate does not verify, or that rejects the client's
// certificate, fails the Open at once with the reason ("the server's
// certificate is not trusted ... x509: certificate signed by unknown
// authority", "the server rejected the client certificate ... bad
// certificate"), rather than when the dial timeout runs out: the Open
// completes a TLS handshake with the members before the client dials them.
//
// user:password in the URL authenticates to etcd (its auth must be
// enabled; the user needs read and write permission on the key prefix).
// The password is sent only over TLS: without TLS parameters the Open
// fails with a *dlock.ArgError unless the URL has insecure_auth=true,
// which allows sending it in clear text (on a trusted network, or to a
// local member). A password never appears in errors: URLs in messages are
// redacted. With a client certificate and no password, etcd takes the
// certificate's common name for the user.
//
// A program that builds its own client sets clientv3.Config.TLS (and
// Username and Password) and passes the client to New; see the example of
// New with TLS.
package etcddlock
