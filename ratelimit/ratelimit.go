// Package ratelimit caps how often something happens across processes: at
// most N admitted calls per sliding window per key, counted by a dlock store.
//
// # What "N per window" means
//
// A key has N slots. A call is admitted when it takes a free slot, and the
// slot then stays taken for window from the moment the store granted it, as
// the store's clock measures it, whatever the caller does next: it is never
// given back early. So in any interval of length window at most N calls are
// admitted, across every process that uses the same store, key and N. There
// are no fixed buckets and no refill rate: a slot frees window after it was
// taken (see below how precisely), and a waiting caller (Wait) takes it
// then.
//
// Each slot is a permit of a dlock semaphore with N permits on the key (a
// plain lock when N is 1), taken with a lease of window and no renewal.
// Once granted, the hold is detached (dlock.Lock.Detach) and left to its
// lease, so that nothing of it stays in the process: no goroutine, no timer,
// and nothing that dlock.Client.Close would release. The slot ends when its
// lease ends on the store, window after the store granted it, even if the
// process exits at once; that is what makes the limit hold across
// short-lived processes (see `dlock run --rate`).
//
// On stores whose holds cannot outlive their handle (etcd and ZooKeeper,
// see below) the hold is handed to its lease with dlock.Lock.ReleaseAfter
// instead, a second request that sets the lease to the rest of the window
// as measured from after the grant's answer arrived: the slot then lasts at
// least window and at most a round trip more.
// Every user of a key must give the same N (an error wrapping
// dlock.ErrModeMismatch otherwise); users may give different windows, each
// slot then lasting its taker's window.
//
// # Stores
//
// The guarantee is as good as the store's leases:
//
//   - Stores that time leases on their own clock to the millisecond or
//     better (Redis in its default script mode, PostgreSQL, MySQL/MariaDB,
//     SQLite, and the in-process memdlock within one process): at most N
//     admissions in any window as that clock measures it. SQLite's clock is
//     the wall clock of the host whose processes share the file, so a step
//     of that clock moves the slots' ends with it.
//   - Stores with a coarse lease clock (Capabilities.TTLResolution;
//     memcached counts whole seconds and may end a lease up to a second
//     early): each lease is asked for two units longer than window, so that
//     a slot still lasts at least window; it may then last up to two units
//     (plus a round trip) more. Such stores have plain locks only, so N must
//     be 1 there; a larger N is refused with an error wrapping
//     dlock.ErrUnsupported, as on every store without semaphores (Redis in
//     tx or legacy mode, redlock).
//   - Stores whose holds live in a client session (etcd, ZooKeeper): a
//     slot lasts its window only while the Client that took it stays open.
//     Closing that Client (or the process ending) ends its session and frees
//     its slots at once, and while it is open the driver times each hold on
//     the local clock. Use them only from a long-lived Client; `dlock run
//     --rate` refuses them.
//
// An operator's forced release of the key (`dlock release --force`,
// dlock.Client.ForceRelease) frees its slots early. On stores that queue
// waiters (Capabilities.FIFO), a place in the queue is a lease of window
// too: a process killed while it waits in Wait holds up the waiters behind
// it for up to window.
//
// The key is used as it is, and a key with N of 1 is a plain lock: do not
// use a rate limit's key as a lock too.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/errtext"
)

// Limiter admits at most N calls per sliding window on one key of a dlock
// store. It is safe for concurrent use; Limiters in other processes (or on
// other Clients) with the same store, key and N share its slots.
type Limiter struct {
	client *dlock.Client
	key    string
	n      int
	window time.Duration
	opts   []dlock.LockOption

	// turn serialises the Allow calls of this Limiter: dlock lets one
	// goroutine of a Client at a time try a key, and a second TryLock
	// meanwhile would fail without asking the store.
	turn chan struct{}
}

// Option configures a Limiter.
type Option func(*config)

type config struct {
	info *string
}

// WithInfo sets the owner info stored with each slot and shown by listings
// (`dlock ls`) while the slot is taken. The default is the Client's
// (dlock.WithOwnerInfo).
func WithInfo(info string) Option {
	return func(c *config) { c.info = &info }
}

