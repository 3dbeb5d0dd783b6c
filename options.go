package dlock

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// Defaults used when no option says otherwise.
const (
	// DefaultTTL is the lease of a lock when neither WithTTL nor
	// WithDefaultTTL is given.
	DefaultTTL = 15 * time.Second
	// DefaultMinBackoff and DefaultMaxBackoff bound the jittered exponential
	// backoff between attempts when a backend cannot notify waiters.
	DefaultMinBackoff = 2 * time.Millisecond
	DefaultMaxBackoff = 500 * time.Millisecond
)

// Option configures a Client.
type Option func(*clientConfig)

type clientConfig struct {
	logger     *slog.Logger
	observer   Observer
	defaultTTL time.Duration
	lockDelay  time.Duration
	info       string
}

// WithLogger sets the logger for renewal failures, lost locks and fallbacks.
// The default discards everything.
func WithLogger(l *slog.Logger) Option {
	return func(c *clientConfig) { c.logger = l }
}

// WithObserver sets a hook that sees every acquisition, renewal, release and
// loss; use it to feed metrics or traces. It is called synchronously and
// must be fast (see Observer).
func WithObserver(o Observer) Option {
	return func(c *clientConfig) { c.observer = o }
}

// WithDefaultTTL sets the lease used by locks that do not pass WithTTL.
func WithDefaultTTL(d time.Duration) Option {
	return func(c *clientConfig) { c.defaultTTL = d }
}

// WithDefaultLockDelay sets the lock delay of locks that do not pass
// WithLockDelay (see there). The default is none. dlock.Open also takes it
// from the URL parameter lock_delay (lock_delay=2s), which an option given
// to Open overrides.
func WithDefaultLockDelay(d time.Duration) Option {
	return func(c *clientConfig) { c.lockDelay = d }
}

// WithOwnerInfo sets the text stored with each hold and shown by listings
// (`dlock ls`). The default is "host:pid".
func WithOwnerInfo(info string) Option {
	return func(c *clientConfig) { c.info = info }
}

// LockOption configures one acquisition.
type LockOption func(*lockConfig)

type lockConfig struct {
	ttl        time.Duration
	renew      bool
	minBackoff time.Duration
	maxBackoff time.Duration
	info       *string
	fair       bool
	shared     bool
	limit      *int
	maxHold    *time.Duration
	delay      time.Duration
	id         uint64 // the acquisition's Event.ID; zero for a fresh one
}

// WithTTL sets the lease of the lock: how long the store keeps it after the
// last successful renewal. A holder that crashes blocks others for at most this
// long. It must be at least the backend's minimum (10ms unless the backend
// says otherwise).
func WithTTL(d time.Duration) LockOption {
	return func(c *lockConfig) { c.ttl = d }
}

// WithLockDelay sets the lock's lock delay, as Chubby and Consul have it:
// when the hold ends without a release (its lease ran out because its
// holder was paused, cut off or crashed), nobody may take the key for d
// after the holder's lease ended, on the store's clock, so that the late
// writes of an old holder land before the next holder starts. It protects
// resources that cannot check a fencing token. A Release frees the key at
// once, as does ReleaseAfter when its time comes; a crashed holder keeps
// the key from others for TTL+d.
//
// dlock asks the store for a lease of TTL+d, on every acquisition and
// renewal, while the holder counts on its TTL alone (Lock.TTL, its
// validity, its renewal and its lost signal). TTL+d must not exceed the
// backend's maximum lease. etcd, whose holds end with a client session,
// keeps the delay itself (Capabilities().SessionLockDelay) and is asked for
// the TTL alone. ZooKeeper (Capabilities().LockDelay is false) refuses a
// non-zero d. Otherwise, and for a negative d, the acquisition fails with an
// *ArgError named "lock delay".
func WithLockDelay(d time.Duration) LockOption {
	return func(c *lockConfig) { c.delay = d }
}

// WithoutRenewal turns automatic renewal off: the lock is lost when its lease
// ends unless Refresh is called in time.
func WithoutRenewal() LockOption {
	return func(c *lockConfig) { c.renew = false }
}

// WithBackoff sets the bounds of the jittered exponential backoff between
// attempts while Lock waits. Backends that notify waiters use it only as a
// fallback.
func WithBackoff(min, max time.Duration) LockOption {
	return func(c *lockConfig) { c.minBackoff, c.maxBackoff = min, max }
}

