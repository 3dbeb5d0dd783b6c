// Package zkdlock is a dlock backend over Apache ZooKeeper (3.5 or later),
// through github.com/go-zookeeper/zk.
//
// It implements the ZooKeeper lock recipes, as Curator's InterProcessMutex
// and InterProcessReadWriteLock do: every contender for a key creates an
// ephemeral sequential node under the key's znode, the node with the
// lowest sequence number holds the lock, and every other contender waits
// for the node just ahead of its own to go. Read-write locks and
// semaphores use the same queue (see Modes). Waiters acquire in the order
// they first asked (Capabilities.FIFO), and a release wakes only the
// waiters it may let in: one writer, or the readers behind a writer, or
// the permits within reach.
//
// # Modes
//
// The driver implements every mode natively (Capabilities.Modes: Exclusive,
// Shared, Semaphore). A contender's node name says its mode (see Nodes),
// and which nodes hold the key follows from the queue alone:
//
//   - An Exclusive node (a mutex, or the write side of a read-write lock)
//     holds when it is the first. It waits for, and watches, the node just
//     ahead of it.
//   - A Shared node holds when every node ahead of it is a Shared node,
//     except that the first may be an Exclusive node that has been
//     downgraded. Readers do not wait for readers, but no reader passes a
//     writer, holding or queued: this is the writer preference of the
//     driver contract, and a new reader's TryLock fails while a writer
//     waits. A waiting reader watches the nearest node ahead of it that is
//     not a reader; it reads that node's data only when it is the first
//     (the only place a downgraded writer can be), and then its watch
//     reports the downgrade as well as the deletion.
//   - A Semaphore node of N holds when fewer than N nodes are ahead of it,
//     all of them permits of N: the semaphore is fair. A waiting permit
//     watches the N nodes just ahead of it, whose deletions are the only
//     ones that can let it in (a deletion further ahead leaves those N the
//     same); with N over 16 it watches the key's children instead. A
//     release thus wakes at most N waiters, and with N = 1 only the next.
//
// A node that holds keeps holding until it is deleted (nodes never come
// ahead of it, and a downgrade is not undone), so a contender's decision
// never goes stale, and every node, of every mode, gets a token of its own:
// its creation zxid.
//
// Downgrade (a Shared Acquire by the owner of a held Exclusive node) is one
// setData of the node, conditional on its data version, that marks its data
// as downgraded ("shared:" in front): the node keeps its place, its session
// and its creation zxid, hence its token; the request proves the session
// alive and the lease is renewed. The readers behind it are told by their
// watch of its data. A repeated downgrade changes nothing, and one whose
// reply was lost is found done when asked again.
//
// The key's first node says what the key is in use as. A request that
// cannot share it (a Semaphore on a read-write lock or the other way round,
// a Semaphore with another limit) deletes its node and returns an error
// wrapping driver.ErrModeMismatch; so does an Exclusive Acquire by an owner
// that holds the key Shared (an upgrade), which changes nothing. In a race
// between incompatible requests both may be refused, and a node of the
// other kind that is still in the queue holds back every node behind it
// until it goes: a semaphore hold never coexists with a read or write hold,
// nor with a permit of another limit.
//
// # Sessions
//
// ZooKeeper ties ephemeral nodes to a client session, which the server
// ends when it has not heard from the client for the session timeout: it
// then deletes the session's nodes. A per-lock session would cost round
// trips, so each Driver keeps one session (its connection's), with a
// timeout S asked for with WithSessionTTL (15s by default) and clamped by
// the server to its minSessionTimeout and maxSessionTimeout. The client
// keeps the session alive in the background, and every hold and queue
// entry of the driver is a node of that session. Then:
//
//   - A process that dies, pauses or is cut off from the servers loses all
//     its holds when its session expires, S after its last contact, on the
//     server's clock.
//   - A live process that stops refreshing a lock (dlock.WithoutRenewal, or
//     a reservation with a business TTL) still loses it after the
//     request's TTL: the driver keeps each hold's deadline on its own clock
//     and deletes the node when the deadline passes. Refresh moves the
//     deadline, as does a repeated Acquire for a queue entry.
//   - The lease the driver reports (driver.Result.TTL) is the smaller of
//     the request's TTL and the session timeout the server granted, which
//     the driver learns from the client's log of the session set-up
//     (go-zookeeper exports it nowhere else); an Acquire fails with an
//     error if it is unknown. The lease is safe: every Acquire and Refresh
//     makes a request of the session after the call started, which resets
//     the session's expiry on the server to at least the call's start plus
//     S, and checks that the hold's node belongs to that session. A
//     Refresh therefore needs a round trip: a holder cut off from the
//     servers cannot renew, and its lock reports the loss when its
//     validity ends, before the server can expire the session and let
//     another contender in.
//   - When the session expires (the client learns so when it reconnects),
//     every hold and queue entry of it is lost: Refresh and Release report
//     driver.ErrNotOwner, and so does the owner's next queued Acquire,
//     rather than queueing it again at the back (package dlock then queues
//     the waiter again as a new owner). The client sets up a new session by
//     itself, and new acquisitions use it.
//
// Closing the driver's connection (Conn().Close()) ends its session too:
// Refresh and Release then report driver.ErrNotOwner, rather than the
// client's "connection closed". A request that fails because the
// connection dropped in passing, the session perhaps alive, keeps its
// error.
//
// Holds are tied to the session of the driver that made them. Another
// driver (another session) asked about the same owner recognises the hold
// by its node's name, but cannot renew that session: its Refresh only
// confirms that the node is still there, and it keeps no deadline for it.
//
// ReleaseAfter hands the lock to the driver's deadline, which lasts only as
// long as the process: if the process exits, the server frees the lock
// when the session expires.
//
// # Nodes
//
// The key K lives in the znode PREFIX/esc(K) (PREFIX is "/dlock" unless
// WithPrefix says otherwise). esc maps keys injectively to znode names:
// ASCII letters, digits and "-_.:,=+@~" stand for themselves and every
// other byte, '/' and '%' among them, becomes %XX; the names "." and ".."
// become "%2E" and "%2E%2E". The key's znode is a container node, which the
// server deletes on its own some time after its last child goes, should
// the driver's deletion not happen (a session that expired, a connection
// lost at the wrong moment, a process that died).
//
// The key's znode lingers: it stays for a short idle period (one second
// unless WithParentLinger says otherwise) after the driver's last node
// under it has gone, so that a key locked again and again is not deleted
// and created anew each time. An Acquire of the key by the driver starts
// the period anew. When it has passed, the driver deletes the key's znode,
// a deletion that ZooKeeper refuses while any contender, of any driver, is
// queued there, and Close deletes the lingering znodes of the driver at
// once. An empty key's znode therefore remains for at most the linger
// period after a release, while its driver is open (longer only if the
// deletion fails, until the server's container clean-up). A contender that
// finds the key's znode gone when it creates its node creates it again.
//
// A contender's node is PREFIX/esc(K)/_c_<ID>-<KIND><SEQ>: ID is
// dlock.OwnerID of the owner (32 hexadecimal digits), the "_c_<ID>-" prefix
// marks it as the owner's, as Curator's protected nodes are, SEQ is the
// ten-digit sequence number ZooKeeper appends, one sequence for all the
// key's nodes whatever their kind, and KIND is the mode, named for the
// Curator recipe of the driver's Layout (see Curator):
//
//	Layout                Exclusive   Shared       Semaphore of N
//	CuratorMutex          lock-       read-lock-   sem-N-lock-
//	CuratorReadWriteLock  __WRIT__    __READ__     sem-N-__WRIT__
//
// Its data is the owner, prefixed with its length ("LEN:OWNER"), followed
// by the holder's Info, with "shared:" in front once a write node has been
// downgraded. The data is at most 960 KiB: ZooKeeper drops the connection
// of a request over its jute.maxbuffer (1 MiB by default), so Acquire
// refuses larger data (package dlock caps Info far lower) with an error
// wrapping driver.ErrUnsupported.
//
// Every other child of the key's znode whose name ends in ten digits (a
// sequential node) is a contender too, of another client: the driver
// cannot tell what it is, and never takes it for absent. It is a Shared
// contender if its name ends in "__READ__<SEQ>" (Curator's reader) or
// "__rlock__<SEQ>" (kazoo's ReadLock) and an Exclusive one otherwise
// (Curator's mutex or writer, kazoo's Lock and WriteLock, the plain
// recipe's "lock-<SEQ>" or "<GUID>-lock-<SEQ>", anything else), which
// holds the key when it is the first, and blocks every node behind it
// until it goes; a waiter behind it watches it as it would a node of the
// driver, and wakes when it is deleted. List reports it with its name as
// the owner and as the Info (what `dlock ls` shows), and ForceRelease
// deletes it. Children without a sequence number are not contenders.
//
// # Foreign clients
//
// A recipe that would not see the driver's nodes as contenders would take
// the key while the driver holds it. Where the driver can tell such a
// recipe from the key's children, it refuses the key: Acquire (and so
// TryLock, and a waiting Lock when it next looks at the queue) fails with
// an error that Permanent reports permanent, so that package dlock's error
// wraps dlock.ErrPermanent, and leaves no node behind. It refuses
//
//   - a key's znode with a child "locks" or "leases": Curator's
//     InterProcessSemaphoreV2 and InterProcessSemaphoreMutex (a semaphore
//     of one lease) keep their nodes there, and count only those;
//   - in the CuratorMutex layout, a node of Curator's
//     InterProcessReadWriteLock ("__READ__<SEQ>", "__WRIT__<SEQ>");
//   - in the CuratorReadWriteLock layout, a node of Curator's
//     InterProcessMutex ("lock-<SEQ>").
//
// The refusal protects only the driver's side: these recipes do not count
// the driver's nodes, so one that comes while the driver holds the key
// takes it too. The driver's holds then end at their next renewal (a third
// of the lease), which reads the key's children as an acquisition does:
// their contexts end with dlock.ErrLost and their nodes go. Do not use
// these recipes on the driver's keys.
//
// kazoo's Lock and WriteLock count only the nodes that match their own
// names ("__lock__", "__rlock__") and the patterns given in
// extra_lock_patterns: give extra_lock_patterns=("lock-",) for a driver in
// the CuratorMutex layout (every node of the driver's then ends in
// "lock-<SEQ>", and kazoo sorts by the sequence number), and both sides
// exclude each other. Without it, kazoo takes the key while the driver
// holds it (the driver still waits for kazoo), and the driver cannot tell.
// The driver counts kazoo's ReadLock nodes as readers, but kazoo's
// ReadLock does not exclude the driver's writers: without the patterns it
// ignores them, and with them it waits for every matching node, even one
// queued behind it (kazoo 2.8, python-zk/kazoo#649), which deadlocks with
// a waiting writer of the driver. Use kazoo's Lock or WriteLock with the
// patterns on the driver's keys.
//
// # Curator
//
// A key's znode is the lock path of Curator's recipes: a Curator client
// locking the path P and the driver locking the key K exclude each other
// when P is PREFIX/esc(K), for instance P = /app/locks/orders with
// WithPrefix("/app/locks") and the key "orders". Both directions hold: the
// driver waits for Curator's nodes as described above, and Curator sees the
// driver's nodes as contenders in their sequence order, because Curator
// sorts a lock's children by what follows the last occurrence of its lock
// name in their names, and the driver's names end in that lock name and
// the sequence number:
//
//   - InterProcessMutex (lock name "lock-"): use the default layout,
//     CuratorMutex. Every node of the driver, of every mode, is then a
//     mutex contender to Curator.
//   - InterProcessReadWriteLock ("__READ__" and "__WRIT__"): use
//     WithCuratorLayout(CuratorReadWriteLock) (curator=rwlock in URLs).
//     The driver's Shared nodes are then Curator readers and its other
//     nodes Curator writers: a Curator reader lets the driver's readers in
//     and keeps its writers out, a Curator writer keeps both out, and the
//     other way round. A downgraded write node keeps its name, so Curator's
//     readers keep waiting for it until it goes.
//
// Limits:
//
//   - A name cannot end in both lock names, so one layout serves one of
//     Curator's recipes: a driver in the CuratorMutex layout is no
//     contender to Curator's read-write lock (Curator's writer sorts the
//     driver's nodes after its own), and one in the CuratorReadWriteLock
//     layout none to Curator's mutex. The driver itself reads every layout:
//     drivers of both layouts exclude each other. Curator's mutex and its
//     read-write lock do not exclude each other either.
//   - InterProcessSemaphoreV2 and InterProcessSemaphoreMutex are not
//     mapped: they keep a mutex under P/locks and the permits as
//     P/leases/lease-<SEQ> nodes, counted while that mutex is held, with the
//     number of permits known only to their clients, whereas the driver's
//     semaphore is one queue of permit nodes directly under the key's
//     znode. The driver refuses a key with those children (see Foreign
//     clients); Curator's semaphores do not see the driver's nodes.
//   - Revocation, Curator's lock data and its reentrancy are Curator's
//     own: the driver never writes "__REVOKE__" to a node, and a Curator
//     reader that holds the write lock itself (its non-sequential
//     "__READ__" node) is read like any reader.
//
// Earlier versions of the driver named Shared nodes "read-<SEQ>" and
// permits "sem-N-<SEQ>"; the driver still reads those names, so a key's
// nodes made before an upgrade keep their place. The earlier versions,
// though, do not read the new names ("read-lock-", "__READ__",
// "sem-N-lock-", "sem-N-__WRIT__", "__WRIT__") and ignore such nodes: an
// earlier version's writer can take a key that a newer version holds
// Shared or as a semaphore. Exclusive nodes of the default layout keep
// their name, so keys used only Exclusive can be upgraded one process at a
// time; keys used Shared or as semaphores need every process that locks
// them upgraded before the newer version takes them in those modes.
//
// # Requests
//
//   - Acquire creates the node (one round trip; two more if the key's
//     znode has to be created first), then lists the key's nodes and reads
//     its own node's stat, two requests in flight together (one round
//     trip). An uncontended lock of a key locked within the linger period
//     thus costs two round trips, in every mode. If the node holds (see
//     Modes), the lock is held; a reader behind a writer at the head of
//     the queue reads that writer's data first (one more round trip). If
//     not, and the request asks to queue (driver.Request.Queue), the node
//     stays as the queue entry; otherwise it is deleted before Acquire
//     returns. A repeated Acquire by an owner with a node lists and reads
//     again, and reports the existing token if the node now holds. A
//     downgrade of a held write node is one setData (one round trip).
//   - Refresh reads the node's stat (one round trip): it must be there,
//     with the same creation zxid, in the driver's current session.
//   - Release deletes the node (one round trip); the key's znode lingers
//     and goes later, in the background. With a linger period of zero the
//     key's znode goes with the last node: when the owner was alone at its
//     last look, both go in one multi-operation (one round trip), which
//     fails as a whole if others have come since; otherwise, and then, the
//     node is deleted alone and the key's znode after it (two round trips),
//     a deletion that fails harmlessly while other nodes remain, so that
//     the last node to go takes the key's znode with it.
//   - Subscribe (driver.Notifier) watches what keeps the owner's node from
//     holding (see Modes): for a writer the node just ahead of its own
//     (for an owner without a node, the first node). No herd of waiters
//     wakes on a release. When a watched node changes, the subscription
//     signals and moves on to what blocks the owner now.
//   - List (driver.Lister) reads the nodes of each key's queue that hold
//     it (every reader, every permit); waiters are not listed. A node is
//     listed as soon as the queue lets it hold, perhaps a moment before its
//     contender learns so. Holder.TTL is the session timeout the driver
//     was granted: an upper bound of how long a hold outlives its holder.
//   - ForceRelease (driver.ForceReleaser) deletes every node of the key,
//     and the key's znode, and reports how many of them held it.
//
// # Lost replies
//
// A Create whose reply is lost with the connection may have created the
// node. Acquire then lists the key's nodes and looks for one with the
// owner's name before anything else, and so do Release and Refresh when
// the driver has no record of the owner's node (package dlock releases
// after every Acquire that failed). A repeated Acquire that finds an older
// node of the owner keeps that one, with its place in the queue, and
// deletes the newer. A deletion that fails for want of a connection is
// tried again every second until the node is gone or its session has
// ended.
//
// # Fencing tokens
//
// The token is the holder node's creation zxid (Stat.Czxid), which a
// downgrade keeps: ZooKeeper's
// transaction IDs grow with every change of the ensemble's state and are
// never reused, across restarts and leader changes, so tokens are durable
// (Capabilities.DurableTokens), strictly increasing per key, and they stay
// so after the node is deleted. They are not dense.
//
// # Guarantees
//
// ZooKeeper replicates every change through a majority of the ensemble
// before it applies it (Capabilities.Consensus), and applies the changes
// of one client in the order the client sent them. Reads, though, are
// served by the server the client is connected to, which may lag behind
// the leader. The driver's decision does not depend on fresh reads of
// other clients' changes: Acquire lists the key's nodes after its own
// node's creation, in the same session, so the listing includes every
// node created before its own (those are the only ones that can come
// first); a lagging server can only show a node that has already gone,
// or a write node not yet marked downgraded, either of which makes the
// contender wait for a change it is then told of. Every rule errs the same
// way: a stale view only delays a contender.
//
// The client's clock is used only to measure durations: the session's
// expiry runs on the server's clock, and the lease reported to package
// dlock starts before the request that proved the session alive was sent.
//
// # Failover
//
// go-zookeeper notices a server that stops answering (a hung process, a
// network that drops its packets) only when its receive timeout, two
// thirds of S, passes without a byte from it, and waits for ten times that
// for a server it has just connected to; a hung leader keeps the clients
// connected to it waiting that long, and the followers, which drop their
// clients while they elect a new leader, may send them to it. The driver
// therefore closes a connection that has waited two seconds for any reply
// (to a request, a ping or the session's set-up): the client moves to the
// next server, where the session carries on, and the requests in flight
// fail as on any lost connection (see "Lost replies"). A hung leader then
// costs about what a crashed one does: the election, and the leases of
// the holds whose holder could not reach the servers meanwhile.
//
// # Contexts
//
// go-zookeeper's calls take no context. A call waits for the connection's
// session until its context ends, and then runs its requests to their
// reply: a request sent on a connection that goes silent ends when the
// driver drops the connection after two seconds without an answer (see
// "Failover"), or at the client's receive timeout if that comes first. Its
// error then wraps the context's. Package dlock returns to its caller
// promptly on its own and cleans up after an Acquire its caller gave up on
// (see "Contexts" in package driver). A create whose reply was lost may
// still have made a node: Acquire and Release find it by its owner's name.
// Close gives the calls in flight up to two seconds to finish before it
// closes the connection, which ends the rest, and waits for them.
//
// # URL
//
// Importing the package registers the zk scheme with package dlock:
//
//	zk://[user:password@]host:port[,host:port...][/chroot][?session=15s&linger=1s&prefix=/dlock&curator=mutex&acl=creator&connect_timeout=5s]
//
// The port defaults to 2181. A chroot path is put in front of the prefix.
// session is the session timeout to ask for (a Go duration), linger the
// idle period of the keys' znodes (a Go duration; 0 deletes them with the
// last node), prefix the znode under which locks are kept, and curator
// the Layout ("mutex", the default, or "rwlock"). Open waits
// until a server has answered, at most connect_timeout (a Go duration, 5s
// by default). The TLS and authentication parameters follow.
//
// # TLS
//
// ZooKeeper serves TLS on its secureClientPort when it runs the Netty
// connection factory (serverCnxnFactory=
// org.apache.zookeeper.server.NettyServerCnxnFactory, ssl.keyStore.*,
// ssl.trustStore.*; ZooKeeper 3.5 and later, PEM stores from 3.6).
// go-zookeeper has no TLS of its own: the driver dials through crypto/tls
// (WithDialer; tls.Dialer in a program's own code). These parameters make
// a URL connect over TLS, which verifies the servers' certificates:
//
//   - cacert=FILE: the PEM certificates of the authorities the servers'
//     certificates must chain to, instead of the system's roots.
//   - cert=FILE and key=FILE: a client certificate and its private key
//     (PEM), for servers with ssl.clientAuth=need. ZooKeeper also
//     authenticates the session as the certificate's subject (scheme
//     x509, "CN=...").
//   - servername=NAME: the name the servers' certificates must carry, when
//     it is not the host of the URL.
//   - tls=true: TLS with the system's roots and no other parameter.
//
// The URL names the secure port. A server whose certificate does not
// verify, or that rejects the client's certificate, fails the Open at once
// with the reason ("the server's certificate is not trusted ... x509:
// certificate signed by unknown authority", "the server rejected the
// client certificate ... bad certificate"): the Open completes a TLS
// handshake with the servers first, where go-zookeeper would dial again
// and again until the context ended. Tested against Debian's ZooKeeper
// 3.8 with a PEM key store and ssl.clientAuth=need.
//
// # Authentication
//
// user:password in the URL adds digest credentials to the session
// (WithAuth("digest", []byte("user:password"))). go-zookeeper sends them
// again, before any other request, on every new connection, a new session
// after an expiry included; the driver's calls wait until the server has
// taken them. Digest credentials travel as they are, so the password is
// sent only over TLS: without TLS parameters the Open fails with a
// *dlock.ArgError unless the URL has insecure_auth=true, which allows it
// in clear text. A password never appears in errors: URLs in messages are
// redacted. The digest scheme's server takes any credentials; wrong ones
// show as a refusal of the znodes' ACLs, at once: zk.ErrNoAuth ("zk: not
// authenticated: the znode's ACL does not admit this client's
// credentials").
//
// acl is the ACL of the znodes the driver creates (WithACL), the prefix
// and its missing ancestors included:
//
//   - creator: every permission to the session's identities and to no one
//     else (zk.AuthACL(zk.PermAll), ZooKeeper's CREATOR_ALL_ACL): drivers
//     with other credentials, or none, get zk.ErrNoAuth. The default with
//     user:password. It is also allowed with a client certificate alone
//     (the certificate's subject then owns the znodes); all the processes
//     sharing locks need the same identity. Over TLS with a client
//     certificate the certificate's subject is one of the session's
//     identities: the znodes then admit whoever presents a certificate
//     with that subject too, whatever their password.
//   - open: every permission to anyone (zk.WorldACL(zk.PermAll)). The
//     default without user:password, as in Curator without an
//     ACLProvider.
//
// ZooKeeper's ACLs do not inherit: a znode with the open ACL under a
// protected one is open to anyone who names it. The driver needs every
// permission but ADMIN on the prefix znode (it creates and deletes the
// keys' znodes under it) when that exists already; a prefix protected for
// the URL's user with the creator ACL, as in
//
//	zk://locker:s3cret@zk1:2281?prefix=/app/locks&cacert=/etc/zk/ca.pem
//
// keeps every key of the application to that user. Curator clients of the
// same locks need the same credentials and an ACLProvider to match.
//
// # Logging
//
// go-zookeeper logs through the standard logger by default; the driver
// sends its lines to the slog logger given with WithLogger, at debug level,
// and drops them otherwise.
package zkdlock
