package dlock

import (
	"context"
	"sync"
	"time"
)

// This file holds the one piece of machinery for driver requests that outlive
// their caller's wait: a caller whose context ends gets its answer at once,
// while the request, which may already be on the wire, runs to completion on
// a goroutine of its own (bounded by the driver's own network timeouts), and
// whatever it left on the store is cleaned up after it. Drivers therefore
// need not return promptly on cancellation (go-redis, gomemcache and
// go-zookeeper cannot), and never see a Release for an owner while an
// Acquire for that owner still runs: see "Contexts" in package driver.

// call is one driver request running on a goroutine of its own.
type call[T any] struct {
	done chan struct{} // closed when val and err are set
	val  T
	err  error
}

// abandonGrace is how long a caller whose context ended waits for its
// request to come back before it leaves the request to finish alone. A
// driver that honours cancellation answers well within it, so that the
// caller cleans up before it returns; a hung store does not, and the
// caller still returns promptly.
const abandonGrace = 50 * time.Millisecond

// start runs fn(ctx) on a goroutine that Close waits for. The Client must
// not be closed yet; after Close, callers check before they start.
func start[T any](c *Client, ctx context.Context, fn func(context.Context) (T, error)) *call[T] {
	cl := &call[T]{done: make(chan struct{})}
	c.spawn(func() {
		defer close(cl.done)
		cl.val, cl.err = fn(ctx)
	})
	return cl
}

// spawn runs f on a worker goroutine of the Client: an idle one if there is
// one, else a new one. Workers are kept for a while after their task,
// because a fresh goroutine must grow its stack through a driver's deep
// call chain (a client library, a protocol, a connection pool) on every
// request, and that copying costs more than the request's own work. Close
// waits for the workers, which leave once it has begun.
func (c *Client) spawn(f func()) {
	select {
	case c.tasks <- f:
		return
	default:
	}
	c.bg.add()
	go c.work(f)
}

// workerIdle is how long a worker waits for its next task before it ends.
const workerIdle = 5 * time.Second

func (c *Client) work(f func()) {
	defer c.bg.done()
	var idle *time.Timer
	for {
		f()
		if c.closing.Err() != nil {
			return
		}
		if idle == nil {
			idle = time.NewTimer(workerIdle)
		} else {
			idle.Reset(workerIdle)
		}
		select {
		case f = <-c.tasks:
			idle.Stop()
		case <-idle.C:
			return
		case <-c.closing.Done():
			return
		}
	}
}

// do runs fn(ctx) and returns its result, or ctx's error soon after ctx
// ends. A request that is still running then is returned as abandoned
// (non-nil): it completes in the background, and the caller decides what
// happens after it (see after). A ctx that cannot end, or a driver that
// returns promptly on its own (Capabilities.CancelsPromptly), runs fn on the
// caller's goroutine.
func do[T any](c *Client, ctx context.Context, fn func(context.Context) (T, error)) (T, *call[T], error) {
	if ctx.Done() == nil || c.caps.CancelsPromptly {
		v, err := fn(ctx)
		return v, nil, err
	}
	cl := start(c, ctx, fn)
	v, err, ok := cl.wait(ctx)
	if !ok {
		return v, cl, err
	}
	return v, nil, err
}

// wait returns the call's result, or ctx's error and false if ctx ends
// (and abandonGrace passes) first.
func (cl *call[T]) wait(ctx context.Context) (T, error, bool) {
	return cl.waitFor(ctx, abandonGrace)
}

// waitFor is wait with a grace of its own.
func (cl *call[T]) waitFor(ctx context.Context, grace time.Duration) (T, error, bool) {
	select {
	case <-cl.done:
		return cl.val, cl.err, true
	case <-ctx.Done():
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-cl.done:
		return cl.val, cl.err, true
	case <-t.C:
		var zero T
		return zero, ctx.Err(), false
	}
}

// after runs fn with the call's result once it has completed, on a
// goroutine that Close waits for.
func (cl *call[T]) after(c *Client, fn func(T, error)) {
	c.spawn(func() {
		<-cl.done
		fn(cl.val, cl.err)
	})
}

// tracker counts operations in flight, so that Close can wait for them.
// Unlike a sync.WaitGroup, it may gain work while someone waits, and it
// allocates nothing unless someone waits.
type tracker struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // made by wait, closed when n drops to zero
}

func (t *tracker) add() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *tracker) done() {
	t.mu.Lock()
	if t.n--; t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
	t.mu.Unlock()
}

// wait waits until nothing is in flight or timeout passes, and reports
// whether nothing is.
func (t *tracker) wait(timeout time.Duration) bool {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return true
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	idle := t.idle
	t.mu.Unlock()
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	select {
	case <-idle:
		return true
	case <-tm.C:
		return false
	}
}
