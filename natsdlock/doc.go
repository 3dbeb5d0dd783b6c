// Package natsdlock is a dlock backend over a NATS JetStream key-value
// bucket, through the official client, github.com/nats-io/nats.go and its
// jetstream package. It needs nats-server 2.11 or later (per-message TTLs)
// with JetStream enabled.
//
// A bucket is a JetStream stream; on a JetStream cluster its replicas
// (WithReplicas, replicas= in the URL: use 3 or 5) agree on every write
// through Raft, and a write is acknowledged once a majority has it. The
// driver builds on that: Capabilities reports Consensus, DurableTokens and
// ServerClock, and PortableHolds (a hold is an entry of a record, with its
// owner and lease, served by any driver on the bucket). It implements
// exclusive locks, shared (read-write) locks with writer preference and
// downgrade, and semaphores, on one FIFO wait queue per key
// (Capabilities.FIFO).
//
// # Records
//
// All of a dlock key K is one bucket key B = base64url(K) (key-value keys
// allow only letters, digits and -/_=.), whose value is JSON: the holders,
// each with its owner, mode, token, Info and the end of its lease; the
// waiters, each with its owner, mode and the end of its queue entry's
// lease; the owners whose queue entry ended (kept a minute, so that their
// next Acquire learns that they lost their place); and a semaphore's limit.
// The bucket keeps one revision per key (History 1). Every operation reads
// the record and writes it back changed, made only if the key's latest
// sequence is still the one read (a compare-and-set: the
// Nats-Expected-Last-Subject-Sequence header, 0 for a key without a
// record): a conflict is another write of the key that succeeded, and
// reads again, up to 32 times.
//
//   - Acquire admits the owner by the rules that dlock's other drivers
//     follow too: readers share, a waiting writer holds new
//     readers back, a semaphore admits Limit holders, and a waiter ahead
//     in the queue comes first. Otherwise, with Request.Queue, it adds the
//     owner to the queue, or renews its entry once half the entry's lease
//     has passed (every write wakes the key's waiters: waiters that each
//     wrote on waking would keep waking each other). A key without a record
//     is created in one write, without a read. A repeated Acquire by a
//     holder renews, as Refresh does.
//   - Refresh sets the owner's lease again; Release removes the owner's
//     hold and queue entry, and purges the key once nothing is left in its
//     record. The purge leaves a marker with a TTL of one second (the
//     bucket's LimitMarkerTTL), so nothing of the key stays on the server
//     after that.
//   - Every write carries the longest lease in the record as the message's
//     TTL (Nats-TTL): the server removes the record, on its own clock, when
//     the last lease in it has ended.
//   - Every read of a record asks the stream's leader (STREAM.MSG.GET),
//     which has every acknowledged write. The key-value API's direct gets,
//     which a replica may answer on a cluster, could show a Release an
//     older record and make it miss the hold it should end.
//   - The driver creates the bucket if it is missing (file storage, one
//     revision per key, LimitMarkerTTL, which also allows per-message TTLs).
//     An existing bucket without it is refused with an error that
//     Permanent reports.
//
// One record per key, rather than one bucket key per holder under the
// key's prefix (B.OWNER, each with its holder's lease as its TTL): a write
// guarded by the last sequence of the wildcard subject B.>
// (Nats-Expected-Last-Subject-Sequence-Subject) would be a compare-and-set
// over the key's holders, but reading them back takes a request per
// holder from the stream's leader (or a batched direct get, which a
// lagging replica may answer), and a downgrade or a waiter's admission
// changes two entries, which would be two writes. A record makes every
// decision on one consistent view of the key in one read and one write;
// the price is that the writes of one key go one at a time. A holder
// costs about 100 bytes of the record.
//
// # Leases
//
// The server counts a TTL in whole seconds, from one second: the driver
// asks for the whole seconds of the request's TTL and reports them as the
// lease it got (Capabilities.MinTTL is 1s, TTLResolution 1s). Each lease
// in a record ends on the server's clock: the entry that a write sets
// carries its TTL, and its lease ends that long after the record's
// timestamp, which the stream's leader sets when it stores the message;
// once read, the end is kept in the record as a time of the server's clock,
// so another holder's later write of the record moves no lease but its
// own. Whether a lease has ended is judged against the time of the
// stream's leader, which every read asks for along with the record (the
// timestamp of its stream information): a lease that had ended by then has
// ended for every write that follows, so a holder that stopped renewing
// stops counting although others keep rewriting the record. After a
// leader change, the new leader's clock rules. Keep the servers' clocks
// synchronised (NTP) to well under the drift margin of a lease. A hold
// outlives the driver and its connection: it ends at its TTL unless a
// driver refreshes it, so a hold ID (Lock.Detach, dlock hold) can be
// resumed from anywhere.
//
// # Fencing tokens
//
// A hold's token is the stream sequence of the message that added it to
// the key's record (that record's revision); the records written after it
// carry it in their value. A stream's sequence numbers only grow, across
// every key of the bucket: each message gets the next one, and purges and
// expiries remove messages without giving their numbers back. So every Acquire gets a token
// greater than that of every earlier hold of the key, whoever held it.
// This holds across leader changes, because a sequence is assigned by
// the leader in the order of the Raft log and a message is acknowledged
// only once a majority has stored it, so every later leader knows it;
// and across restarts, because file storage keeps the stream's last
// sequence even when it holds no message. It does not hold if the bucket
// is deleted and created again (its sequences start again at 1), nor on a
// single server whose disk loses writes it had acknowledged (JetStream
// syncs to disk every two minutes by default; a process crash loses
// nothing, a power loss may): use a replicated bucket for correctness
// locks.
//
// # Waiting
//
// A waiter subscribes to the subject of the key's record ($KV.BUCKET.B):
// every write of the key, a release's purge included, is published there,
// so a release wakes the waiters at once, at the cost of an interest on
// the server (not a consumer). So does every other write of the key (a
// refresh, a waiter's arrival): the woken waiters read the record again
// and find they must wait on. A lease that ends publishes nothing: package
// dlock tries again when the first lease that blocks the waiter, as the
// record tells, should have ended.
//
// # URL
//
// Importing the package registers the nats scheme with package dlock:
//
//	nats://[user:password@]host:port[,host:port...][/BUCKET][?replicas=3&creds=FILE&nkey=FILE&token=T&connect_timeout=5s]
//
// The port defaults to 4222 and the bucket to "dlock". replicas is the
// number of replicas of a bucket the driver creates. discovery=false keeps
// the client to the servers the URL lists (it otherwise also connects to
// the servers a cluster advertises, which a proxy or NAT may not reach).
// creds is a
// credentials file (a user JWT and its NKEY seed, as nsc writes it), nkey
// a file holding an NKEY seed; both sign the server's challenge and send
// no secret. user:password and token= are sent to the server as they are:
// only over TLS, unless the URL says insecure_auth=true. The TLS
// parameters (tls=true, cacert=, cert=, key=, servername=) are those of
// the other stores. Passwords and tokens never appear in errors: URLs in
// messages are redacted. A server without JetStream fails the Open with an
// error wrapping jetstream.ErrJetStreamNotEnabled, which dlock reports as
// permanent.
package natsdlock