// New returns a Limiter that admits at most n calls per window on key,
// counted by client's store. The Limiter uses client, which the caller keeps
// and closes: closing it after calls were admitted does not free their slots
// (except on the session stores described in the package documentation).
//
// It returns an error matching dlock.ErrInvalidArgument, a *dlock.ArgError
// naming the bad value, if client is nil ("client"), key is not a valid
// dlock key ("key"), n is below 1 or above the store's largest semaphore
// ("n"), or window is not a lease the store can time ("window": at least the
// store's minimum lease, and at most dlock.Client.MaxReleaseAfter: its
// maximum less two units of its TTLResolution); and an error wrapping dlock.ErrUnsupported if n is above 1
// and the store has no semaphores.
func New(client *dlock.Client, key string, n int, window time.Duration, opts ...Option) (*Limiter, error) {
	if client == nil {
		return nil, &dlock.ArgError{Name: "client", Value: nil, Reason: "must not be nil"}
	}
	caps := client.Capabilities()
	if err := checkKey(key, caps); err != nil {
		return nil, err
	}
	switch {
	case n < 1:
		return nil, &dlock.ArgError{Name: "n", Value: n, Reason: "must be at least 1"}
	case n > 1 && caps.MaxLimit > 0 && n > caps.MaxLimit:
		return nil, &dlock.ArgError{Name: "n", Value: n, Reason: fmt.Sprintf("is above this store's largest semaphore of %d", caps.MaxLimit)}
	case n > 1 && !caps.Modes.Has(driver.Semaphore):
		return nil, fmt.Errorf("ratelimit: %d calls per window on %q need semaphores: %w", n, key, dlock.ErrUnsupported)
	}
	if err := checkWindow(window, client); err != nil {
		return nil, err
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	lopts := []dlock.LockOption{dlock.WithTTL(leaseFor(window, caps)), dlock.WithoutRenewal()}
	if n > 1 {
		lopts = append(lopts, dlock.WithLimit(n))
	}
	if cfg.info != nil {
		lopts = append(lopts, dlock.WithInfo(*cfg.info))
	}
	return &Limiter{client: client, key: key, n: n, window: window, opts: lopts, turn: make(chan struct{}, 1)}, nil
}

// leaseFor returns the lease a slot is taken with: window, plus two units
// of a coarse store's lease clock, which may end a lease up to one unit
// early.
func leaseFor(window time.Duration, caps dlock.Capabilities) time.Duration {
	return window + 2*caps.TTLResolution
}

func checkKey(key string, caps dlock.Capabilities) error {
	maxLen := caps.MaxKeyLen
	if maxLen == 0 {
		maxLen = 1024
	}
	switch {
	case key == "":
		return &dlock.ArgError{Name: "key", Value: key, Reason: "must not be empty"}
	case len(key) > maxLen:
		return &dlock.ArgError{Name: "key", Value: key, Reason: fmt.Sprintf("is %d bytes, longer than this store's limit of %d", len(key), maxLen)}
	case !utf8.ValidString(key):
		return &dlock.ArgError{Name: "key", Value: key, Reason: "is not valid UTF-8"}
	case strings.IndexByte(key, 0) >= 0:
		return &dlock.ArgError{Name: "key", Value: key, Reason: "contains a NUL byte"}
	}
	return nil
}

func checkWindow(window time.Duration, client *dlock.Client) error {
	minTTL := client.Capabilities().MinTTL
	switch {
	case window <= 0:
		return &dlock.ArgError{Name: "window", Value: window, Reason: "must be positive"}
	case window < minTTL:
		return &dlock.ArgError{Name: "window", Value: window, Reason: fmt.Sprintf("is below this store's shortest lease of %v", minTTL)}
	case window <= dlock.DriftMargin(window):
		return &dlock.ArgError{Name: "window", Value: window, Reason: fmt.Sprintf("leaves no validity after dlock's drift margin of %v", dlock.DriftMargin(window))}
	case window > client.MaxReleaseAfter():
		// The lease is window and two units more (leaseFor), as in
		// dlock.Lock.ReleaseAfter; compared so, it cannot wrap around.
		return &dlock.ArgError{Name: "window", Value: window, Reason: fmt.Sprintf("is above this store's longest window of %v", client.MaxReleaseAfter())}
	}
	return nil
}

// Key returns the limiter's key.
func (l *Limiter) Key() string { return l.key }

// N returns the number of calls admitted per window.
func (l *Limiter) N() int { return l.n }

// Window returns the window: how long each admitted call keeps its slot.
func (l *Limiter) Window() time.Duration { return l.window }

// Allow asks once, without waiting for a slot to free, whether a call may
// go ahead now. It returns true if the call was admitted (it took a slot,
// which stays taken for the window), false if every slot is taken. An error
// means the store could not be asked or the slot could not be kept (see
// Wait); the call was not admitted then.
//
// Allow calls of one Limiter take turns (one store request each). A Wait on
// the same key and Client that is waiting for a slot makes Allow report
// false at once: every slot was taken when it last asked.
func (l *Limiter) Allow(ctx context.Context) (bool, error) {
	if ctx == nil {
		return false, &dlock.ArgError{Name: "ctx", Value: nil, Reason: "must not be nil"}
	}
	select {
	case l.turn <- struct{}{}:
	case <-ctx.Done():
		return false, fmt.Errorf("ratelimit: %q: %w", l.key, ctx.Err())
	}
	defer func() { <-l.turn }()
	lk, err := l.client.TryLock(ctx, l.key, l.opts...)
	if err != nil {
		if errors.Is(err, dlock.ErrNotAcquired) && !errors.Is(err, dlock.ErrClosed) && ctx.Err() == nil {
			return false, nil // every slot is taken
		}
		return false, fmt.Errorf("ratelimit: %w", errtext.Bare(err))
	}
	if err := l.keep(ctx, lk, time.Now()); err != nil {
		return false, err
	}
	return true, nil
}

// Wait waits until a slot is free and takes it, admitting the call, or until
// ctx ends. The wait is dlock's (dlock.Client.Lock): the store's answer says
// when the earliest slot frees, and stores that notify wake waiters. When ctx
// ends first, the error wraps dlock.ErrNotAcquired and ctx.Err(), and nothing
// was taken. Goroutines of one Client waiting on the same key queue locally
// and take the slots in turn.
//
// A slot can be lost between its grant and its hand-over to the lease, and
// a waiter's place in the store's queue (a lease of window too) can end
// while it waits: when the store took longer to answer than the window
// leaves, or an operator forced the key's release meanwhile. Wait then
// waits again; Allow returns an error wrapping dlock.ErrLost. Both return
// an error wrapping dlock.ErrClosed, without admitting the call, if the
// Client was closed.
func (l *Limiter) Wait(ctx context.Context) error {
	if ctx == nil {
		return &dlock.ArgError{Name: "ctx", Value: nil, Reason: "must not be nil"}
	}
	for {
		lk, err := l.client.Lock(ctx, l.key, l.opts...)
		if err == nil {
			err = l.keep(ctx, lk, time.Now())
		} else {
			err = fmt.Errorf("ratelimit: %w", errtext.Bare(err))
		}
		if !errors.Is(err, dlock.ErrLost) || ctx.Err() != nil {
			return err
		}
		// The slot, or the place in the store's queue, ended before
		// it could be kept (a store slower than the window, or a
		// forced release): wait again.
	}
}

// keep hands the slot lk, granted by the store before granted (a local
// time), to its lease until the window from the grant has passed, and ends
// the handle. Where holds are portable, Detach leaves the slot with the
// lease it was granted with: the window from the grant. Elsewhere it sets
// the lease to the time left with ReleaseAfter: the store received the
// acquisition before granted and receives this request after now, so the
// time left counted from now on the store reaches at least the grant plus
// the window.
//
// If that request fails without an answer, the slot keeps the lease it was
// granted with (the window), and the call is admitted all the same: the
// handle is done locally either way, and the Client forgets it. If the slot
// was lost or the Client closed, the call is not admitted.
func (l *Limiter) keep(ctx context.Context, lk *dlock.Lock, granted time.Time) error {
	// Where holds outlive their handle, the slot keeps the lease it was
	// granted with, without another request.
	switch err := lk.Detach(); {
	case err == nil:
		return nil
	case !errors.Is(err, dlock.ErrUnsupported):
		_ = lk.Release(context.WithoutCancel(ctx))
		return fmt.Errorf("ratelimit%s: the slot could not be kept, so the call was not admitted: %w", errtext.KeyedAfter(l.key, err), errtext.Bare(err))
	}
	left := max(l.window-time.Since(granted), time.Nanosecond) // never 0: that would release
	err := lk.ReleaseAfter(ctx, left)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, dlock.ErrLost), errors.Is(err, dlock.ErrClosed), errors.Is(err, dlock.ErrNotHeld), errors.Is(err, dlock.ErrInvalidArgument):
		// Whatever remains of the hold is not this call's slot.
		_ = lk.Release(context.WithoutCancel(ctx))
		return fmt.Errorf("ratelimit%s: the slot could not be kept, so the call was not admitted: %w", errtext.KeyedAfter(l.key, err), errtext.Bare(err))
	}
	return nil
}
