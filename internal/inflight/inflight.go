// Package inflight holds the one piece of machinery for store requests that
// outlive their caller's wait: the request runs on a worker goroutine that
// its owner's Close waits for, the caller gets its answer or gives up, and
// whatever comes after the request (its clean-up) waits until it has ended,
// so that a release never overtakes the acquisition it undoes. Package dlock
// runs its driver requests through it (Call), and package quorum its calls
// on each node (Order).
package inflight

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Tracker counts work in flight, so that a Close can wait for it. Unlike a
// sync.WaitGroup, it may gain work while someone waits, and it allocates
// nothing unless someone waits. The zero value is ready to use.
type Tracker struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // made by Idle, closed when n is zero
}

// Add counts one more piece of work.
func (t *Tracker) Add() {
	t.mu.Lock()
	if t.n++; t.n == 1 {
		t.idle = nil // closed, if anyone waited: the next wait needs another
	}
	t.mu.Unlock()
}

// Done ends a piece of work counted by Add.
func (t *Tracker) Done() {
	t.mu.Lock()
	if t.n--; t.n == 0 && t.idle != nil {
		close(t.idle)
	}
	t.mu.Unlock()
}

// Idle returns a channel that is closed once nothing is in flight.
func (t *Tracker) Idle() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.idle == nil {
		if t.idle = make(chan struct{}); t.n == 0 {
			close(t.idle)
		}
	}
	return t.idle
}

// Pool runs tasks on worker goroutines: an idle one if there is one, else a
// new one. Workers are kept for a while after their task, because a fresh
// goroutine must grow its stack through a driver's deep call chain (a client
// library, a protocol, a connection pool) on every request, and that copying
// costs more than the request's own work.
type Pool struct {
	Tasks   chan Task       // hands a task to an idle worker; unbuffered
	Workers *Tracker        // counts the workers, so that Close waits for them
	Closing <-chan struct{} // closed when Close begins: idle workers leave
	Idle    time.Duration   // how long a worker waits for its next task
}

// Task is work for a Pool.
type Task interface{ Run() }

// taskFunc is a func as a Task.
type taskFunc func()

func (f taskFunc) Run() { f() }

// Go runs f on a worker.
func (p Pool) Go(f func()) { p.Run(taskFunc(f)) }

// Run runs t on a worker.
func (p Pool) Run(t Task) {
	select {
	case p.Tasks <- t:
		return
	default:
	}
	p.Workers.Add()
	go p.work(t)
}

func (p Pool) work(t Task) {
	defer p.Workers.Done()
	idle := time.NewTimer(p.Idle)
	defer idle.Stop()
	for {
		t.Run()
		idle.Reset(p.Idle)
		select {
		case t = <-p.Tasks:
		case <-idle.C:
			return
		case <-p.Closing:
			return
		}
	}
}

// Call is one request running on a worker of its own; it is the Task that
// runs it.
type Call[T any] struct {
	ctx  context.Context // the request's
	fn   func(context.Context) (T, error)
	stop context.CancelFunc // ends ctx once the request has ended; may be nil
	done chan struct{}      // closed when val and err are set
	val  T
	err  error
}

// Start runs fn(ctx) on a worker that run starts (Pool.Run), and then
// stop, if not nil: a context of the request's own ends only after the call
// has. c must be new: a zero Call, which Start starts once.
func (c *Call[T]) Start(run func(Task), ctx context.Context, stop context.CancelFunc, fn func(context.Context) (T, error)) {
	c.ctx, c.stop, c.fn, c.done = ctx, stop, fn, make(chan struct{})
	run(c)
}

// Run runs the request; Start has it run once.
func (c *Call[T]) Run() {
	c.val, c.err = c.fn(c.ctx)
	close(c.done)
	if c.stop != nil {
		c.stop()
	}
}

