package dlock

import (
	"context"
	"time"

	"github.com/dlockhq/dlock/internal/inflight"
)

// This file ties the Client to package internal/inflight, the one piece of
// machinery for driver requests that outlive their caller's wait. Drivers
// therefore need not return promptly on cancellation (go-redis, gomemcache
// and go-zookeeper cannot), and never see a Release for an owner while an
// Acquire for that owner still runs: see "Contexts" in package driver.

// call is one driver request running on a goroutine of its own.
type call[T any] struct{ inflight.Call[T] }

// abandonGrace is how long a caller whose context ended waits for its
// request to come back before it leaves the request to finish alone. A
// driver that honours cancellation answers well within it, so that the
// caller cleans up before it returns; a hung store does not, and the
// caller still returns promptly.
const abandonGrace = 50 * time.Millisecond

// start runs fn(ctx) on a goroutine that Close waits for, and then stop, if
// not nil (see inflight.Call.Start). The Client must not be closed yet;
// after Close, callers check before they start.
func start[T any](c *Client, ctx context.Context, stop context.CancelFunc, fn func(context.Context) (T, error)) *call[T] {
	cl := &call[T]{}
	cl.Start(c.pool.Run, ctx, stop, fn)
	return cl
}

// spawn runs f on a worker goroutine of the Client (see inflight.Pool).
// Close waits for the workers, which leave once it has begun.
func (c *Client) spawn(f func()) {
	c.pool.Go(f)
}

// workerIdle is how long a worker waits for its next task before it ends.
const workerIdle = 5 * time.Second

// do runs fn(ctx) and returns its result, or ctx's error soon after ctx
// ends. A request that is still running then is returned as abandoned
// (non-nil): it completes in the background, and the caller decides what
// happens after it (see after). A ctx that cannot end, or a driver that
// returns promptly on its own (Capabilities.CancelsPromptly), runs fn on the
// caller's goroutine.
func do[T any](c *Client, ctx context.Context, fn func(context.Context) (T, error)) (T, *call[T], error) {
	if c.caps.CancelsPromptly || ctx.Done() == nil {
		v, err := fn(ctx)
		return v, nil, err
	}
	cl := start(c, ctx, nil, fn)
	v, err, ok := cl.wait(ctx)
	if !ok {
		return v, cl, err
	}
	return v, nil, err
}

// wait returns the call's result, or ctx's error and false if ctx ends
// (and abandonGrace passes) first.
func (cl *call[T]) wait(ctx context.Context) (T, error, bool) {
	return cl.Wait(ctx, abandonGrace)
}

// after runs fn with the call's result once it has completed, on a
// goroutine that Close waits for.
func (cl *call[T]) after(c *Client, fn func(T, error)) { cl.Then(c.spawn, fn) }

// tracker counts operations in flight, so that Close can wait for them.
type tracker struct{ inflight.Tracker }

func (t *tracker) add()  { t.Add() }
func (t *tracker) done() { t.Done() }

// wait waits until nothing is in flight or timeout passes, and reports
// whether nothing is.
func (t *tracker) wait(timeout time.Duration) bool {
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	select {
	case <-t.Idle():
		return true
	case <-tm.C:
		return false
	}
}
