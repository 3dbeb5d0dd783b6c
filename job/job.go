// Package job runs a scheduled job at most once per firing across a fleet,
// in the manner of ShedLock: every instance fires the job on its own
// schedule, and Run lets only the one that takes the job's lock run it; the
// others skip that firing.
//
//	err := job.Run(ctx, client, "nightly-report", func(ctx context.Context) error {
//		return buildReport(ctx)
//	}, job.AtLeast(time.Minute), job.AtMost(time.Hour))
//	if errors.Is(err, job.ErrSkipped) {
//		return nil // another instance runs it
//	}
//
// Two bounds shape the hold. AtLeast keeps the lock for a while even when the
// job finishes quickly, so that instances whose clocks (or schedulers) fire a
// little later find it held and skip, instead of running the job a second
// time. AtMost ends the hold of a job that runs too long: its context is
// cancelled and the lock is released, so that a hung job does not keep the
// others out forever (dlock.WithMaxHold). A holder that dies frees the lock
// when its lease ends, as any dlock lock.
//
// The job's name is its lock's key, as is: `dlock run --key NAME` on the same
// store takes the same lock.
//
// This is a lock for efficiency: a job that runs longer than AtMost, or
// whose lock is lost, may overlap a run elsewhere. Jobs that must never run
// twice should also pass the lock's fencing token (see Lock) to what they
// write.
package job

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/errtext"
)

// ErrSkipped is returned by Run and Acquire when their one attempt did not
// get the job's lock because another instance holds it (or, rarely, because
// the store answered too late to leave the lock any validity): the job did
// not run this time, and that is normal. The error also wraps
// dlock.ErrNotAcquired. A cancelled context, a closed Client or a store that
// cannot be reached is no skip: those errors are returned as they are.
var ErrSkipped = errors.New("job: skipped")

// Option configures Run and Acquire.
type Option func(*config)

type config struct {
	atLeast time.Duration
	atMost  *time.Duration
	lockOps []dlock.LockOption
}

// AtLeast keeps the job's lock until at least d after Run started its
// attempt to take it, however the job ends (it returns, fails or panics):
// the hold is handed to the lock's lease (dlock.Lock.ReleaseAfter), and
// other instances firing within d skip. d must not be negative, nor longer
// than AtMost or the store's longest hold (dlock.Client.MaxReleaseAfter).
func AtLeast(d time.Duration) Option {
	return func(c *config) { c.atLeast = d }
}

// AtMost bounds the hold: d after the lock was taken, the job's context is
// cancelled (its cause wraps dlock.ErrLost and dlock.ErrMaxHold) and the lock
// is released. The job should stop then; Run returns once it has. d must be
// positive and at least the store's minimum lease (see dlock.WithMaxHold).
// Without AtMost the lock is renewed for as long as the job runs.
func AtMost(d time.Duration) Option {
	return func(c *config) { c.atMost = &d }
}

// WithLockOptions passes options to the acquisition of the job's lock, such
// as dlock.WithTTL (the lease: how long a crashed instance keeps the others
// out) or dlock.WithInfo.
func WithLockOptions(opts ...dlock.LockOption) Option {
	return func(c *config) { c.lockOps = append(c.lockOps, opts...) }
}

// Run makes one attempt to take the lock named name on c and, if it gets it,
// runs fn while holding it. If another instance holds it, Run returns an
// error wrapping ErrSkipped (and dlock.ErrNotAcquired) at once and fn does
// not run.
//
// fn's context is derived from ctx and is also cancelled when the lock is
// lost or reaches AtMost; context.Cause tells why. Lock returns the held lock
// from it (for its fencing token).
//
// Run returns fn's error. If fn returned nil but the lock was lost or reached
// AtMost while it ran, Run returns an error wrapping dlock.ErrLost (and
// dlock.ErrMaxHold for AtMost), as the work may have overlapped another
// run. However fn ends, by returning, panicking (the panic goes on once the
// lock is dealt with) or runtime.Goexit, the lock is released, or kept until
// AtLeast has passed. Bad arguments give a *dlock.ArgError.
func Run(ctx context.Context, c *dlock.Client, name string, fn func(ctx context.Context) error, opts ...Option) (err error) {
	if fn == nil {
		return &dlock.ArgError{Name: "fn", Value: nil, Reason: "must not be nil"}
	}
	h, err := Acquire(ctx, c, name, opts...)
	if err != nil {
		return err
	}
	lctx := h.l.Context()
	fctx, cancel := context.WithCancelCause(context.WithValue(ctx, lockKey{}, h.l))
	stop := context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) })
	defer func() {
		// Runs on return, panic and Goexit alike.
		stop()
		cancel(nil)
		if rerr := h.Release(ctx); err == nil {
			err = rerr
		}
	}()
	return fn(fctx)
}

