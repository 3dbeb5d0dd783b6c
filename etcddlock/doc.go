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
// The wait queue of the dlock key K is the set of etcd keys that start with
// PREFIX K "\x00" (PREFIX is "/dlock/" unless WithPrefix says otherwise).
// dlock keys contain no NUL byte, so the NUL ends the key and no two keys
// share a queue ("a" and "a/b" and "a\x01" are apart). The entries are in
// CreateRevision order, and whether an entry holds the key depends only on
// the entries ahead of it (see Modes): the entry with the lowest
// CreateRevision holds an exclusive lock, and the others wait in
// CreateRevision order, so the lock is granted in the order owners first
// asked.
//
// An entry is PREFIX K "\x00" LEASE "." SLOT: LEASE is the ID of the
// driver's session lease (16 hex digits, see Sessions) and SLOT the lowest
// number (8 hex digits) that no other owner of this driver uses on K and
// that lease. A driver usually has one owner of a key at a time, so every
// acquisition re-creates the same name, slot 0, as etcd's concurrency.Mutex
// does: etcd keeps each deleted key in its index until the history is
// compacted, and reads of a queue walk those, so a new name for every
// acquisition would slow a busy key down until the next compaction.
// Overlapping owners of one driver (a waiter while a holder releases, two
// Clients sharing the driver, readers and permits) take slots 1, 2 and so
// on. A slot is in use until the driver knows its entry is gone. The entry
// of a semaphore permit is PREFIX K "\x00" "s" LIMIT "." LEASE "." SLOT,
// LIMIT being the semaphore's limit in 16 hex digits: "s" sorts after the
// hex digits, so lock entries, permits, and permits of each limit are name
// ranges of their own.
//
// The value of an entry is JSON holding the raw owner, the holder's Info and
// the entry's mode ("shared", or "semaphore" and the limit; nothing for an
// exclusive entry): it says whose entry it is and what it asks for, and
// listings show it. Since names are reused, every transaction that checks,
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
//     place in the queue is gone; package dlock ends the wait with
//     dlock.ErrLost). The next acquisition grants a new lease. The old one
//     is revoked, in case it is still alive on the server, but only once
//     its latest proven renewal has run out: the driver reported holds on
//     it valid until then, and revoking earlier would free their keys for
//     other clients while the holders may still work.
//   - Close revokes the lease, which deletes every entry of the driver at
//     once.
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
//   - Semaphore: admitted if fewer than Limit entries are ahead of it, so
//     the holders are the first Limit entries and each permit has an entry,
//     a session lease, a deadline and a token of its own.
//
// The transaction that creates an entry reads what decides its admission,
// in the same atomic step: the first entry for an exclusive request (as a
// plain mutex does), the first Limit entries for a permit, and every entry
// ahead for a reader (an etcd range cannot filter on values; a reader's
// request reads the values of the readers and writers ahead of it). A
// waiter's later Acquire reads the same up to its own CreateRevision
// (WithMaxCreateRev); a holder's reads nothing.
//
// Modes that cannot share a key are kept apart in that transaction too: it
// creates the entry only if the queue has no entry of another kind
// (comparisons on the CreateRevision of name ranges: for a lock request, no
// permit; for a permit, no lock entry and no permit of another limit).
// Otherwise nothing is written, and the request fails with an error wrapping
// driver.ErrModeMismatch. An exclusive Acquire by an owner that holds the key
// Shared (an upgrade) is refused the same way.
//
// A downgrade (a shared Acquire by the exclusive holder) is one transaction:
// it checks the entry's incarnation and rewrites its value to shared. A Put
// keeps the key's CreateRevision, so the hold keeps its token and its place;
// the readers waiting behind it, which watch it for any change, are woken
// and admitted (unless another writer is ahead of them).
//
// # Acquire, Refresh, Release
//
//   - A new owner's Acquire is one transaction. With Request.Queue (package
//     dlock sets it when Lock waits), and for readers and permits: if the
//     owner has no entry and the queue has none of another mode, create it
//     and read the entries that decide its admission (see Modes). An
//     exclusive request without Queue (TryLock) creates its entry only if
//     the queue is empty, otherwise reads the first entry; so a TryLock
//     never waits in line, and an uncontended lock costs one transaction
//     whether it waits or not. A reader or permit without Queue that is not
//     admitted at once deletes its entry again in a second transaction.
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
// waiting, found by a read of the queue that its subscription makes (so
// Subscribe returns at once, and the read runs alongside the Acquire that
// package dlock makes right after subscribing):
//
//   - an exclusive waiter watches its predecessor in the queue (the entry
//     created just before its own) for its deletion, then the next one;
//   - a reader watches the exclusive entry nearest ahead of it for its
//     deletion or any change of its value (a downgrade), then the next one;
//   - a permit that waits watches the deletions in its queue (one prefix
//     watch) and counts those of the entries that were ahead of it, until
//     fewer than Limit are left.
//
// Entries ahead of an entry only ever go (new ones go to the back) and never
// become exclusive, so when that read shows that the watched entry is the
// last thing keeping the waiter out (an exclusive waiter's predecessor is
// first in the queue, no other writer is ahead of a reader, or a permit's
// count falls below Limit), its end admits the waiter, which is signalled
// at once: a handoff costs the release, its watch event and the waiter's
// Acquire. Otherwise the queue is read again after a change, and the
// waiter is signalled when that read finds nothing blocking; the end of a
// watched writer is signalled at once as well, since a writer leaves the
// queue after it held the key (unless its owner gave up waiting), so that
// its end nearly always admits the waiter.
//
// So a release of an exclusive lock wakes the next writer or the readers
// behind it (who are then all admitted), a reader's release wakes at most
// the writer right behind it, and a waiter is woken to find itself still
// blocked only when a writer ahead of it gave up waiting. Waiting permits
// receive every deletion on their key as a watch event (a semaphore's
// waiters cannot know which release admits which of them without
// counting), but only those that may be admitted are signalled. A watch starts at the server's current revision and is
// followed by a read of the watched entry (for a permit, of the entries
// ahead), which counts as a change if it is gone, created again (names are
// reused: the CreateRevision tells the incarnations apart) or changed. etcd
// delivers events at once only to a watch that was up to date when it was
// registered; one registered just after another write catches up in a loop
// that runs every 100ms. The reply that confirms the watch carries its
// start revision: if the store has moved on by the time of the read, the
// read is repeated a few times over the next 130ms. Lease expiry of a
// blocking entry deletes it, which wakes the waiter like a release.
//
// The driver also implements driver.Lister (holders only, of every mode:
// the admitted entries of each queue, with the time left on their session
// lease as etcd sees it, but no more than the lease the hold was acquired
// with, which each entry's value records: a 3s lock of a 15s session lists
// with at most 3s) and driver.ForceReleaser (one transaction deletes the
// holders and all waiters of a key, and counts the holders).
//
// # Limits
//
//   - A reader's Acquire and its subscription read the entries ahead of it
//     with their values (etcd cannot filter a range on values), so their
//     cost grows with the number of readers that hold the key; a waiting
//     permit receives a watch event for every release on its key.
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
//	etcd://[user:password@]host:port[,host:port...][?session=15s&prefix=/dlock/&dial-timeout=5s]
//
// The port defaults to 2379. session is the session TTL, prefix the key
// prefix, dial-timeout the client's dial timeout (also the bound on the
// request that checks the connection when the URL is opened). A driver
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
