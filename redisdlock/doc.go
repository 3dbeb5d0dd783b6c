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
// # Modes
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
// # Keys
//
// In Script and Transaction modes, the keys of the lock named KEY are:
//
//	{PREFIX+ESC(KEY)}           hash: owner, token, info; PEXPIRE = the lease
//	{PREFIX+ESC(KEY)}:fence     the fencing counter (INCR); never expires
//	{PREFIX+ESC(KEY)}:released  pub/sub channel announcing releases
//
// PREFIX is WithPrefix (default "dlock:") and must not contain braces. ESC
// replaces '%', '{' and '}' in the key by "%25", "%7B" and "%7D", so the hash
// tag always ends at the driver's closing brace: every key of one lock hashes
// to one Cluster slot whatever the user key contains, and distinct keys never
// share a name. The fencing counter is the one key that outlives a lock, as
// the driver contract allows: it must, or a later holder could be handed a
// smaller token. Delete counters only of locks that will never be used
// again.
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
// acquire (KEYS: hash, counter; ARGV: owner, lease ms, info):
//
//	local owner = redis.call('HGET', KEYS[1], 'owner')
//	if not owner then
//	  local token = redis.call('INCR', KEYS[2])
//	  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, 'info', ARGV[3])
//	  redis.call('PEXPIRE', KEYS[1], ARGV[2])
//	  return {1, token}
//	end
//	if owner == ARGV[1] then  -- the same owner again: extend, same token
//	  redis.call('PEXPIRE', KEYS[1], ARGV[2])
//	  return {1, tonumber(redis.call('HGET', KEYS[1], 'token'))}
//	end
//	return {0, redis.call('PTTL', KEYS[1])}  -- held: RetryAfter
//
// refresh (KEYS: hash; ARGV: owner, lease ms): PEXPIRE if HGET owner
// matches, else 0 (driver.ErrNotHeld). release (KEYS: hash; ARGV: owner,
// channel): DEL and PUBLISH if HGET owner matches, else 0. forcerelease
// (KEYS: hash; ARGV: channel): DEL, and PUBLISH if something was deleted.
// The sources are in the scripts directory, embedded with go:embed.
//
// # Waiting
//
// Every release publishes on the lock's channel in the same atomic step that
// deletes it. A Driver keeps one pub/sub connection, opened by the first
// Subscribe and shared by all its waiters: it SUBSCRIBEs to a lock's
// channel while at least one of its waiters waits for that lock (counted per
// channel, UNSUBSCRIBE after the last), and fans messages out through
// internal/notify. Per-lock channels mean a process hears about the locks it
// waits for only. Subscribe returns once the server has confirmed the
// SUBSCRIBE, so no later release goes unheard. If the connection breaks,
// go-redis reconnects and subscribes again, and each channel's waiters are
// signalled when the server confirms it anew, since a release may have been
// missed meanwhile; a connection that stays silent and does not answer a
// ping is replaced. Until then waiters poll. A handoff costs the release's
// round trip (the message leaves the server with the release's reply) and
// the waiter's acquire. A channel is unsubscribed as soon as its last
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
// default 1s) and legacy_unit (ms, s). Every other parameter goes to
// go-redis (ParseURL, ParseFailoverURL, ParseClusterURL: pool_size,
// read_timeout, client_name, ...), and one that neither knows is an error
// naming it. For Sentinel, the hosts are the Sentinels', user and password
// authenticate to the master and replicas, and sentinel_username and
// sentinel_password to the Sentinels. Several IPv6 hosts cannot be written
// in the host part (Go's URL parser rejects them); add them with
// addr=[::1]:26380 parameters. A driver opened from a URL owns its client,
// with go-redis's command retries off (unless max_retries is given) and
// context deadlines applied to network I/O.
//
// # Client settings
//
// For a client you pass to New, set MaxRetries: -1 and
// ContextTimeoutEnabled: true. dlock retries on its own; a client that
// re-sends a command after a network error can run a release twice and
// report the second run's "not held", which dlock takes for a lost lock
// (ClusterClient resends after network errors regardless of MaxRetries, up
// to MaxRedirects times). Without ContextTimeoutEnabled go-redis waits for a
// reply up to ReadTimeout whatever the context says. A *redis.Ring is
// rejected: it shards keys over servers without failover or a shared
// pub/sub (use the quorum package over several drivers instead).
//
// # Limits
//
// Keys are up to 1024 bytes (dlock's portable limit; Redis itself takes
// 512 MB keys, so the prefix does not count against it). Leases are whole
// milliseconds, at least 1ms (Legacy: at least 10ms, or whole seconds with
// legacy_unit=s); a lease with a fraction is rounded down and the granted
// lease reported. Only exclusive locks are implemented natively.
package redisdlock
