// Package redisdlock is the dlock backend for Redis: a standalone server, a
// master managed by Sentinel, or a Cluster, through go-redis v9.
//
// Create a driver over your own client, or open one from a URL:
//
//	d, err := redisdlock.New(rdb, redisdlock.WithPrefix("myapp:"))
//	c, err := dlock.New(d)
//
//	c, err := dlock.Open(ctx, "redis://127.0.0.1:6379/0?prefix=myapp:")
//
// # What Redis guarantees, and what it does not
//
// A Redis lock is a lock for efficiency, not for correctness. Replication is
// asynchronous: if the master fails after granting a lock and before a
// replica received it, Sentinel or Cluster promotes the replica and a second
// client can take the same lock while the first still holds it. A server
// restarted without persistence forgets every lock and every fencing
// counter, so tokens start again from 1 (Capabilities.DurableTokens is
// false: the counter is exactly as durable as the server's persistence —
// AOF with appendfsync always keeps it across a restart, RDB snapshots or
// appendfsync everysec can lose the latest increments — and the driver
// cannot vouch for the server's configuration). WithReplicaAck narrows the
// failover window (see there); it does not close it. Where a duplicate run
// is unacceptable, use a consensus store, and pass Lock.Token to the
// protected resource either way.
//
// # Protocols
//
// The driver speaks one of three protocols (WithProtocol, or mode= in the
// URL; not to be confused with the lock modes below).
//
// Script (the default): acquire, refresh and release are Lua scripts, each
// one atomic step on the server, run with EVALSHA (EVAL after NOSCRIPT, as
// after a restart, a SCRIPT FLUSH or a failover). Keys and values reach the
// scripts only as KEYS and ARGV. Leases are PEXPIRE on the server's clock
// (Capabilities.ServerClock).
//
// Transaction: the same keys and values as Script, changed with
// WATCH/MULTI/EXEC instead of scripts, for servers where EVAL is denied. A
// step WATCHes the keys it reads, reads them, and writes in MULTI/EXEC only
// if what it read allows; if another client changed a watched key meanwhile
// EXEC writes nothing, and the step reports "not acquired" (Acquire) or an
// error the portable layer retries (Refresh, Release). It costs three round
// trips per step instead of one. Drivers in Script and Transaction mode
// share locks.
//
// Legacy: the SETNX/GET/GETSET protocol of existing services, so that a Go
// service shares locks with them. The lock key is prefix+key, without hash
// tag or escaping, and holds the time the lock expires, as a decimal Unix
// timestamp in milliseconds (or seconds, WithLegacyUnit): now + TTL + 1
// unit, as those services write it with SETNX key <now+ttl+1>. A lock whose
// timestamp is in the past is free, by the reader's clock. So leases depend
// on client clocks (Capabilities.ServerClock is false): a client whose clock
// runs ahead takes locks early, and skew between hosts shortens or lengthens
// every lease. The protocol also has an overwrite race: two of the existing
// services that both see an expired timestamp both GETSET, the loser
// overwrites the winner's timestamp, and a service that unlocks with a
// separate GET and DEL can delete a lock another client took in between.
// dlock does not make those services safer; it keeps its own steps atomic
// and never deletes a lock it does not hold:
//
//   - Acquire WATCHes the lock key and reads it; if it is absent or its
//     timestamp has passed, MULTI/EXEC writes a new timestamp (SET with PX,
//     so the key also vanishes on the server's clock once the lease ends),
//     increments the fencing counter and records the owner in a side hash;
//     EXEC fails and nothing is written if any client touched the key in
//     between.
//   - The side hash binds the dlock owner to the exact timestamp it wrote.
//     Refresh and Release change the lock key only while it still holds that
//     timestamp, inside WATCH/MULTI/EXEC, so a lock another client took over
//     (even with GETSET) is never refreshed or deleted. Timestamps identify
//     holds uniquely: a client can only take over a timestamp that has
//     passed on its clock, and then writes a later one; a racing GETSET
//     loser that overwrites dlock's timestamp makes dlock see its lock as
//     lost, never the reverse.
//   - Releases by the existing services are not announced: dlock waiters
//     notice them by polling (RetryAfter from the timestamp).
//
// Legacy and the other modes do not share locks.
//
// # Lock modes
//
// Script mode implements every lock mode natively, in Lua, on the server:
// exclusive locks, read-write locks (Shared, with writer preference and
// downgrade), semaphores whose permits expire, and a FIFO wait queue
// (Capabilities.FIFO), much as Redisson's RedissonReadWriteLock,
// RedissonPermitExpirableSemaphore and RedissonFairLock do. Transaction and
// Legacy modes implement exclusive locks only (other modes are refused with
// ErrUnsupported); a Transaction driver shares locks with Script drivers,
// sees their readers and permits as holders, and can refresh and release
// its exclusive holds while Script waiters queue behind them, but it never
// queues itself.
//
// A lock is kept in one of two forms. The simple form is the one an
// uncontended exclusive lock has always had: the lock hash with the fields
// owner, token and info and a PEXPIRE equal to the lease. Acquire, Refresh
// and Release of an exclusive lock in the simple form run exactly the
// commands they ran before the other modes existed, at the top of each
// script (the fast path); everything else is compiled in after it and does
// not run. Every other state is the general form:
//
//   - The hash's owner field holds a marker that no owner can be ("\x00rw"
//     for exclusive and shared holds, "\x00sem" for semaphores), so that
//     the fast path and Transaction mode see the lock as held.
//   - The holders are the members of a sorted set whose scores are the
//     times their leases end (ms, on the server's clock, from TIME); their
//     tokens, infos and modes are the hash fields t:OWNER, i:OWNER and
//     m:OWNER; a semaphore's permits are the field limit. Every script that
//     reads the general form first drops the holders whose lease has ended,
//     so a crashed reader's or permit holder's lease returns on its own.
//   - The waiters (Request.Queue) are the members of a second sorted set,
//     in the order they first asked (scores from the hash's seq counter),
//     with their modes in the fields w:OWNER, their infos in i:OWNER, the
//     field c:OWNER saying that the waiter listens on a channel of its own
//     (see Waiting), and the leases of their queue entries in a third
//     sorted set. An entry whose lease ended is kept
//     there for a minute, so that its owner's next Acquire fails with
//     ErrNotOwner instead of queueing it again at the back.
//   - The hash, holders and queue expire (PEXPIREAT) with the longest lease
//     of a holder or waiter, and are deleted when none is left: the hash
//     exists exactly while someone holds or waits, so the fast path, which
//     takes a lock whose hash is absent, never passes a waiter.
//
// An exclusive Acquire that finds the lock held and asks to queue turns the
// simple form into the general one; one admitted with nobody left in the
// queue turns it back, as does a release that hands the lock to the only
// waiter. Admission follows the queue: an exclusive request is
// admitted when there is no holder and nobody ahead of it; a shared one
// when no exclusive holder exists and no exclusive waiter is ahead of it
// (readers do not wait for readers, and a new reader does not pass a
// queued writer: writer preference); a semaphore request when the holders
// and the waiters ahead of it number fewer than its limit. A shared Acquire
// by the exclusive holder downgrades the hold in place (same token, lease
// renewed) and signals the readers waiting behind it (see Waiting); an exclusive Acquire by a reader (an upgrade), a
// semaphore request on a read-write lock or the other way round, and a
// semaphore request with another limit fail with ErrModeMismatch and change
// nothing. Every hold, each reader and each permit included, takes its
// token from the lock's fencing counter. A release signals the waiters it
// may let in (see Waiting); an admission from the queue signals nobody. A
// release that leaves no holder and finds a writer at the head of the
// queue makes it the holder at once, with the next token, before it
// signals it (see Waiting).
//
// Reader and permit leases are absolute times on the master's clock: after
// a failover to a replica whose clock differs they end earlier or later by
// the difference. Exclusive holds in the simple form are PEXPIREs, as ever.
//
// # Multi-locks
//
// The driver implements driver.MultiAcquirer in Script mode: one script
// (scripts/acquireall.lua) checks every lock of a dlock.Client.LockAll or
// TryLockAll, then takes them all, or takes none and changes nothing. On a
// standalone server or behind Sentinel any keys qualify; on Redis Cluster,
// keys that share a hash tag (see Keys). For keys on different Cluster
// slots, and in Transaction and Legacy modes, AcquireAll returns
// ErrUnsupported and package dlock takes the keys one by one in canonical
// order. The script admits a request as Acquire does a new owner that does
// not queue: an exclusive one on a lock without holders and waiters, a
// shared one when no writer holds or waits, a permit while holders and
// waiters number fewer than the limit.
//
// # Keys
//
// In Script and Transaction modes, the keys of the lock named KEY are:
//
//	{PREFIX+ESC(KEY)}           hash: the simple or the general form (field l: see Waiting); expires with the lease
//	{PREFIX+ESC(KEY)}:fence     the fencing counter (INCR); never expires
//	{PREFIX+ESC(KEY)}:holders   zset: holders in the general form, by lease end
//	{PREFIX+ESC(KEY)}:queue     zset: waiters, in order
//	{PREFIX+ESC(KEY)}:qexp      zset: waiters, by the end of their entry's lease
//	{PREFIX+ESC(KEY)}:released  pub/sub channel announcing releases to waiters that do not queue
//	{PREFIX+ESC(KEY)}:released:OWNER  pub/sub channel telling the queued waiter OWNER it may be let in
//
// PREFIX is WithPrefix (default "dlock:") and must not contain braces. ESC
// replaces '%', '{' and '}' in the key by "%25", "%7B" and "%7D", so the hash
// tag always ends at the driver's closing brace: every key of one lock hashes
// to one Cluster slot whatever the user key contains (so that each script
// runs on one node), and distinct keys never share a name.
//
// A key with a Redis Cluster hash tag of its own (the content TAG of its
// first {...}, if not empty, as in "order:{42}:payment") is named
// {PREFIX+ESC(TAG)}{ESC(KEY)} instead of {PREFIX+ESC(KEY)}, with the same
// suffixes: the locks of keys with one tag share a slot, as the tag asks,
// and can be taken together in one script (see Multi-locks). The two forms
// cannot be mistaken for each other (one pair of braces, or two). The fencing
// counter is the one key that outlives a lock, as the driver contract
// allows: it must, or a later holder could be handed a smaller token (the
// qexp set also lingers for a minute after its last entry ended, see
// above). Delete counters only of locks that will never be used again.
//
// In Legacy mode, the keys of the lock named KEY, with LK = PREFIX+KEY, are:
//
//	LK                          the expiry timestamp (what existing services read)
//	{TAG}LK:dlock.holder        hash: owner, value (the timestamp it wrote), token, info
//	{TAG}LK:dlock.fence         the fencing counter
//	{TAG}LK:dlock.released      pub/sub channel
//
// TAG is the part of LK that Redis Cluster hashes (the content of its first
// non-empty {...}, else LK itself), so the side keys share LK's slot; if
// that part contains a '}', TAG is a short string chosen to hash to the
// same slot. Every dlock process derives the same names.
//
// # Scripts
//
// The acquire script takes the hash and the counter as KEYS, refresh and
// release the hash alone; each names the lock's other keys and its channel
// after the hash (with the suffixes above) only when it needs them, so that
// the fast path is sent nothing it does not use (arguments cost the server
// time: measured with redis-benchmark on Redis 7.0, twelve of them, as the
// scripts used to get, added 1.5µs to a call, about as much as the
// commands of the fast path take). forcerelease and acquireall take all
// five keys. Each script begins with the fast path of the simple form.
// The fast path of acquire (ARGV: owner, lease ms, info, mode, queue, and
// a semaphore's limit) is below. Queue is '1' for an owner that may have
// lost a place in the queue, and '2' for one that no Acquire of the driver
// has asked to queue before (the driver keeps the owners it asked to queue
// until they are admitted or released): only the first kind costs a
// ZSCORE on a free lock, and a Lock that takes a free lock at once asks
// with '2'.
//
//	local owner = redis.call('HGET', KEYS[1], 'owner')
//	if ARGV[4] == 'x' then  -- exclusive
//	  if not owner and (ARGV[5] ~= '1' or not redis.call('ZSCORE', KEYS[1] .. ':qexp', ARGV[1])) then
//	    local token = redis.call('INCR', KEYS[2])
//	    redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, 'info', ARGV[3])
//	    redis.call('PEXPIRE', KEYS[1], ARGV[2])
//	    return {1, token}
//	  end
//	  if owner == ARGV[1] then  -- the same owner again: extend, same token
//	    redis.call('PEXPIRE', KEYS[1], ARGV[2])
//	    return {1, tonumber(redis.call('HGET', KEYS[1], 'token'))}
//	  end
//	  if ARGV[5] == '0' and string.byte(owner) ~= 0 then
//	    redis.call('HSET', KEYS[1], 'l', '1')  -- a waiter may listen: see Waiting
//	    return {0, redis.call('PTTL', KEYS[1])}  -- held, not queueing: RetryAfter
//	  end
//	end
//	-- the general form follows
//
// refresh: PEXPIRE if HGET owner matches, else the general form.
// release: HGET owner; if it matches, DEL and PUBLISH to the lock's
// channel; else the general form. An uncontended Lock and Release thus run
// seven commands in two script calls. In the general form, a release that
// leaves nobody holding or waiting deletes the lock's keys (eight commands),
// and one that hands the lock to a waiter alone in the queue writes the
// simple form for it (fourteen); neither first removes the releaser's hold
// from the keys it deletes.
// forcerelease: DEL of the hash, holders and queue, and PUBLISH to the
// lock's channel and every queued waiter's if something was deleted. The sources are in the scripts directory,
// embedded with go:embed; scripts/common.lua, the general form's helpers,
// is spliced into each after its fast path.
//
// # Waiting
//
// A release signals in the same atomic step that deletes the hold. A
// waiter that queues (every waiter in Script mode) listens on a channel of
// its own, and a release signals only the waiters it may let in: the head
// of the queue, the readers at its head, or as many waiters for permits as
// are free; an expired entry removed by any script signals the new head.
// So one release costs one message and one acquire, however many wait.
// A release that leaves no holder hands the lock to a writer at the head
// of the queue in the same step, and the message tells the waiter its token
// and lease: the waiter holds the lock on receipt, with a validity counted
// from its latest acquire, and its first renewal, at once, extends the hold
// to its own lease (a waiter whose latest acquire is too old for that
// confirms with one more acquire: a few commands). So a handoff costs the
// release's round trip and the message. A head that died or gave up keeps
// the lock from the next in line for at most three seconds (less if its
// queue entry's lease ends sooner): long enough that a waiter the machine
// is slow to run still renews the hold in time.
// Waiters that do not queue (Transaction mode, quorum locks) listen on the
// lock's channel, and so do observers of a key's releases (leader.Observe):
// every release of the simple form publishes there, since a subscriber is
// promised every release after its Subscribe returned, whether or not it
// ever tried the lock. (The field l, which an acquire that finds the lock
// held and does not queue sets, is kept for the general form's
// bookkeeping.) The waiters of older
// versions of this package listen on the lock's channel too (the notes in
// notify.go tell more). A Driver keeps
// one pub/sub connection, opened by the first Subscribe and shared by all
// its waiters: it SUBSCRIBEs to a channel while at least one of its
// waiters waits on it (counted per channel, UNSUBSCRIBE after the last),
// and fans messages out through internal/notify. A process hears about the
// locks it waits for only. Subscribe returns once the server has confirmed the
// SUBSCRIBE, so no later release goes unheard. If the connection breaks,
// go-redis reconnects and subscribes again, and each channel's waiters are
// signalled when the server confirms it anew, since a release may have been
// missed meanwhile; a connection that stays silent and does not answer a
// ping is replaced. Until then waiters poll. A handoff costs the release's
// round trip (the message leaves the server with the release's reply), and
// the waiter's acquire unless the release handed the lock over. A channel is unsubscribed as soon as its last
// waiter leaves: Redis delivers a message to a channel's subscribers in the
// order they subscribed, so this sends the process that just won a busy lock
// to the back of the line (with persistent subscriptions one process heard
// of every release first; p99 waits rose from 0.15 s to 1 s in the hot-key
// benchmark).
//
// In a Cluster releases are published with PUBLISH, which the cluster bus
// forwards to every node, so the one connection (to any node) hears them
// all. Sharded pub/sub (SPUBLISH/SSUBSCRIBE, Redis 7) keeps a message on its
// shard: measured on a three-master cluster on one host
// (BenchmarkClusterPubSub), a SPUBLISH costs the server about a fifth of a
// PUBLISH, and delivery takes about 14µs instead of 23µs (subscriber on the
// publishing node) or 49µs (on another node). It needs a connection per
// shard, though, and the server drops shard subscriptions when their slot
// moves; the driver keeps to one connection and PUBLISH.
//
// # Replica acknowledgement
//
// WithReplicaAck(n, timeout) (URL: wait_replicas=n&wait_timeout=d) runs
// WAIT n timeout on the connection that wrote the lock, after every
// successful acquire. If fewer than n replicas acknowledged in time, the
// driver releases the lock and Acquire fails with ErrReplicaAck. This makes
// the failover window smaller (a promoted replica that acknowledged has the
// lock), not zero: WAIT does not make Redis strongly consistent, Sentinel
// and Cluster may still promote a replica that did not acknowledge, and
// refreshes are not waited for.
//
// # URLs
//
//	redis://[user:password@]host:port[/db][?params]
//	rediss://...                                         (TLS)
//	redis+sentinel://[user:password@]host:port[,host:port...]/mastername[/db][?params]
//	redis+cluster://[user:password@]host:port[,host:port...][?params]
//
// The driver's parameters are prefix, mode (script, tx, legacy),
// wait_replicas, wait_timeout (a duration such as 500ms, or milliseconds;
// default 1s), legacy_unit (ms, s), autopipeline (true, the default, or
// false: see WithAutoPipeline) and client (go-redis, the only client,
// which may be left out). Every other parameter goes to go-redis (ParseURL,
// ParseFailoverURL, ParseClusterURL: pool_size, read_timeout, client_name,
// ...), and one that neither knows is an error naming it. For Sentinel, the hosts are the Sentinels', user and password
// authenticate to the master and replicas, and sentinel_username and
// sentinel_password to the Sentinels. Several IPv6 hosts cannot be written
// in the host part (Go's URL parser rejects them); add them with
// addr=[::1]:26380 parameters. A driver opened from a URL owns its client,
// with go-redis's command retries off (unless max_retries is given) and
// context deadlines applied to network I/O. A Cluster client opened from a
// URL reloads its slot map when it is 5 s old (go-redis's default is a
// minute) and whenever a command gets no answer from a node, so that after
// a master fails it finds the promoted replica as soon as the cluster has
// promoted it.
//
// # TLS
//
// rediss:// connects over TLS, verifying the server's certificate against
// the system's roots and the URL's host. These parameters, on every
// scheme, configure it (and turn TLS on for redis://, redis+sentinel:// and
// redis+cluster://):
//
//	tls=true             TLS with the system's roots (tls=false: no TLS)
//	cacert=/path/ca.pem  the authorities the server's certificate must chain to
//	cert=/path/c.pem     a client certificate (PEM), for tls-auth-clients yes;
//	key=/path/c-key.pem  its private key (both or neither)
//	servername=name      the name the server's certificate must carry,
//	                     when it is not the host dialled
//
// A Sentinel URL uses the same TLS for the Sentinels and for the master and
// replicas they name; a Cluster URL for every node. go-redis's skip_verify=true
// turns verification off (never do so outside a test). A certificate that
// does not verify fails the open at once, with Go's x509 error ("certificate
// signed by unknown authority"); credentials are never quoted in errors.
//
//	rediss://:password@redis.example:6380/0?cacert=/etc/dlock/ca.pem&cert=/etc/dlock/client.pem&key=/etc/dlock/client-key.pem
//
// # Client settings
//
// For a client you pass to New, set MaxRetries: -1 and
// ContextTimeoutEnabled: true. dlock retries on its own; a client that
// re-sends a command after a network error can run a release twice and
// report the second run's "not held", which dlock takes for a lost lock
// (ClusterClient resends after network errors regardless of MaxRetries, up
// to MaxRedirects times). Script mode's scripts are marked as commands
// go-redis must never resend (redis.Cmder's NoRetry), so they run at most
// once whatever the client's settings; the WATCH/MULTI/EXEC steps of
// Transaction and Legacy modes need MaxRetries -1. Without
// ContextTimeoutEnabled go-redis waits for a reply up to ReadTimeout
// whatever the context says.
//
// In Script mode the driver sends the scripts of concurrent callers
// through the client's AutoPipeliner, go-redis's auto-pipelining: they go
// out as one pipeline per round trip, on the client's pipeline pool
// (PipelinePoolSize, 10 connections by default); a script that finds none
// of the driver's others on its way goes out as a command of its own. go-redis makes it on
// the client's first call to AutoPipeline and shares it with the client's
// other users; it stops when the client is closed, so a driver that does
// not own its client leaves it running. An auto-pipelined script returns
// when its pipeline does, within ReadTimeout and WriteTimeout whatever the
// context says (package dlock returns to its caller on time all the same),
// and the client's hooks see it on a context of go-redis's own.
// WithAutoPipeline(false), or autopipeline=false in a URL, sends each script
// as a command of its own instead. A *redis.Ring is
// rejected: it shards keys over servers without failover or a shared
// pub/sub (use the quorum package over several drivers instead).
//
// # Limits
//
// Keys are up to 1024 bytes (dlock's portable limit; Redis itself takes
// 512 MB keys, so the prefix does not count against it). Leases are whole
// milliseconds, at least 1ms (Legacy: at least 10ms, or whole seconds with
// legacy_unit=s); a lease with a fraction is rounded down and the granted
// lease reported. Shared locks, semaphores and the FIFO queue need Script
// mode (Redis 3.2 or later: the general form reads TIME and then writes,
// which needs effects replication, the default since Redis 5).
package redisdlock
