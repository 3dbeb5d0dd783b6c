package dlock

import (
	"context"
	"time"
)

// Reentrancy. Go has no thread identity to tell a nested acquisition by the
// holder from one by somebody else, so the holder says who it is: a context
// derived from a held lock's Context (or the context Do passes to its
// function) carries that lock. Lock, TryLock and Do on the same Client and
// key with such a context re-enter the held lock instead of waiting for it.

// heldChain lists the locks a context carries, innermost first.
type heldChain struct {
	lock   *Lock
	parent *heldChain
}

type heldKey struct{}

// withHeld returns ctx carrying l on top of the locks ctx already carries.
func withHeld(ctx context.Context, l *Lock) context.Context {
	return context.WithValue(ctx, heldKey{}, &heldChain{lock: l, parent: heldBy(ctx)})
}

// heldBy returns the locks ctx carries.
func heldBy(ctx context.Context) *heldChain {
	h, _ := ctx.Value(heldKey{}).(*heldChain)
	return h
}

// heldRoot is what a lock's context (Lock.Context) derives from: like
// context.Background, but carrying the lock on top of the locks its
// acquisition's context carries. The Lock holds it, so that it costs no
// allocation of its own.
type heldRoot struct{ chain heldChain }

func (*heldRoot) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*heldRoot) Done() <-chan struct{}       { return nil }
func (*heldRoot) Err() error                  { return nil }

func (r *heldRoot) Value(key any) any {
	if key == (heldKey{}) {
		return &r.chain
	}
	return nil
}

// heldIn returns the lock on key of this Client that ctx carries, if any.
func (c *Client) heldIn(ctx context.Context, key string) *Lock {
	for h := heldBy(ctx); h != nil; h = h.parent {
		if h.lock.c == c && h.lock.req.Key == key {
			return h.lock
		}
	}
	return nil
}

// reenter counts one more acquisition of a held lock. It returns the reason
// the lock ended if it is no longer held.
func (l *Lock) reenter() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != held {
		return l.cause
	}
	l.depth++
	return nil
}

// leaveNested undoes one re-entry: it reports true if the lock had been
// re-entered, in which case the hold stays.
func (l *Lock) leaveNested() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != held || l.depth == 0 {
		return false
	}
	l.depth--
	return true
}
