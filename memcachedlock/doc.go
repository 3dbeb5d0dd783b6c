// Package memcachedlock is a dlock backend over memcached, through
// github.com/bradfitz/gomemcache.
//
// It implements the two designs of the source material: memcached's add()
// with an expiry takes a lock (add stores an item only if the key is free,
// atomically, and the expiry frees it if the holder dies), and cas()
// (gets followed by a compare-and-swap on the item's CAS unique) makes sure
// that only the owner renews or releases it.
//
// # Efficiency only
//
// memcached is a cache: it evicts items when memory runs short (least
// recently used first), loses everything when it restarts, and does not
// replicate. A lock held in memcached can therefore vanish while its holder
// works, and another client can take it. Use this backend where a lock
// saves work (a cache stampede, a job that should run once but may rarely
// run twice) and never where two holders at once would corrupt data: use a
// consensus store or a database for that. Capabilities says so:
// DurableTokens false, Consensus false. Leases expire on the server's clock
// (ServerClock true).
//
// Give the server enough memory that lock items are not evicted, or run a
// separate instance (or slab class) for locks.
//
// # Several servers
//
// A client with several servers (memcached://a:11211,b:11211) shards keys
// over them: each lock lives on exactly one server, picked by a hash of its
// key, and its fencing counter possibly on another. This spreads load; it
// is not replication, and a server that goes away takes its locks with it
// (and rehashes its keys to the others, where they are free). For a lock
// that survives the loss of a server, use package quorum over several
// independent drivers.
//
// # Protocol
//
//   - Acquire increments the key's fencing counter (incr), then stores the
//     lock item with add and an expiry. The item's value is the token and
//     the owner. Once add succeeds it reads the counter (incr by 0): if
//     another client drew a token in between, which may belong to a holder
//     that came and went between this client's incr and its add, it draws
//     again and writes the new token into its item with cas, so that tokens
//     always increase in the order holders acquire. If add finds the key taken, Acquire reads the item to tell
//     a repeated acquisition by the holder (which renews the lease and
//     returns its token) from another owner's hold.
//   - Refresh reads the item with gets, checks the owner, and writes it back
//     with cas and the new expiry: if anything changed the item in between
//     (it expired and someone else took it), cas fails and nothing changes.
//   - Release does the same with a tombstone: cas replaces the owner's item
//     with an empty one whose expiry is negative, which memcached treats as
//     already expired. The text protocol's delete has no CAS check, so
//     "gets, check, delete" could delete another owner's lock taken between
//     the check and the delete; a cas to an expired item is the same check
//     and removal in one atomic step, and no other owner's item is ever
//     touched. The cost is memory: the tombstone occupies its slot until
//     memcached reclaims it (on the next access or the LRU crawler's pass),
//     as any expired item does. (memcached 1.6's meta protocol has a
//     CAS-checked delete, md with the C flag, but gomemcache speaks the text
//     protocol only, and the cas works on every version.)
//   - If cas fails because the item changed but it still belongs to the
//     owner (a concurrent Refresh of the same lock), the read and cas are
//     done once more; the step stays atomic, and other owners' changes are
//     never overwritten.
//   - ForceRelease deletes the item (delete), whoever holds it.
//
// The text protocol cannot enumerate keys reliably, so the driver does not
// implement driver.Lister (`dlock ls` reports it as unsupported), and it
// has no notifications: waiters poll with backoff.
//
// # Lease rounding
//
// memcached expiry times are whole seconds, and the server's clock ticks
// once a second: an item stored with an expiry of N seconds, f seconds
// after the last tick, expires at the Nth tick from then, so it lives N - f
// seconds: more than N-1 and at most N. The driver therefore stores a lease of TTL with an expiry of
// N = floor(TTL) seconds, so the item never outlives the TTL asked for, and
// reports a lease of N-1 seconds (driver.Result.TTL), the least the item can
// live, from which package dlock computes the holder's validity. MinTTL is
// 2s, so that the reported lease is at least a second: a lock with the
// minimal TTL of 2s is valid for just under a second after it was
// acquired, and renewed every third of that. Lease times are best chosen as
// whole seconds plus one: WithTTL(11*time.Second) gives a 10s validity.
//
// memcached reads an expiry of more than 30 days as an absolute Unix time.
// Converting would tie the lease to the client's clock, so TTLs above 30
// days are rejected instead (Capabilities.MaxTTL; package dlock returns an
// *ArgError).
//
// # Keys
//
// memcached keys are at most 250 bytes of printable ASCII without spaces.
// dlock keys are any UTF-8 text, so the driver encodes them: printable
// ASCII other than '%' stays as it is (the keys are readable with
// memcached's tools) and every other byte becomes %XX. A key whose encoding
// does not fit in 250 bytes with the prefix is replaced by the SHA-256 of
// the key (base64url, after "%h": an escaped key has a '%' only before two
// hexadecimal digits, so the two forms never meet), so any key up to MaxKeyLen (1024 bytes) works; two keys
// collide only if their SHA-256 sums do. The lock item of key K is
// PREFIX "l:" enc(K), its fencing counter PREFIX "t:" enc(K); the default
// PREFIX is "dlock:".
//
// # Fencing tokens
//
// The token comes from a per-key counter item, incremented (incr) by every
// acquisition attempt, so tokens grow with gaps. The counter has no expiry,
// but it is an ordinary item: eviction, restarts and flush_all lose it
// (Release and ForceRelease leave it alone). When the driver finds the counter missing it creates it again with the
// current time in microseconds since 1970 (by the acquiring client's clock)
// as the starting value, not with zero. Tokens after a loss therefore
// usually continue above the ones before it, but this is not guaranteed: a
// client whose clock is behind (or was stepped back), or a key acquired more
// often over its counter's life than microseconds passed, produce tokens that
// were handed out before. The tokens are not safe fencing tokens, and Capabilities reports
// DurableTokens false.
//
// # Contexts
//
// gomemcache has no context support: each call is bounded by the client's
// Timeout (gomemcache's default is 500ms) for each network read and write,
// and runs to it whatever its context does. Package dlock returns to its
// caller promptly all the same: it runs each request on a goroutine of its
// own, and clears what an abandoned Acquire took once it has landed (see
// "Contexts" in package driver). An error after the context ended wraps the
// context's error.
//
// # URL
//
// Importing the package registers the memcached scheme with package dlock:
//
//	memcached://host:port[,host:port...][?prefix=...&timeout=...&connect_timeout=...&max_idle_conns=...]
//
// The port defaults to 11211; timeout is the client's network timeout (a Go
// duration, default 500ms), connect_timeout bounds Open (default 5s, and
// at least timeout) and max_idle_conns its idle connections per server
// (default 64). A driver opened from a URL owns its client.
package memcachedlock
