// Package quorum is a Redlock-style dlock backend: one lock over N
// independent stores, held while a majority of them hold it.
//
// A quorum Driver sends every request to all N nodes in parallel (normally N
// independent Redis servers, see the redlock:// URL below, but any dlock
// drivers will do) and succeeds when a majority, N/2+1, of them agree:
//
//   - Acquire asks every node for the same hold (same key, same owner), all
//     at once. A key that a node refused to this Driver within the last
//     lease is contended: its acquisitions ask the key's lead first, then,
//     if the lead granted it, the others in parallel. The lead is the
//     first node that answers in an order that every client of the same
//     nodes derives from the key and the nodes' addresses (the nodes last
//     known to hang last): contenders meet there, and the one it grants the
//     hold to finds the others free, where contenders asking every node at
//     once could split the votes of a bare majority of live nodes for as
//     long as a fault lasts. A refusal by the lead ends the attempt. The
//     lead costs one round trip more, on contended keys only. The lock
//     is acquired if at least N/2+1 nodes granted it. Otherwise the
//     partial hold is released on every node that granted it before Acquire
//     reports "not acquired", so that a loser of a split vote does not block
//     the next attempt, and on the nodes whose answer was lost or is still
//     to come as soon as they answer (see Nodes that are down or hung).
//   - Refresh needs N/2+1 nodes to renew the lease. When so many nodes report
//     that they no longer hold it that a majority is out of reach, the lock is
//     lost (driver.ErrNotOwner) and the remaining minority is released. A node
//     that lost the hold while a majority kept it (it restarted, or was down
//     when the lock was taken) is given the hold again, so the majority does
//     not erode.
//   - Release goes to every node, and reports driver.ErrNotOwner only when no
//     majority held the lock.
//
// The driver never retries and never sleeps: package dlock retries a failed
// acquisition after a randomised (jittered) backoff, and it renews
// leases in the background. Nodes that implement driver.Notifier (Redis,
// memdlock) wake waiters: a quorum subscription listens to every node and
// fires on a release seen by any of them.
//
// # Nodes that are down or hung
//
// A node that has crashed refuses connections at once; a node that hangs
// (a stopped process, a black-holed network) accepts them and answers
// nothing. The quorum driver treats both alike: a round (the acquisition,
// the fence round, a renewal, a release, a subscription) returns as soon as
// its outcome is decided, a majority having answered one way or so few
// nodes being left that the answer can no longer change. It then waits
// briefly for the nodes still answering (as long again as the decision
// took, at least a few milliseconds), so that every node that is up takes
// part, but not for nodes whose latest call ran out of time: a hung
// minority costs an acquisition as little as a crashed one.
//
// Every call on a node runs under a timeout derived from the lease, as
// Redlock prescribes (small relative to it): a tenth of the TTL, at least
// 100ms and at most 1s (and never more than the TTL). The calls a round did
// not wait for run to that timeout in the background. What they leave is
// cleaned up: the calls of one owner on one node are ordered (a release is
// sent after the acquisitions before it have returned or timed out; a new
// acquisition is not sent at all behind two calls still in flight, and the
// node counts as failed), and a release that a node does not answer is
// retried in the background, with growing pauses, until the node answers or
// a lease has passed, so that an acquisition that reaches a hung node when
// it resumes is released after it. Close waits for the work in the
// background (each call bounded by its timeout) and stops the retries; it
// closes a node that is known to hang first, ending the calls on it (what
// they leave there expires with its lease).
// With a majority hung, calls fail after the node timeout, with an error
// that names the nodes (by address, for the nodes of a redlock:// URL).
//
// # Validity
//
// Redlock's rule is validity = TTL - elapsed - drift: the client may trust
// the lock for the lease, minus the time the acquisition took (the leases
// started somewhere during it), minus a margin for clocks that run at
// different rates (drift = TTL × DriftFactor + a fixed margin, 1% + 2ms by
// default). Package dlock already measures elapsed from before the request
// was sent and subtracts 1% + 2ms of every lease; the quorum driver
// subtracts only what a larger configured drift adds to that (see
// WithDriftFactor), and the shortest lease any node granted is the base.
// The elapsed time covers every round of an acquisition (package dlock
// measures it around the whole Acquire call), while the second round
// (raising counters, or the fence round) has time limits of its own, not
// what the lock round left of the lease. A
// lock whose validity is gone when the majority answered is never handed
// out: package dlock releases it on every node and tries again.
//
// # What it guarantees, and what it does not
//
// With N independent nodes whose clocks run at about the same rate, and
// clients that are not paused for longer than their validity, a quorum lock
// is held by at most one client at a time, and it survives the crash of up
// to (N-1)/2 nodes (one of three, two of five). It tolerates more
// failures than a lock on a single Redis server and does not depend on Redis
// replication, which is asynchronous and can lose a lock on failover.
//
// It is not a correctness guarantee. The source material and Martin
// Kleppmann's analysis of Redlock describe how two clients can both believe
// they hold the lock:
//
//   - A node restarts without persistence. Client 1 holds the lock on A, B
//     and C of five nodes; C crashes and restarts empty; client 2 now takes
//     C, D and E: a majority, while client 1 still holds its own. Run the
//     nodes with persistence (appendfsync always), or keep a restarted node
//     out of service for longer than the longest TTL.
//   - A node's clock jumps forward. Client 1 holds A, B and C; C's clock
//     jumps and expires the lease early; client 2 takes C, D and E. Redlock
//     assumes that clocks run at roughly the right rate; an operator who
//     steps a clock breaks it.
//   - The client pauses. A garbage-collection pause, a stopped VM or a slow
//     network delays client 1 past its validity; its leases expire and
//     client 2 acquires the lock; client 1 wakes up and writes to the
//     protected resource believing it still holds the lock. Checking the
//     validity before the write narrows the window but cannot close it.
//
// A fencing token would close the last hole: the protected resource rejects
// writes carrying a token older than one it has seen. See Fencing tokens for
// what the quorum's tokens guarantee; they are NOT safe fencing tokens, and
// Capabilities reports DurableTokens false and Consensus false.
//
// # Fencing tokens
//
// Every node counts the acquisitions of a key (redisdlock: the INCR counter
// that makes its lock tokens), and each grant returns the node's new count.
// The counters do not advance in step: a node that granted the lock to the
// loser of a split vote has counted one more than the others, a node that
// was down has counted fewer, a node that restarted without persistence
// starts again from zero. So the largest token of one majority can be
// smaller than the largest of the previous holder's, and simply taking the
// largest is not monotonic.
//
// When every node is a TokenRaiser (the Redis nodes of a redlock:// URL
// are), Acquire takes the token from its one round of lock requests: the
// token t is the largest count among the nodes that granted the lock, and
// before Acquire returns, at least N - N/2 nodes (two of three, three of
// five: enough that every majority includes one of them) count t or more.
// The nodes that granted the lock with t count it already; if they are
// too few, Acquire raises the counters of the others that granted it to t
// (RaiseToken, while it holds the lock there) in a second round. With the
// counters in step, which is the usual case (every node that is up grants
// every holder), that round is not needed and the token costs nothing. It
// raises every node that lags, not only enough of them, so that the
// counters are in step again for the next holder: a node that was down or
// restarted empty catches up the first time it grants the lock again.
//
// Why the token grows from holder to holder: let holder A take token t, and
// B take the lock after A's hold ended. A set Q of at least N - N/2 nodes
// counted t or more while A held the lock on them, and B's majority and Q
// share a node j (a majority and Q together have more than N members). B's
// grant on j came after A's hold there, since the node holds the lock for
// one owner at a time: so after j counted t, and j gives B at least t+1,
// and B's token, the largest of its majority's, is larger than t. A
// holder whose lease on j expired before the raise reached j has no
// validity left by the time Acquire returns (the lease began after the
// request was sent, and package dlock counts the validity from before it),
// so its token is never handed out. Losers' counts only make counters
// larger. This holds as long as nodes keep their counters and hold the
// lock for one owner at a time, the assumptions of the lock itself: a node
// of Q that restarts empty, or whose clock jumps, can break it, as it can
// break the lock. In the usual case Q is every node that is up, so one
// node restarting empty does not matter (a majority of the others still
// meets Q). If fewer than N - N/2 nodes can be made to count t, Acquire
// fails (the caller releases and tries again).
//
// Over other nodes, Acquire takes the token in a second round on every
// acquisition, after the majority is won: it acquires a fence key that
// only holders of the lock take, on every node at once, and returns the
// largest fence token. Only one client at a time holds the lock, so the
// fence counters of the nodes that are up advance together; the token goes
// backwards when the node with the largest counter is unreachable after
// others fell behind, or when counters are lost in a restart without
// persistence.
//
// WithoutFenceRound (fence=off in the URL) skips both second rounds, for
// callers that ignore the token: the token is then the largest lock token,
// which goes backwards even without failures.
//
// # When to use it
//
// Use a quorum lock for efficiency: to keep two workers from doing the same
// job at the same time most of the time, where an occasional duplicate is
// harmless, with higher availability than a lock on one Redis server. Do not
// use it for correctness, where two holders at once corrupt data: use a
// consensus store (etcd, ZooKeeper) or a database (package sqldlock) with
// fencing tokens checked by the protected resource.
//
// Prefer an odd number of nodes: N = 4 tolerates one failure, as N = 3
// does, with one more server to run (New logs a warning for an even N).
// Each node must be a separate store: two drivers over one Redis server
// count twice and defeat the majority (New rejects the same driver value
// given twice, but cannot tell two drivers of one server apart).
//
// # URL
//
// Importing the package registers the redlock and redlocks schemes with
// package dlock:
//
//	redlock://host:port,host:port,host:port[?prefix=...]
//
// opens one Redis driver (package redisdlock) per host, each with a go-redis
// client of its own, and needs a majority of the servers to answer a PING
// (it does not wait for the others once a majority has answered).
// The parameters prefix and mode are redisdlock's, for every node;
// drift_factor (a number), drift_margin (a duration such as 2ms) and fence
// (on or off) are the quorum options; any other parameter goes to go-redis
// for every node (dial_timeout, read_timeout, pool_size, ...), as do
// credentials before the hosts and a database number in the path. The
// nodes send their scripts as commands of their own, not auto-pipelined
// (redisdlock.WithAutoPipeline(false)): go-redis ends a call on a hung
// server at its node timeout only then. Give that option to redisdlock
// drivers you pass to New, too. The
// quorum Driver owns the nodes it is given or opens: its Close closes them.
//
// redlocks:// is redlock:// over TLS, as rediss:// is redis:// (package
// redisdlock): every node verifies its server's certificate against the
// system's roots and the node's host. The TLS parameters of redisdlock's
// URLs apply to every node: tls=true (TLS on redlock:// too), cacert (the
// authorities, a PEM file), cert and key (a client certificate and its
// key), servername (the name every server's certificate must carry instead
// of its host):
//
//	redlocks://:password@redis1:6380,redis2:6380,redis3:6380?cacert=/etc/dlock/ca.pem
//
// A node whose certificate does not verify counts as down; when a majority
// does not verify, the open fails at once with the x509 errors.
package quorum