// WithMaxHold bounds how long the lock is held: d after it was acquired
// (measured from before the acquire request was sent), renewal stops, the
// lock's context ends with a cause wrapping both ErrLost and ErrMaxHold, and
// the lock is released on the store at once, so that other holders can take
// it. The protected work must stop when the context ends, as it must on any
// loss. It is ShedLock's lockAtMostFor: a bound on how long a job that hangs
// keeps the others out. Lock.ReleaseAfter does not hold the lock past it
// either.
//
// The lock is released rather than left to its lease: a live holder that hung
// would otherwise keep others out for up to a TTL more, and the end of the
// hold would depend on when the last renewal happened. A holder that cannot
// reach the store at that moment (or that died before) leaves the lock to its
// lease, which ends at most one TTL after its last renewal.
//
// d must be positive and at least the backend's minimum lease
// (Capabilities.MinTTL, which is at least the store's TTLResolution): a
// shorter hold is below what the store can time. Otherwise the acquisition
// fails with an *ArgError named "max hold".
func WithMaxHold(d time.Duration) LockOption {
	return func(c *lockConfig) { c.maxHold = &d }
}

// ErrMaxHold is wrapped, together with ErrLost, by the cause of a lock
// context that ended because the lock reached its WithMaxHold bound.
var ErrMaxHold = errors.New("max hold reached")

// WithInfo overrides the Client's owner info for this lock.
func WithInfo(info string) LockOption {
	return func(c *lockConfig) { c.info = &info }
}

// EventKind tells what an Event reports.
type EventKind int

// Event kinds. Later versions may add kinds: an Observer should ignore the
// kinds it does not know.
const (
	// EventAcquired: a lock was acquired. Event.Wait is the time spent.
	EventAcquired EventKind = iota
	// EventNotAcquired: Lock or TryLock gave up. Event.Err says why.
	EventNotAcquired
	// EventReleased: a lock was released. Event.Held is how long it was held.
	EventReleased
	// EventLost: a held lock was lost. Event.Err says why.
	EventLost
	// EventRenewFailed: one renewal attempt failed; the lock is kept until
	// its validity runs out. Event.Err says why.
	EventRenewFailed
	// EventAcquiring: an acquisition starts (Lock, TryLock, Do, LockAll,
	// TryLockAll). Exactly one EventAcquired or EventNotAcquired with the
	// same Event.ID follows it, so that an observer can count waiters or
	// start a span here and end it there.
	EventAcquiring
	// EventRenewed: a renewal of the lease succeeded (an automatic one or
	// Lock.Refresh).
	EventRenewed
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventAcquired:
		return "acquired"
	case EventNotAcquired:
		return "not_acquired"
	case EventReleased:
		return "released"
	case EventLost:
		return "lost"
	case EventRenewFailed:
		return "renew_failed"
	case EventAcquiring:
		return "acquiring"
	case EventRenewed:
		return "renewed"
	}
	return "unknown"
}

// Event is what an Observer sees.
//
// The events of one acquisition share its ID: EventAcquiring, then
// EventAcquired or EventNotAcquired, and after EventAcquired the events of
// the hold (EventRenewed, EventRenewFailed) up to its end (EventReleased or
// EventLost). A renewal that was under way when the hold ended may still
// report its outcome after the end. A re-entrant acquisition (see
// Client.Lock) reports no events: it takes no new hold. A hold taken over
// with Client.Resume starts with EventAcquired (it waits for nothing),
// under an ID of its own, and its Ctx is the context passed to Resume.
type Event struct {
	Kind EventKind
	Key  string
	// ID names the acquisition the event belongs to: it is unique among
	// the acquisitions of the process (across Clients) and never zero. An
	// observer matches an EventAcquiring with its outcome by it, however
	// many acquisitions of the same key run at once.
	ID uint64
	// Ctx is the context passed to the call that acquires the lock (Lock,
	// TryLock, Do, LockAll, TryLockAll), for the events of the acquisition
	// and of the hold alike: tracing and logging values (a span, a request
	// ID) can be taken from it. For the events of the hold it may have
	// ended long ago: use its values, not its cancellation. It is nil
	// when no such context is known.
	Ctx context.Context
	// Mode and Limit are the mode the acquisition asked for and its
	// number of permits (semaphores only, zero otherwise). They stay the
	// same for every event of the acquisition: a write lock that was
	// downgraded still reports driver.Exclusive (Lock.Mode tells the
	// current mode), so that counts kept by mode add up.
	Mode  Mode
	Limit int
	Token uint64        // the lock's fencing token, once it was acquired
	Wait  time.Duration // EventAcquired, EventNotAcquired: time spent acquiring
	// Held is how long the lock was held: in all for EventReleased and
	// EventLost, so far for EventRenewed and EventRenewFailed.
	Held time.Duration
	Err  error // EventNotAcquired, EventLost, EventRenewFailed
}

