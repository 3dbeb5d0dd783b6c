// Package driver defines the interface a dlock backend implements.
//
// Most programs never import this package: they use the portable API in
// package dlock, which turns a Driver into locks with leases, renewal, waiting,
// fencing tokens and a lost-lock signal. A driver performs single atomic steps
// on its store and nothing else; everything that can be written once (retries,
// waiting, backoff, renewal, deadlines, validation, observability) lives in
// package dlock. This is the same split as database/sql and database/sql/driver.
//
// # The contract
//
// A lock is identified by a key. Each acquisition is made by an owner: an
// opaque, unguessable string (at least 128 random bits) chosen by package dlock
// for that acquisition. A driver must obey these rules; package drivertest
// checks them.
//
//   - Atomicity. Acquire, Refresh and Release are each one atomic step on the
//     store: a compare-and-set that checks the current holder and changes it in
//     one indivisible operation (a Lua script, a transaction, a conditional
//     UPDATE, a CAS). A check followed by a separate write is not atomic.
//   - Ownership. Refresh and Release change the store only if req.Owner holds
//     the key. A foreign owner gets ErrNotOwner and the store is unchanged.
//   - Leases. Every hold expires after the TTL it was last given unless it is
//     refreshed. Where the store has a clock (a database, Redis, a consensus
//     service), expiry is measured on that clock, never on the client's.
//     A store whose records live as long as a client session (ZooKeeper's
//     ephemeral nodes, keys on an etcd lease kept alive by the client) ends
//     the holds of a client that dies or is cut off when its session expires
//     on the server, and its driver ends a live client's unrefreshed holds
//     at their TTL itself; it reports a Result.TTL no longer than the time
//     the session is known to outlive the request.
//   - Fencing tokens. Each successful Acquire returns a token greater than every
//     token previously returned for the same key by any client, including tokens
//     of holders that released or expired. Tokens need not be dense.
//   - No retries. A driver makes one attempt per call and returns. It never
//     sleeps to wait for a lock, never retries a failed request and never
//     renews leases on its own; package dlock decides all of that.
//     (Reconnecting a broken connection inside the client library is fine,
//     and so is sending one attempt to several members of a replicated store
//     at once, or again to another member when one does not answer, where
//     the store makes the copies idempotent and the first answer stands: a
//     hedged request is still one attempt. A copy that lands after the
//     answer was taken must not undo what the answer promised. And a
//     Refresh or Release made optimistically, as a WATCH transaction or a
//     compare-and-swap, runs again when another writer changed the record
//     between its read and its write, a bounded number of times (at least
//     32): such a conflict says nothing about who holds the key, and
//     concurrent refreshes of one hold must all succeed.)
//   - No lost state. A driver never leaves state behind for an owner after
//     Release, after the owner's lease expired and the key was taken over, or
//     after Acquire returned an error. The only state that may outlive a lock
//     is what fencing needs (for example a per-key counter). An Acquire that
//     does not succeed (without Request.Queue) may write and undo within the
//     call, as a queue-based store does when it creates an entry to find its
//     place and deletes it again, provided the store is as it found it when
//     the call returns; such a transient entry may make a concurrent attempt
//     fail, never succeed where it should not.
//   - Contexts. Every call honours ctx as far as its client library can:
//     an error caused by ctx ending wraps ctx.Err(). A call may run on to
//     its own network timeout after ctx is done (go-redis, gomemcache and
//     go-zookeeper cannot abandon a request on the wire), but it must end
//     within a bounded time, even on a server that stopped answering.
//     Package dlock returns to its caller promptly on its own: it runs each
//     request on a goroutine of its own and, when the caller gives up,
//     lets the request finish in the background. It keeps this rule, which
//     drivertest checks: it never calls Acquire, Refresh or Release for an
//     owner while an Acquire (or AcquireAll) for that owner is still
//     running; the Release that cleans up after an abandoned Acquire waits
//     until that Acquire has returned. A driver therefore needs no
//     bookkeeping of requests in flight.
//   - Concurrency. All methods are safe for concurrent use.
//
// # Modes
//
// Request.Mode says which kind of hold is asked for. A driver declares the
// modes it implements natively in Capabilities.Modes; given a mode it does
// not declare it must return ErrUnsupported: it must never silently hand out
// a weaker lock.
//
//   - Exclusive: at most one holder per key. On a key used as a read-write
//     lock it is the write side.
//   - Shared: the read side of a read-write lock. Any number of Shared
//     holders, but none while an Exclusive holder exists, and no Exclusive
//     holder while a Shared one exists. Writers are not starved: while an
//     Exclusive waiter is queued on the key (an owner whose Acquire with
//     Request.Queue failed and whose queue entry's lease is live), a new
//     owner's Shared Acquire fails as if the key were held; holds already
//     granted are not affected. A driver that declares Shared therefore keeps
//     the queue entries of Exclusive waiters (see Request.Queue) even if it
//     is not FIFO.
//   - Downgrade: a Shared Acquire by an owner that holds the key Exclusive
//     turns its hold into a Shared one in one atomic step, keeping its token
//     and lease, and succeeds; waiting readers may then be admitted.
//   - Semaphore: at most Request.Limit holders per key, each with a lease and
//     a token of its own, so that a crashed holder's permit returns when its
//     lease ends. Every request for a key carries the same Limit while the
//     key has holders or queued waiters.
//
// Modes that cannot share a key are refused with an error wrapping
// ErrModeMismatch, and the store is unchanged: a Semaphore request on a key
// held or awaited as Exclusive or Shared (or the other way round), a
// Semaphore request whose Limit differs from the current holders', and an
// Exclusive Acquire by an owner that holds the key Shared (an upgrade, which
// would deadlock against another reader doing the same). Package dlock
// refuses upgrades itself before they reach the driver.
//
// Tokens increase per key across all modes: each hold, Shared holds and
// permits included, gets a token greater than every earlier one.
//
// # Optional interfaces
//
// A driver may also implement Notifier (wake waiters when a key is released),
// Lister (enumerate holders, for `dlock ls`), ForceReleaser (remove every
// holder of a key, for operators), MultiAcquirer (take several keys in one
// atomic step) and Classifier (tell permanent failures from transient
// ones). A driver that declares Capabilities.PortableHolds must implement
// HoldReader (read one hold back). Package dlock discovers them by type
// assertion.
//
// # Errors
//
// A driver's errors name the operation and the key (for example
// `redisdlock: acquire "k": ...`); package dlock adds its own prefix and
// does not name the key again. The sentinels below carry no prefix, so that
// a chain of wrapped errors names its packages once each.
package driver

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// Errors a driver returns. Drivers wrap them with detail (fmt.Errorf with %w);
// callers test with errors.Is.
var (
	// ErrNotOwner means the owner in the request does not hold the key: it
	// never did, it released it, or its lease expired (and perhaps another
	// owner took the key).
	ErrNotOwner = errors.New("the owner does not hold the key")

	// ErrModeMismatch means the request's mode or Limit cannot share the key
	// with its current holders or waiters (see Modes in the package
	// documentation). It is the same value as dlock.ErrModeMismatch.
	ErrModeMismatch = errors.New("the lock is held in another mode or with another limit")

	// ErrUnsupported means the driver cannot perform the request as asked
	// (a mode or option it does not implement, or an optional interface
	// whose method it has but cannot serve, as a wrapper over other drivers
	// may). It is the same value as dlock.ErrUnsupported. A Subscribe that
	// returns it makes package dlock poll, quietly.
	ErrUnsupported = errors.New("not supported by this backend")

	// ErrBusy means the store answered that it cannot serve the request now
	// and changed nothing: another client holds what the request needs for
	// longer than the store waits (SQLite's database locked by another
	// process past its busy timeout). Package dlock treats it as a held key:
	// a waiting Lock waits and tries again, even when it is the first
	// attempt's answer, and TryLock fails with dlock.ErrNotAcquired. A
	// driver that cannot tell whether anything changed returns another error.
	ErrBusy = errors.New("the store is busy")
)

