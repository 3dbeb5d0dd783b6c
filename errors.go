package dlock

import (
	"errors"
	"fmt"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/errclass"
	"github.com/dlockhq/dlock/internal/errtext"
)

// Sentinel errors. Every error dlock returns wraps one of them (or a context
// error, or an error from the store); test with errors.Is.
//
// Their texts do not begin with "dlock: ": the errors dlock returns carry
// that prefix once, at their start, and name the lock's key once, however
// many layers (dlock, a driver, its store) add to them.
var (
	// ErrNotAcquired means the lock could not be acquired: TryLock found it
	// held, or a wait in Lock ended. When a wait ends because its context is
	// done, the error also wraps the context's error, so both
	// errors.Is(err, ErrNotAcquired) and errors.Is(err, context.DeadlineExceeded)
	// (or context.Canceled) hold.
	ErrNotAcquired = errors.New("lock not acquired")

	// ErrNotHeld means the lock handle no longer holds the lock because it
	// was released through this handle (for example Release called twice).
	// It is also the cause of a lock context that ended by Release.
	ErrNotHeld = errors.New("lock not held")

	// ErrLost means the lock was held but can no longer be trusted: a
	// renewal failed, the lease ran out, or the store reports another owner.
	// The protected work must stop; another holder may already exist.
	ErrLost = errors.New("lock lost")

	// ErrInvalidArgument means an argument was rejected before anything was
	// sent to the store. The error is an *ArgError naming the argument.
	ErrInvalidArgument = errors.New("invalid argument")

	// ErrClosed means the Client was closed.
	ErrClosed = errors.New("client closed")

	// ErrModeMismatch means the lock is held or awaited in a mode that
	// cannot share the key with the one asked for: a semaphore with another
	// limit, a semaphore on a key used as a mutex or read-write lock, or the
	// other way round. It is the same value as driver.ErrModeMismatch.
	ErrModeMismatch = driver.ErrModeMismatch

	// ErrUpgrade means a holder of a read (Shared) lock asked for the write
	// side of the same key with the read lock's context. That would wait for
	// itself (and deadlock against any other reader doing the same), so it
	// is refused at once: release the read lock first, or take the write
	// lock from the start and Downgrade it.
	ErrUpgrade = errors.New("a read lock cannot be upgraded to a write lock")

	// ErrUnavailable means the store failed an acquisition: it answered
	// with an error, or a node or replica it needs did not answer, instead
	// of granting the lock or finding it held. The error wraps the store's
	// own error too. A wait in Lock rides such failures out; if the wait
	// ends (its context is done, or the Client is closed) while the store
	// is failing, so that the last attempt that completed failed, the error
	// wraps ErrNotAcquired, the context's error (or ErrClosed), ErrUnavailable
	// and the store's last error, so that the caller learns why the lock
	// was not acquired instead of taking it for held.
	ErrUnavailable = errors.New("the store is unavailable")

	// ErrPermanent means the store failed a request in a way that asking
	// again cannot mend while the deployment stays as it is: it refused
	// the credentials, the client does not trust its TLS certificate, the
	// user lacks a permission, the table or database is missing, the key
	// holds data of a foreign type. The driver says which of its store's
	// errors are permanent (driver.Classifier), and dlock adds checks that
	// hold for every store (TLS certificate verification). A permanent
	// failure ends a wait in Lock, Do or LockAll at once, instead of
	// retrying until the context ends; the error wraps ErrPermanent,
	// ErrUnavailable and the store's error (it does not wrap
	// ErrNotAcquired: the lock was not found held). Refresh, Release and
	// Resume wrap it too when the store's failure is permanent; automatic
	// renewal reports it (EventRenewFailed, and the logger at error level)
	// and keeps trying until the lock's validity ends, since the store
	// keeps the hold until its lease ends and an operator may repair the
	// deployment meanwhile.
	ErrPermanent = errors.New("the store failed for good")

	// ErrUnsupported means the backend does not support what was asked
	// (a lock mode, a listing, a forced release). It is the same value as
	// driver.ErrUnsupported, so drivers' errors match it too.
	ErrUnsupported = driver.ErrUnsupported
)

// ArgError reports a rejected argument. It matches ErrInvalidArgument with
// errors.Is.
type ArgError struct {
	Name   string // the argument: "key", "ttl", "ctx", ...
	Value  any    // the rejected value
	Reason string // why it was rejected
}

// Error implements error.
func (e *ArgError) Error() string {
	return fmt.Sprintf("dlock: invalid argument %s=%s: %s", e.Name, formatValue(e.Value), e.Reason)
}

// Is reports whether target is ErrInvalidArgument.
func (e *ArgError) Is(target error) bool { return target == ErrInvalidArgument }

func formatValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "nil"
	case string:
		if len(v) > 64 {
			return fmt.Sprintf("%q... (%d bytes)", v[:64], len(v))
		}
		return fmt.Sprintf("%q", v)
	default:
		return fmt.Sprint(v)
	}
}

// unavailableError marks a store's failure of an acquisition as
// ErrUnavailable, keeping the store's error and its message.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string        { return e.err.Error() }
func (e *unavailableError) Unwrap() error        { return e.err }
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }

// permanentError marks a store's failure that asking again cannot mend as
// ErrPermanent, and the failure of an acquisition as ErrUnavailable too,
// keeping the store's error and its message.
type permanentError struct {
	err     error
	acquire bool
}

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }
func (e *permanentError) Is(target error) bool {
	return target == ErrPermanent || e.acquire && target == ErrUnavailable
}

// permanent reports whether err, from a call of the Client's driver, is a
// failure that asking again cannot mend: an *ArgError, or what the
// driver's classifier and the checks shared by every store (see package
// errclass) find permanent.
func (c *Client) permanent(err error) bool {
	return errors.Is(err, ErrInvalidArgument) || errclass.Permanent(c.drv, err)
}

// storeFailure marks err, a failure of a store request, as ErrUnavailable,
// and as ErrPermanent too if it is permanent.
func (c *Client) storeFailure(err error) error {
	if c.permanent(err) {
		return &permanentError{err: err, acquire: true}
	}
	return &unavailableError{err}
}

// marked marks err, a failure of a store request that is not an
// acquisition (a refresh, a release), as ErrPermanent if it is permanent,
// and leaves it as it is otherwise.
func (c *Client) marked(err error) error {
	if c.permanent(err) {
		return &permanentError{err: err}
	}
	return err
}

func argError(name string, value any, format string, args ...any) error {
	return &ArgError{Name: name, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// The errors dlock makes begin with "dlock: " once and name the lock's key
// once (see package errtext): an error that wraps another error of dlock's
// drops the inner one's prefix (bare); one that wraps a store's error names
// the key only if the store's error does not (keyed): drivers name it
// already.
var (
	bare       = errtext.Bare
	keyed      = errtext.Keyed
	keyedAfter = errtext.KeyedAfter
)
