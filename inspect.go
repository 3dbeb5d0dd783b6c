package dlock

import "context"

// Holders returns the live holders of exactly key (not of other keys that
// start with it), sorted by token: their mode, the owner's public ID
// (OwnerID), the holder's info (host and process, unless WithInfo said
// otherwise), the fencing token and the time left on the lease as the store
// sees it. A Semaphore has one holder per permit taken, a read-write lock
// one per reader. It returns an error wrapping ErrUnsupported if the backend
// cannot list holders, and a nil slice when nobody holds key.
//
// The answer is a snapshot: by the time it returns, a holder may have
// released and another acquired. Use it to show and diagnose, not to decide
// whether to acquire.
func (c *Client) Holders(ctx context.Context, key string) ([]Holder, error) {
	if err := c.checkKey(key); err != nil {
		return nil, err
	}
	hs, err := c.List(ctx, key)
	if err != nil {
		return nil, err
	}
	var exact []Holder
	for _, h := range hs {
		if h.Key == key {
			exact = append(exact, h)
		}
	}
	return exact, nil
}

// HoldCount reports how many times this process holds the lock through l:
// one for the acquisition, plus one for each re-entry (a Lock, TryLock or Do
// on the same key with a context that carries l) not yet released. It is 0
// once the lock has ended (released, lost or expired).
func (l *Lock) HoldCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != held {
		return 0
	}
	return 1 + l.depth
}
