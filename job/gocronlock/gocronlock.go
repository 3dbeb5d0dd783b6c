// Package gocronlock lets gocron (github.com/go-co-op/gocron/v2) schedulers
// on many hosts run each job at most once per firing, with a dlock lock per
// job: it is a gocron.Locker built on package job.
//
//	locker := gocronlock.New(client, job.AtLeast(time.Minute), job.AtMost(time.Hour))
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
//
// gocron asks the Locker for the job's name before each run and skips the run
// if it gets an error: with a dlock lock held elsewhere, that error wraps
// job.ErrSkipped (gocron reports it to AfterLockError listeners). After the
// run, gocron unlocks: the lock is released, or kept until job.AtLeast has
// passed, so that schedulers firing a little later skip too.
//
// gocron does not hand the lock to the job's function, so a lost lock or
// job.AtMost cannot stop it: at AtMost the lock is released for the next
// firing while the function may still run. A job that must stop then should
// run its work through job.Run, whose function's context ends.
//
// This package is a module of its own, so that dlock's users do not download
// gocron unless they use it.
package gocronlock

import (
	"context"

	"github.com/go-co-op/gocron/v2"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/job"
)

// Locker is a gocron.Locker that takes a dlock lock named after the job.
type Locker struct {
	client *dlock.Client
	opts   []job.Option
}

var _ gocron.Locker = (*Locker)(nil)

// New returns a Locker that takes the jobs' locks on client with the options
// of package job (job.AtLeast, job.AtMost, job.WithLockOptions). Bad options
// are reported by Lock, as a *dlock.ArgError, for every run.
func New(client *dlock.Client, opts ...job.Option) *Locker {
	return &Locker{client: client, opts: opts}
}

// Lock implements gocron.Locker: it makes one attempt to take the lock named
// key (gocron passes the job's name). If another scheduler holds it, the
// error wraps job.ErrSkipped, and gocron skips this run.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	h, err := job.Acquire(ctx, l.client, key, l.opts...)
	if err != nil {
		return nil, err
	}
	return lock{h}, nil
}

// lock is a gocron.Lock over a job's Hold.
type lock struct{ h *job.Hold }

// Unlock implements gocron.Lock: it releases the lock, or keeps it until
// job.AtLeast has passed.
func (k lock) Unlock(ctx context.Context) error { return k.h.Release(ctx) }
