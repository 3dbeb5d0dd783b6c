// Package natsdlock is a dlock backend over a NATS JetStream key-value
// bucket, through the official client, github.com/nats-io/nats.go and its
// jetstream package. It needs nats-server 2.11 or later (per-message TTLs)
// with JetStream enabled.
//
// A bucket is a JetStream stream; on a JetStream cluster its replicas
// (WithReplicas, replicas= in the URL: use 3 or 5) agree on every write
// through Raft, and a write is acknowledged once a majority has it. The
// driver builds on that: Capabilities reports Consensus, DurableTokens and
// ServerClock, and PortableHolds (a hold is a record with its owner and
// TTL, served by any driver on the bucket). It implements exclusive locks;
// shared locks, semaphores and a FIFO queue are not implemented yet, and
// are refused with driver.ErrUnsupported.
//
// # Records
//
// The hold on the dlock key K is the bucket key B = base64url(K) (key-value
// keys allow only letters, digits and -/_=.), whose value is JSON holding
// the owner, the holder's Info, the lease in seconds and, once the hold has
// been refreshed, its token. The bucket keeps one revision per key
// (History 1).
//
//   - Acquire publishes the record with the header that makes the server
//     store it only if the key has no record (Nats-Expected-Last-Subject-
//     Sequence: 0), or only the marker of an ended hold (the marker's
//     sequence), and with the lease as the message's TTL (Nats-TTL): the
//     server removes the record when it runs out, on its own clock. A
//     repeated Acquire by the holder renews, as Refresh does.
//   - Refresh reads the record, checks the owner and publishes it again
//     with the new TTL, made only if the key's latest sequence is still the
//     one read (a compare-and-set: a conflict with another write of the
//     same hold reads again, up to 32 times).
//   - Release reads the record, checks the owner and purges the key made
//     only if its latest sequence is still the one read. The purge leaves a
//     marker with a TTL of one second (the bucket's LimitMarkerTTL), so
//     nothing of the hold stays on the server after that.
//   - Every read of a record asks the stream's leader (STREAM.MSG.GET),
//     which has every acknowledged write. The key-value API's direct gets,
//     which a replica may answer on a cluster, could show a Release an
//     older record and make it miss the hold it should end.
//   - The driver creates the bucket if it is missing (file storage, one
//     revision per key, LimitMarkerTTL, which also allows per-message TTLs).
//     An existing bucket without it is refused with an error that
//     Permanent reports.
//
// # Leases
//
// The server counts a TTL in whole seconds, from one second: the driver
// asks for the whole seconds of the request's TTL and reports them as the
// lease it got (Capabilities.MinTTL is 1s, TTLResolution 1s). A record
// expires at its timestamp, set by the stream's leader when it stored the
// message, plus its TTL, on the clock of the server that holds the stream
// then: after a leader change, on the new leader's. Keep the servers'
// clocks synchronised (NTP) to well under the drift margin of a lease. A
// hold outlives the driver and its connection: it ends at its TTL unless a
// driver refreshes it, so a hold ID (Lock.Detach, dlock hold) can be
// resumed from anywhere.
//
// # Fencing tokens
//
// A hold's token is the stream sequence of the message that created it
// (the record's revision); the records that refresh it carry it in their
// value. A stream's sequence numbers only grow, across every key of the
// bucket: each message gets the next one, and purges and expiries remove
// messages without giving their numbers back. So every Acquire gets a token
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
// the server (not a consumer). A hold whose TTL runs out publishes
// nothing: package dlock tries again when the holder's lease, as the
// record's timestamp and TTL tell, should have ended.
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