// Hold is a job's lock, for schedulers that take it before a job and give it
// back after, such as gocron's Locker: Acquire takes it and Release gives it
// back, as Run does around its function.
type Hold struct {
	l       *dlock.Lock
	begin   time.Time
	atLeast time.Duration
}

// Acquire makes one attempt to take the lock of the job named name, as Run
// does: if another instance holds it, the error wraps ErrSkipped (and
// dlock.ErrNotAcquired). The options are Run's; AtLeast applies when the
// Hold is released.
func Acquire(ctx context.Context, c *dlock.Client, name string, opts ...Option) (*Hold, error) {
	if ctx == nil {
		return nil, &dlock.ArgError{Name: "ctx", Value: nil, Reason: "must not be nil"}
	}
	if c == nil {
		return nil, &dlock.ArgError{Name: "client", Value: nil, Reason: "must not be nil"}
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	lockOpts := cfg.lockOps
	switch {
	case cfg.atLeast < 0:
		return nil, &dlock.ArgError{Name: "at least", Value: cfg.atLeast, Reason: "must not be negative"}
	case cfg.atMost != nil && *cfg.atMost <= 0:
		return nil, &dlock.ArgError{Name: "at most", Value: *cfg.atMost, Reason: "must be positive"}
	case cfg.atMost != nil && cfg.atLeast > *cfg.atMost:
		return nil, &dlock.ArgError{Name: "at least", Value: cfg.atLeast, Reason: fmt.Sprintf("is longer than at most %v", *cfg.atMost)}
	case cfg.atLeast > c.MaxReleaseAfter():
		// Refused now, not when the job is done (dlock.Lock.ReleaseAfter).
		return nil, &dlock.ArgError{Name: "at least", Value: cfg.atLeast, Reason: fmt.Sprintf("is above this store's longest hold of %v", c.MaxReleaseAfter())}
	}
	if cfg.atMost != nil {
		// dlock checks it (as "max hold"); it is reported as AtMost's.
		lockOpts = append(lockOpts[:len(lockOpts):len(lockOpts)], dlock.WithMaxHold(*cfg.atMost))
	}

	begin := time.Now()
	l, err := c.TryLock(ctx, name, lockOpts...)
	if err != nil {
		var ae *dlock.ArgError
		switch {
		case errors.As(err, &ae) && ae.Name == "max hold":
			return nil, &dlock.ArgError{Name: "at most", Value: *cfg.atMost, Reason: ae.Reason}
		case errors.Is(err, dlock.ErrNotAcquired) && ctx.Err() == nil && !errors.Is(err, dlock.ErrClosed):
			return nil, fmt.Errorf("%w: %w", ErrSkipped, errtext.Bare(err))
		}
		return nil, err
	}
	return &Hold{l: l, begin: begin, atLeast: cfg.atLeast}, nil
}

// Lock returns the held lock. Its context ends when the lock is lost or
// reaches AtMost.
func (h *Hold) Lock() *dlock.Lock { return h.l }

// Release gives the lock back: at once, or, with AtLeast, by handing it to
// its lease until AtLeast after Acquire began (dlock.Lock.ReleaseAfter). It
// returns an error wrapping dlock.ErrLost if the lock was lost or reached
// AtMost while held, and otherwise what dlock.Lock.Release returns.
func (h *Hold) Release(ctx context.Context) error {
	if hold := h.atLeast - time.Since(h.begin); hold > 0 {
		return h.l.ReleaseAfter(ctx, hold)
	}
	return h.l.Release(ctx)
}

type lockKey struct{}

// Lock returns the lock of the job whose context ctx is (or is derived
// from), or nil outside a job. Its Token is the fencing token to pass to
// what the job writes.
func Lock(ctx context.Context) *dlock.Lock {
	l, _ := ctx.Value(lockKey{}).(*dlock.Lock)
	return l
}