// Wait returns the call's result, or an error and false if ctx or the
// request's own context ends and grace passes before the call has ended:
// the call then runs on alone, and whatever must follow it goes through
// Then. The error is that of the context that ended.
func (c *Call[T]) Wait(ctx context.Context, grace time.Duration) (T, error, bool) {
	select {
	case <-c.done:
	case <-ctx.Done():
	case <-c.ctx.Done():
		ctx = c.ctx
	}
	select {
	case <-c.done: // seen first: it ended before its stop (see Run)
		return c.val, c.err, true
	default:
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
		return c.val, c.err, true
	case <-t.C:
		var zero T
		return zero, ctx.Err(), false
	}
}

// Then runs fn with the call's result once the call has ended, on a worker
// that spawn starts.
func (c *Call[T]) Then(spawn func(func()), fn func(T, error)) {
	spawn(func() {
		<-c.done
		fn(c.val, c.err)
	})
}

// Order orders the requests of one key (one owner's hold on one store):
// each request waits until those entered before it with the same key have
// ended (a request that gave up waiting for its turn counts as ended only
// once those before it have), so that a release cannot overtake the acquisition it should undo,
// and a clean-up release cannot remove what a later acquisition was granted.
// An acquisition is refused (the store is slow or hung, and requests would
// pile up) when two requests of its key are in flight or waiting already,
// and a clean-up right behind another clean-up is refused (the first does
// the work). The zero value is ready to use.
type Order[K comparable] struct {
	mu   sync.Mutex
	keys map[K]*queue
}

// queue is the requests of one key in flight or waiting.
type queue struct {
	n       int           // requests entered and not ended
	last    chan struct{} // closed when the latest entered request ends
	cleanup bool          // the latest entered request is a clean-up
}

// Kind is the kind of a request entered in an Order.
type Kind uint8

// The kinds of requests.
const (
	Acquire Kind = iota // refused behind two requests or more
	Release             // never refused
	Cleanup             // refused right behind another clean-up
)

// ErrBusy is the error of an acquisition that an Order refused.
var ErrBusy = errors.New("earlier requests of this owner are still in flight on this store")

// Turn is a request's place in an Order: wait for it, make the request,
// then end it. A nil Turn is a refused request.
type Turn struct {
	prev <-chan struct{} // closed when the request entered before it ends
	end  func()
}

// Enter enters a request of kind for k, or returns nil if it is refused.
// Enter before the request is handed to another goroutine, so that the
// order of entry is the order in which the requests were issued.
func (o *Order[K]) Enter(k K, kind Kind) *Turn {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.keys[k]
	switch {
	case q == nil:
		q = &queue{}
		if o.keys == nil {
			o.keys = map[K]*queue{}
		}
		o.keys[k] = q
	case kind == Acquire && q.n > 1, kind == Cleanup && q.cleanup:
		return nil
	}
	mine := make(chan struct{})
	t := &Turn{prev: q.last}
	q.last, q.cleanup = mine, kind == Cleanup
	q.n++
	t.end = func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		after(t.prev, func() { close(mine) })
		if q.n--; q.n == 0 {
			delete(o.keys, k)
		}
	}
	return t
}

// after runs f once prev is closed: at once if prev is nil or closed
// already, else on a goroutine that waits for it. A request that gave up
// waiting for its turn ends before the requests ahead of it; the requests
// behind it must still wait for those.
func after(prev <-chan struct{}, f func()) {
	select {
	case <-prev:
	default:
		if prev != nil {
			go func() { <-prev; f() }()
			return
		}
	}
	f()
}

// Wait waits until the requests entered before t have ended, or ctx ends.
// A nil t is refused: Wait returns ErrBusy.
func (t *Turn) Wait(ctx context.Context) error {
	switch {
	case t == nil:
		return ErrBusy
	case t.prev == nil:
		return nil
	}
	select {
	case <-t.prev:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for an earlier request of this owner: %w", context.Cause(ctx))
	}
}

// End ends t's request, letting the next one go; a nil t has nothing to
// end.
func (t *Turn) End() {
	if t != nil {
		t.end()
	}
}