// Mode is the kind of hold a request asks for.
type Mode uint8

const (
	// Exclusive is a mutual-exclusion lock: at most one holder per key.
	Exclusive Mode = iota
	// Shared is the read side of a read-write lock: any number of Shared
	// holders, but none while an Exclusive holder exists.
	Shared
	// Semaphore allows at most Request.Limit concurrent holders per key, each
	// with a lease of its own.
	Semaphore
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	case Semaphore:
		return "semaphore"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// ModeSet is a set of modes.
type ModeSet uint32

// Has reports whether m is in the set.
func (s ModeSet) Has(m Mode) bool { return s&(1<<m) != 0 }

// Modes returns a set holding the given modes.
func Modes(ms ...Mode) ModeSet {
	var s ModeSet
	for _, m := range ms {
		s |= 1 << m
	}
	return s
}

// Request describes one acquisition. Package dlock has validated every field
// against the driver's Capabilities before a driver sees it. The same Request
// (same Key and Owner) is passed to Acquire, Refresh, Release and Subscribe for
// the lifetime of one hold; only TTL may differ between calls.
type Request struct {
	// Key names the lock. It is non-empty valid UTF-8 without NUL bytes and no
	// longer than Capabilities.MaxKeyLen bytes.
	Key string
	// Owner identifies this acquisition: an unguessable string, unique per
	// acquisition, compared by the driver on Refresh and Release.
	Owner string
	// TTL is the lease: the hold expires TTL after the store applied the
	// request, unless refreshed. It is at least Capabilities.MinTTL.
	TTL time.Duration
	// Mode is the kind of hold.
	Mode Mode
	// Limit is the number of holders a Semaphore admits; zero for other modes.
	Limit int
	// Queue asks the driver to keep the owner in the key's wait queue when
	// Acquire does not succeed. A driver that declares Capabilities.FIFO
	// grants the key in queue order (owners acquire in the order they first
	// asked); a driver that declares Shared uses the entries of Exclusive
	// waiters to hold new readers back. The queue entry has a lease of TTL of
	// its own, renewed by each further Acquire for the same owner, and is
	// removed by a successful Acquire or by Release. Other drivers ignore
	// it. Package dlock sets it on every Acquire of a Lock call that waits,
	// on drivers that declare FIFO or Shared.
	//
	// Once an owner is queued, its place must not be silently lost: if the
	// entry has vanished (its lease or session ended) a further Acquire
	// returns an error wrapping ErrNotOwner instead of queueing the owner
	// again at the back, and package dlock, while the wait goes on, queues
	// the waiter again at the back as a new owner.
	Queue bool
	// Info is free-form text about the holder (host, process) shown by
	// Lister. It may be empty.
	Info string
	// LockDelay is the hold's lock delay (dlock.WithLockDelay), set only
	// for drivers that declare Capabilities.SessionLockDelay (others get
	// it added to TTL). Zero means none.
	LockDelay time.Duration
}

// Result is the outcome of an Acquire call that reached the store.
type Result struct {
	// Acquired reports whether the owner now holds the key.
	Acquired bool
	// Token is the fencing token of this hold when Acquired is true.
	Token uint64
	// TTL is the lease the store granted, when it differs from the request
	// (for example rounded to whole seconds). Zero means exactly Request.TTL.
	// It must never exceed Request.TTL. Package dlock computes the holder's
	// validity as the time before the request was sent plus this lease minus
	// dlock.DriftMargin(lease) (1% + 2ms); a driver that needs a larger
	// margin (several clocks, as a quorum has) reports a shorter lease.
	TTL time.Duration
	// RetryAfter, when Acquired is false, estimates how long until the
	// current holder's lease ends, as the store's clock sees it. Zero means
	// unknown. Package dlock uses it to time its next attempt.
	RetryAfter time.Duration
}

// Capabilities describe what a driver does natively. They are constant for the
// lifetime of a driver.
type Capabilities struct {
	// Modes are the modes the driver implements. It always includes
	// Exclusive.
	Modes ModeSet
	// FIFO reports that waiters who Acquire with Request.Queue set acquire in
	// the order they first asked.
	FIFO bool
	// DurableTokens reports that fencing tokens keep increasing across a
	// restart of the store (they are persisted with the store's own
	// durability). False means a restart may reuse tokens: use such a store
	// for efficiency locks only.
	DurableTokens bool
	// ServerClock reports that leases expire on the store's clock. False
	// means expiry depends on client clocks.
	ServerClock bool
	// Consensus reports that the store replicates through a consensus
	// protocol, so a hold survives the failure of a minority of servers.
	Consensus bool
	// MaxKeyLen is the longest key in bytes (after any prefix the driver
	// adds has been accounted for). Zero means 1024.
	MaxKeyLen int
	// MinTTL is the shortest lease the driver accepts. Zero means 10ms.
	MinTTL time.Duration
	// MaxTTL is the longest lease the driver accepts. Zero means package
	// dlock's default maximum, dlock.DefaultMaxTTL (7 days).
	MaxTTL time.Duration
	// MaxLimit is the largest Request.Limit of a Semaphore the driver
	// accepts. Zero means math.MaxInt32.
	MaxLimit int
	// CancelsPromptly reports that every call returns promptly once its ctx
	// is done, even on a store that has stopped answering (database/sql and
	// gRPC clients abandon a request on cancellation; an in-process store
	// never blocks). Package dlock then calls the driver on the caller's
	// goroutine. Otherwise it runs each request on a goroutine of its own so
	// that its caller can return promptly (see "Contexts" above). drivertest
	// holds a driver that declares it to it on a hung store.
	CancelsPromptly bool
	// TTLResolution is the unit the store measures leases in, when it is
	// coarse (memcached: whole seconds): a lease may end earlier than
	// asked, though it lasts at least the whole units asked less one, and
	// at least one unit. Package dlock adds two units where it promises a
	// minimum hold (Lock.ReleaseAfter), and counts on no more for a lock
	// that Client.Resume refreshed. Zero means fine-grained.
	TTLResolution time.Duration
	// PortableHolds reports that a hold is a record on the store and
	// nothing more: its key, its owner and its lease. Any driver on the
	// same store (in another process too) serves Refresh and Release for
	// an owner that another driver's Acquire made, and a hold outlives the
	// driver that took it, closed or gone, until its lease ends. Package
	// dlock's Lock.Detach and Client.Resume need it. A driver whose holds
	// live on its own session with the store (etcd leases, ZooKeeper
	// ephemeral nodes), or in memory of the driver itself, leaves it false.
	// A driver that declares it implements HoldReader.
	PortableHolds bool
	// LockDelay reports that a hold's record stays on the store for the
	// whole lease its latest Acquire or Refresh asked for, on the store's
	// clock, whether or not its holder is still alive: the lease is a
	// time to live on the record, not a client session. Package dlock's
	// lock delay (dlock.WithLockDelay) asks such a driver for a lease of
	// the TTL plus the delay, so that a holder that stops renewing keeps
	// the key from others for the delay after its own lease ended. A
	// driver whose holds end with its session declares it only with
	// SessionLockDelay; otherwise (ZooKeeper) it leaves it false, and
	// package dlock refuses a lock delay on it.
	LockDelay bool
	// SessionLockDelay, with LockDelay, reports that the driver keeps a
	// lock delay itself, on the store's clock: its holds live on its
	// session with the store (etcd), which ends them by itself. Package
	// dlock then asks it for the holder's TTL alone and passes the delay
	// in Request.LockDelay; the driver keeps a hold's key from others for
	// at least that delay after the hold ended without a release (its
	// session ended, or its lease ran out), and frees it at once on a
	// Release or a forced release.
	SessionLockDelay bool
}

// Driver is the interface every backend implements.
type Driver interface {
	// Acquire makes one atomic attempt to give req.Owner a hold of req.Mode
	// on req.Key with a lease of req.TTL. If the key is free (or its holders'
	// leases have expired, or the mode admits another holder) it takes the
	// hold and returns Result{Acquired: true, Token: ...}. Otherwise it
	// changes nothing (except a queue entry, see Request.Queue) and returns
	// Result{Acquired: false}. An error means the outcome is unknown to the
	// caller, who will call Release to clean up: the driver must make sure a
	// failed call leaves no hold it could not report.
	//
	// If req.Owner already holds the key, Acquire behaves like Refresh and
	// returns the existing token.
	Acquire(ctx context.Context, req Request) (Result, error)

	// Refresh resets the lease of req.Owner's hold on req.Key to req.TTL from
	// now, atomically checking that req.Owner still holds it. It returns an
	// error wrapping ErrNotOwner if it does not (the store is unchanged).
	Refresh(ctx context.Context, req Request) error

	// Release removes req.Owner's hold on req.Key, and any queue entry of
	// req.Owner, atomically checking ownership. It returns an error wrapping
	// ErrNotOwner if req.Owner held nothing live on the key (it never did, had
	// already released it, or its lease had expired); any expired remains of
	// req.Owner's hold are removed all the same.
	Release(ctx context.Context, req Request) error

	// Capabilities reports what the driver does natively.
	Capabilities() Capabilities

	// Close releases the resources the driver created (connections it
	// opened, goroutines it started). A driver built around a client the
	// caller passed in does not close that client. Holds are not released:
	// package dlock releases its locks before it calls Close. After Close,
	// every method returns an error.
	Close() error
}

// Classifier is implemented by drivers that can tell a permanent failure of
// their store from a transient one, as gocloud.dev's drivers do with their
// ErrorCode method. Package dlock retries a transient failure while a Lock
// waits; a permanent one ends the wait at once, with an error wrapping
// dlock.ErrPermanent.
type Classifier interface {
	// Permanent reports whether err, returned by one of the driver's
	// methods, is a failure that asking again cannot mend while the
	// deployment stays as it is: the store refused the credentials or a
	// permission, the schema or database is missing, a key holds data of a
	// foreign type, the store does not run a command the driver needs.
	// It looks at err alone (errors.As, error codes), never at the
	// driver's state, and is safe for concurrent use. A failure caused by
	// a context that ended, a connection that broke or timed out, or a
	// store that is starting, failing over or overloaded is not permanent.
	// Checks that hold for every store (an untrusted TLS certificate,
	// ErrUnsupported) are made by package dlock; Permanent need not repeat
	// them.
	Permanent(err error) bool
}

// Notifier is implemented by drivers that can wake a waiter when a key may
// have become available (Redis pub/sub, PostgreSQL LISTEN/NOTIFY, watches).
type Notifier interface {
	// Subscribe starts watching for a change that may let req.Owner acquire
	// req.Key: a release of the key, or, for FIFO drivers, of the owner's
	// predecessor in the queue. Every such change that happens after
	// Subscribe returns must be signalled on the subscription's channel.
	// Lease expiry need not be signalled (package dlock polls using
	// Result.RetryAfter), and spurious signals are allowed.
	Subscribe(ctx context.Context, req Request) (Subscription, error)
}

// Subscription is a live watch returned by Notifier.Subscribe.
type Subscription interface {
	// C returns a channel that receives a value after each change. Signals
	// may be coalesced: a full channel is not written to again.
	C() <-chan struct{}
	// Close ends the watch and frees its resources. It is idempotent.
	Close() error
}

// Granter is implemented by a Subscription of a queued waiter
// (Request.Queue) whose store may hand the key to the waiter as it is
// released, and say so in the signal.
type Granter interface {
	// Granted returns the hold (Acquired, Token and TTL, its lease) that the
	// store has handed to the subscription's owner since the store answered
	// the owner's latest Acquire, which did not acquire, and true; or false
	// if no such hold has been signalled. The lease counts from no earlier
	// than the moment that Acquire was sent, so package dlock takes the
	// hold without another Acquire when the latest one was answered, and
	// renews it early (at a third of the validity that leaves). A hold is
	// returned once.
	Granted() (Result, bool)
}

// Holder describes one holder of a key, as listed by a Lister.
type Holder struct {
	Key   string
	Owner string
	Mode  Mode
	// Limit is the Semaphore's number of permits; zero for other modes.
	Limit int
	Token uint64
	Info  string
	// TTL is the time left on the holder's lease, as the store sees it.
	TTL time.Duration
}

// Lister is implemented by drivers that can enumerate live holders.
type Lister interface {
	// List returns the live holders of keys that start with prefix, sorted
	// by key and then token. Expired holders are not listed.
	List(ctx context.Context, prefix string) ([]Holder, error)
}

// HoldReader is implemented by drivers that can read one hold back from the
// store. Every driver that declares Capabilities.PortableHolds must
// implement it: package dlock's Client.Resume takes the token, mode and
// limit of the hold that a hold ID names from ReadHold, never from the ID.
type HoldReader interface {
	// ReadHold returns owner's live hold on key as the store records it:
	// its Key, Owner, Mode, Limit and Token, and TTL, the time left on its
	// lease (zero if the store cannot tell; Info may be left empty too).
	// It changes nothing. If
	// owner holds nothing live on key (it never did, released it, or its
	// lease expired) it returns an error wrapping ErrNotOwner.
	ReadHold(ctx context.Context, key, owner string) (Holder, error)
}

// ForceReleaser is implemented by drivers that let an operator remove every
// holder of a key, whoever owns it.
type ForceReleaser interface {
	// ForceRelease removes all holds and queue entries on key and reports
	// how many holds it removed. It is not an error if there were none.
	ForceRelease(ctx context.Context, key string) (int, error)
}

// MultiAcquirer is implemented by drivers that can take holds on several keys
// in one atomic step (one Lua script on Redis). Package dlock uses it for
// the all-or-none attempts of Client.TryLockAll and Client.LockAll, and falls
// back to taking the keys one by one in canonical order when it returns
// ErrUnsupported or cannot grant them all at once.
type MultiAcquirer interface {
	// AcquireAll makes one atomic attempt to grant every request: either
	// it takes every hold, or it takes none and leaves the store as it
	// found it (except for removing expired records). Each request obeys
	// the rules of Acquire, with these restrictions, which package dlock
	// keeps: the keys are distinct, every owner is new (it holds nothing
	// and is not queued), and Queue is false.
	//
	// It returns ErrUnsupported, before touching the store, for a set of
	// requests it cannot grant in one step (keys on different Redis
	// Cluster slots, a mode it only implements one key at a time). An
	// error means the outcome is unknown, as for Acquire: the caller will
	// Release every request.
	AcquireAll(ctx context.Context, reqs []Request) (MultiResult, error)
}

// MultiResult is the outcome of a MultiAcquirer.AcquireAll call that reached
// the store.
type MultiResult struct {
	// Acquired reports whether every hold was taken. When it is false, none
	// was.
	Acquired bool
	// Results has one Result per request, in the order of the requests,
	// when Acquired is true.
	Results []Result
	// Blocked is, when Acquired is false, the index of a request that could
	// not be granted, and RetryAfter estimates how long until that key's
	// current holders' leases end (zero: unknown).
	Blocked    int
	RetryAfter time.Duration
}
