// Package etcddlock is a dlock backend over etcd v3, through
// go.etcd.io/etcd/client/v3.
//
// etcd replicates every write through Raft and serves linearizable
// transactions (a compare and the writes it guards are one atomic step on a
// majority of members), and its revision counter only grows and is as
// durable as the data. The driver builds on that: Capabilities reports
// Consensus, DurableTokens and ServerClock, and a FIFO wait queue. Use it
// for locks whose holders must never overlap, together with the fencing
// tokens and IsOwner below.
//
// # Records
//
// The wait queue of the dlock key K is the set of etcd keys that start with
// PREFIX K "\x00" (PREFIX is "/dlock/" unless WithPrefix says otherwise).
// dlock keys contain no NUL byte, so the NUL ends the key and no two keys
// share a queue ("a" and "a/b" and "a\x01" are apart). The entry with the
// lowest CreateRevision holds the key; the others wait in CreateRevision
// order, so the lock is granted in the order owners first asked.
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
// Clients sharing the driver) take slots 1, 2 and so on. A slot is in use
// until the driver knows its entry is gone.
//
// The value of an entry is JSON holding the raw owner and the holder's Info:
// it says whose entry it is, and listings show it. Since names are reused,
// every transaction that checks, refreshes or deletes an entry compares both
// its value (the owner, unique per acquisition) and its CreateRevision (the
// incarnation: each creation of a key gets the revision of its transaction),
// so a late call for an earlier owner never touches a later owner's entry of
// the same name.
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
//   - If the session ends (the lessor's keep-alive stops because the lease
//     expired or went unanswered for S, or a request finds the lease gone),
//     every hold and queue entry of it is lost: Refresh and Release report
//     driver.ErrNotHeld, and so does a waiter's next Acquire (its place in
//     the queue is gone; package dlock ends the wait with dlock.ErrLost).
//     The driver revokes the old lease (in case it is still alive on the
//     server) and grants a new one for the next acquisition.
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
// run at about the same rate, as every lease does.
//
// # Acquire, Refresh, Release
//
//   - A new owner's Acquire is one transaction. With Request.Queue (package
//     dlock sets it when Lock waits): if the owner has no entry, create it
//     and read the first entry of the queue; otherwise read both. Without
//     Queue (TryLock): create the entry only if the queue is empty,
//     otherwise read; so a TryLock never waits in line. The owner holds the
//     key if its entry is first.
//   - A waiter's later Acquire checks that its entry is the same
//     incarnation (its value and CreateRevision) and whether it is first,
//     in one transaction. An entry that is gone is never created again: the
//     waiter gets driver.ErrNotHeld.
//   - Refresh checks the entry's incarnation and that it holds, renews the
//     session alongside, and moves the local deadline.
//   - Release deletes the entry if it is still the incarnation the driver
//     recorded (a compare on its value and CreateRevision and the delete in
//     one transaction), so it never deletes a newer entry of the same name.
//     Entries the driver has no record of (the reply to their Acquire was
//     lost, or another driver made them) are found by their owner among the
//     values of the key's queue, and each is deleted only if it is still
//     the incarnation read.
//   - An Acquire whose context ends before the reply runs to completion in
//     the background; the Release that follows (package dlock calls it
//     after an error) waits for it and removes what it created, so nothing
//     stays behind. Every call honours its context.
//
// # Fencing tokens and guarded writes
//
// The token of a hold is its entry's CreateRevision: the store's revision
// when the entry was created. Revisions increase with every write to the
// cluster and survive restarts, so tokens strictly increase per key across
// holders, released or expired (with gaps), and a repeated Acquire by the
// holder returns the same token.
//
// IsOwner returns a comparison that holds only while a lock's entry exists
// with the lock's token as CreateRevision (the driver knows the entry's name
// from its records; for a lock it does not hold, the comparison never
// holds). A transaction that writes the
// data the lock protects under that comparison writes only if the lock is
// still held, in the same atomic step: a holder that was paused past its
// lease cannot write, even before it notices the loss.
//
// # Waiting
//
// The driver implements driver.Notifier. A waiter watches only its
// predecessor in the queue (the entry created just before its own), so a
// release wakes exactly one waiter and no herd. When the predecessor goes,
// the waiter is signalled and watches the next predecessor, if any. A watch
// starts at the server's current revision and is followed by a read of the
// predecessor, which counts as its deletion if it is gone. etcd delivers
// events at once only to a watch that was up to date when it was
// registered; one registered just after another write catches up in a loop
// that runs every 100ms. The reply that confirms the watch carries its
// start revision: if the store has moved on by the time of the read, the
// predecessor is read again a few times over the next 130ms. Lease expiry
// of the predecessor deletes its entry, which wakes the waiter like a
// release.
//
// The driver also implements driver.Lister (holders only: the first entry
// of each queue, with the time left on its lease as etcd sees it) and
// driver.ForceReleaser (one transaction deletes the holder and all waiters
// of a key).
//
// # Limits
//
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
// request that checks the connection when the URL is opened). Credentials
// enable etcd's authentication. A driver opened from a URL owns its client
// (and discards its log); one built with New uses the caller's client and
// leaves it open.
package etcddlock