// Observer receives events about locks. Adapters for Prometheus
// (github.com/dlockhq/dlock/observe/dlockprom) and OpenTelemetry
// (github.com/dlockhq/dlock/observe/dlockotel) implement it in modules of their
// own, so that the core does not depend on them.
//
// Observe is called synchronously, on the goroutine that acquires, renews
// or releases the lock (or on a timer's), and may be called from many
// goroutines at once: it must be safe for concurrent use, fast, and must
// not block. It must not call back into the Client or its locks (acquire,
// release, refresh, close): some events are reported while the Client is
// inside such a call. EventLost and EventReleased are delivered after the
// lock's context was cancelled: the signal to stop work never waits for an
// observer. A panic in Observe is recovered and logged (WithLogger, at
// level Error with its stack), so that it cannot leave a lock held or stop
// its renewal.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to the Observer interface.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Fair asks for a fair lock: waiters acquire it in the order they started
// waiting, across processes. Backends that queue waiters in the store
// (Capabilities().FIFO: etcd, ZooKeeper, Redis in script mode, the
// in-process store, and the SQL stores opened with fair=1; docs/lock-types.md's
// table of lock types lists them) are fair for every lock; on the others
// Lock returns an error wrapping ErrUnsupported rather than an unfair lock. A
// waiter that dies holds up the queue for at most its TTL, plus its lock
// delay if it has one (its place in the queue is a lease of its own) or, on
// session-based stores, until its
// session expires, whichever comes first.
func Fair() LockOption {
	return func(c *lockConfig) { c.fair = true }
}

// Shared asks for the read side of a read-write lock on the key: any number
// of Shared holders at once, none while a write lock (a Lock without Shared)
// is held. Writers are not starved: once a writer waits, new readers wait
// behind it. A write lock's holder can Downgrade it to a read lock; a read
// lock cannot be upgraded (ErrUpgrade). Backends that cannot do it natively
// return an error wrapping ErrUnsupported.
func Shared() LockOption {
	return func(c *lockConfig) { c.shared = true }
}

// WithLimit asks for one of n permits of a semaphore on the key: at most n
// holders at once, each with a lease, token and renewal of its own, so that
// a crashed holder's permit comes back when its lease ends. Every holder of a
// key must use the same n (ErrModeMismatch otherwise). n must be at least 1.
// Backends that cannot do it natively return an error wrapping
// ErrUnsupported.
func WithLimit(n int) LockOption {
	return func(c *lockConfig) { c.limit = &n }
}

// mode returns the mode and limit the options ask for.
func (c *lockConfig) mode() (driver.Mode, int) {
	switch {
	case c.limit != nil:
		return driver.Semaphore, *c.limit
	case c.shared:
		return driver.Shared, 0
	}
	return driver.Exclusive, 0
}

// checkLockDelay checks a lock delay for locks with a lease of ttl.
func (c *Client) checkLockDelay(ttl, d time.Duration) error {
	switch {
	case d == 0:
		return nil
	case d < 0:
		return argError("lock delay", d, "must not be negative")
	case !c.caps.LockDelay:
		return argError("lock delay", d, "is not supported by this backend: its holds end with its client's session")
	case d > c.caps.MaxTTL-ttl-c.caps.TTLResolution:
		return argError("lock delay", d, "added to the ttl of %v passes this backend's maximum lease of %v", ttl, c.caps.MaxTTL)
	}
	return nil
}

// checkMaxHold checks a WithMaxHold bound, if one was given.
func (c *Client) checkMaxHold(p *time.Duration) error {
	if p == nil {
		return nil
	}
	switch d := *p; {
	case d <= 0:
		return argError("max hold", d, "must be positive")
	case d < max(c.caps.MinTTL, c.caps.TTLResolution):
		return argError("max hold", d, "is below this backend's minimum lease of %v", max(c.caps.MinTTL, c.caps.TTLResolution))
	}
	return nil
}
