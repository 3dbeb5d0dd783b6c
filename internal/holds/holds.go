// Package holds keeps the local deadlines of a session-based driver.
//
// On ZooKeeper and etcd a driver attaches every hold to one session (an
// ephemeral node's session, a lease kept alive by the client), so the store
// ends a hold only when the whole session ends. The per-request TTL of the
// driver contract is then kept on this process's clock: the driver records
// each hold in a Table with its TTL as deadline, moves the deadline on every
// Refresh, and deletes the store's record when a deadline passes. A process
// that dies or is cut off is covered by the session's own expiry on the
// server's clock.
package holds

import (
	"sync"
	"time"
)

// Table maps owners to the records of their holds, each with a deadline. Its
// methods are safe for concurrent use.
type Table[T any] struct {
	expire func(owner string, v T)

	mu     sync.Mutex
	m      map[string]*entry[T]
	closed bool
	wg     sync.WaitGroup // running expire calls
}

type entry[T any] struct {
	v     T
	timer *time.Timer
}

// New returns an empty table. expire is called in a goroutine of its own, at
// most once per record, when the record's deadline passes before Put, Touch or
// Take moved or removed it; the record has already left the table when expire
// runs. Close waits for expire calls in progress.
func New[T any](expire func(owner string, v T)) *Table[T] {
	return &Table[T]{expire: expire, m: map[string]*entry[T]{}}
}

// Put records v for owner with a deadline ttl from now, replacing any earlier
// record of owner and its deadline. It does nothing after Close.
func (t *Table[T]) Put(owner string, v T, ttl time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if old := t.m[owner]; old != nil {
		old.timer.Stop()
	}
	e := &entry[T]{v: v}
	e.timer = time.AfterFunc(ttl, func() { t.fire(owner, e) })
	t.m[owner] = e
}

// fire removes e if it is still owner's record and passes it to expire.
func (t *Table[T]) fire(owner string, e *entry[T]) {
	t.mu.Lock()
	if t.closed || t.m[owner] != e {
		t.mu.Unlock()
		return
	}
	delete(t.m, owner)
	t.wg.Add(1)
	t.mu.Unlock()
	defer t.wg.Done()
	t.expire(owner, e.v)
}

// Get returns owner's record.
func (t *Table[T]) Get(owner string) (T, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.m[owner]; e != nil {
		return e.v, true
	}
	var zero T
	return zero, false
}

// Touch moves owner's deadline to ttl from now. It reports false if owner has
// no record (it was never put, was taken, or has expired).
func (t *Table[T]) Touch(owner string, ttl time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[owner]
	if e == nil {
		return false
	}
	// Reset cannot stop a call that is already running; such a call finds
	// a different record (or none) only if Put or Take ran, so give the
	// record a new identity to make the running call a no-op.
	e.timer.Stop()
	ne := &entry[T]{v: e.v}
	ne.timer = time.AfterFunc(ttl, func() { t.fire(owner, ne) })
	t.m[owner] = ne
	return true
}

// Update replaces owner's record with f of it, keeping its deadline. It
// reports false if owner has no record.
func (t *Table[T]) Update(owner string, f func(T) T) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[owner]
	if e == nil {
		return false
	}
	e.v = f(e.v)
	return true
}

// Take removes owner's record and cancels its deadline.
func (t *Table[T]) Take(owner string) (T, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[owner]
	if e == nil {
		var zero T
		return zero, false
	}
	e.timer.Stop()
	delete(t.m, owner)
	return e.v, true
}

// Len returns the number of records.
func (t *Table[T]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// Close cancels every deadline, drops the records and waits for expire calls
// in progress. Put does nothing afterwards.
func (t *Table[T]) Close() {
	t.mu.Lock()
	t.closed = true
	for owner, e := range t.m {
		e.timer.Stop()
		delete(t.m, owner)
	}
	t.mu.Unlock()
	t.wg.Wait()
}
