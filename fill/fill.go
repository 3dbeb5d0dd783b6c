// Package fill fills a cache once across a fleet: when many processes miss
// the same entry at once (a cold start, an expired hot key), one of them
// computes the value and the others wait and read what it stored, instead
// of all of them hitting the database behind the cache (the "thundering
// herd", or cache stampede).
//
// The caller brings the cache: Once only needs a function that reads an
// entry, one that computes it and one that stores it, so any cache works
// (Redis, memcached, a table, a file). The steps are the classic
// double-checked fill:
//
//  1. read the cache; a hit is returned at once, with no lock;
//  2. on a miss, take the dlock lock on the entry's key (waiting while
//     another process fills it);
//  3. read the cache again: a waiter finds the value the holder stored and
//     returns it without computing;
//  4. otherwise compute, store, release.
//
// The computation runs under a context that ends if the lock is lost (its
// lease could not be renewed), so a filler cut off from the lock store stops
// rather than racing the next one. If computing or storing
// fails, Once returns the error and releases the lock; the next waiter then
// tries to fill the entry itself.
package fill

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/errtext"
)

// Cache is what Once needs of the cache behind it.
type Cache[T any] struct {
	// Load reads the entry. ok reports a hit; an error ends Once.
	Load func(ctx context.Context) (v T, ok bool, err error)
	// Compute makes the value on a miss. Its context ends when the lock
	// is lost or Once's context ends.
	Compute func(ctx context.Context) (T, error)
	// Store writes the value computed, before the lock is released, so
	// that the waiters find it.
	Store func(ctx context.Context, v T) error
}

// Once returns the cache entry that c.Load finds, and on a miss makes sure
// that only one caller across every process using the same lock store
// computes and stores it, under the dlock lock named key; the others wait
// for the lock and then read the stored value. opts are passed to
// Client.Lock (WithTTL, a wait bound through ctx's deadline, and so on).
//
// Once returns the first error of c's functions as it is (wrapped with the
// step that failed), an error wrapping dlock.ErrNotAcquired when the wait
// for the lock ends, and an error wrapping dlock.ErrLost when the lock is
// lost while computing or storing; a value it computed then is not returned.
// A nil ctx, client or function of c is a *dlock.ArgError, before c.Load is
// called. The lock is released however the functions end, panics included
// (the panic goes on once it is released), as dlock.Client.Do does.
func Once[T any](ctx context.Context, client *dlock.Client, key string, c Cache[T], opts ...dlock.LockOption) (T, error) {
	var zero T
	switch {
	case ctx == nil:
		return zero, &dlock.ArgError{Name: "ctx", Value: nil, Reason: "must not be nil"}
	case client == nil:
		return zero, &dlock.ArgError{Name: "client", Value: nil, Reason: "must not be nil"}
	case c.Load == nil || c.Compute == nil || c.Store == nil:
		return zero, &dlock.ArgError{Name: "cache", Value: fmt.Sprintf("Load %v, Compute %v, Store %v", c.Load != nil, c.Compute != nil, c.Store != nil), Reason: "needs all three functions"}
	}
	if v, ok, err := c.Load(ctx); err != nil {
		return zero, fmt.Errorf("fill %q: reading the cache: %w", key, err)
	} else if ok {
		return v, nil
	}
	var v T
	ran, stored := false, false
	err := client.Do(ctx, key, func(ctx context.Context, _ *dlock.Lock) (err error) {
		ran = true
		v, err = fillHeld(ctx, key, c)
		stored = err == nil
		return err
	}, opts...)
	switch {
	case !ran:
		return zero, fmt.Errorf("fill%s: %w", errtext.Keyed(key, err), errtext.Bare(err))
	case stored && errors.Is(err, dlock.ErrLost):
		// The lock ended before the value was stored: another filler
		// may have taken over meanwhile.
		return zero, fmt.Errorf("fill%s: the lock ended while filling: %w", errtext.Keyed(key, err), errtext.Bare(err))
	case !stored:
		return zero, err
	}
	return v, nil // a release that failed leaves the lock to its lease
}

// fillHeld runs steps 3 and 4 under the lock; ctx ends when the lock is
// lost or Once's context ends.
func fillHeld[T any](ctx context.Context, key string, c Cache[T]) (T, error) {
	var zero T
	if v, ok, err := c.Load(ctx); err != nil {
		return zero, fmt.Errorf("fill %q: reading the cache: %w", key, err)
	} else if ok {
		return v, nil // filled by the holder before us
	}
	v, err := c.Compute(ctx)
	if err != nil {
		return zero, fmt.Errorf("fill %q: computing: %w", key, err)
	}
	if err := c.Store(ctx, v); err != nil {
		return zero, fmt.Errorf("fill %q: storing: %w", key, err)
	}
	return v, nil
}
