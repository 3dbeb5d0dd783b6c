package zkdlock

import (
	"sync"
	"time"
)

// Lingering parents.
//
// A key's znode (its parent) outlives the driver's last node under it by
// the linger period, so that a key locked again and again costs one Create
// per lock instead of a failed Create, a CreateContainer and a Create. When
// a node of the driver under a parent goes, the driver schedules the
// parent's removal; an Acquire of the same key by the driver cancels it
// while it runs and, if the Acquire leaves no node behind, schedules it
// again when it ends. When the period passes, the driver deletes the parent
// if it is empty. (The driver does not count its nodes under each parent:
// a removal that comes while another owner of the driver still has a node
// there costs one refused Delete, in the background.)
//
// Nothing else needs to know of this: ZooKeeper deletes a znode only if it
// has no children, so Delete(parent, -1) fails with ErrNotEmpty while any
// contender (of any driver, this one included) is queued there, and with
// ErrNoNode if it is already gone; both are harmless. A contender whose
// Create races with the deletion and finds the parent gone creates it again
// (see create), and one whose fresh parent is deleted between its
// CreateContainer and its Create does the same. Parents stay container
// znodes, which the server deletes on its own once they are empty, should
// the driver not get to it (a process that dies, a connection lost).

// lingering tracks the parents of one driver: Acquire calls in flight and
// pending removals, by parent path.
type lingering struct {
	period time.Duration       // 0: delete parents at once
	remove func(parent string) // deletes a parent if it is empty

	mu        sync.Mutex
	closed    bool
	acquiring map[string]int      // Acquire calls in flight
	pending   map[string]*removal // scheduled removals
	running   sync.WaitGroup      // removals in progress
}

// removal is a parent's scheduled removal.
type removal struct{ timer *time.Timer }

func newLingering(period time.Duration, remove func(parent string)) *lingering {
	return &lingering{
		period:    period,
		remove:    remove,
		acquiring: map[string]int{},
		pending:   map[string]*removal{},
	}
}

// begin records an Acquire of the key whose znode is parent and cancels the
// parent's pending removal.
func (l *lingering) begin(parent string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acquiring[parent]++
	if r := l.pending[parent]; r != nil {
		r.timer.Stop()
		delete(l.pending, parent)
	}
}

// end records the end of an Acquire that begin recorded. left reports
// whether it left a node of the driver under parent: if not, and there is a
// linger period, the parent's removal is scheduled, as after a release.
// (Without one, the Acquire has removed what it made.)
func (l *lingering) end(parent string, left bool) {
	l.mu.Lock()
	if l.acquiring[parent]--; l.acquiring[parent] <= 0 {
		delete(l.acquiring, parent)
	}
	l.mu.Unlock()
	if !left && l.period > 0 {
		l.released(parent)
	}
}

// released is called when a node of the driver under parent has gone (or
// may have gone): it deletes the parent if it is empty, at once without a
// linger period or once the driver is closing, otherwise once the period
// has passed with no Acquire of the key by the driver. An Acquire in flight
// schedules the removal itself when it ends without a node.
func (l *lingering) released(parent string) {
	if l.period <= 0 {
		l.remove(parent)
		return
	}
	l.mu.Lock()
	if l.acquiring[parent] > 0 {
		l.mu.Unlock()
		return
	}
	if l.closed {
		l.mu.Unlock()
		l.remove(parent)
		return
	}
	if r := l.pending[parent]; r != nil {
		r.timer.Stop()
	}
	r := &removal{}
	r.timer = time.AfterFunc(l.period, func() { l.fire(parent, r) })
	l.pending[parent] = r
	l.mu.Unlock()
}

// fire removes parent if r is still its pending removal.
func (l *lingering) fire(parent string, r *removal) {
	l.mu.Lock()
	if l.closed || l.pending[parent] != r || l.acquiring[parent] > 0 {
		l.mu.Unlock()
		return
	}
	delete(l.pending, parent)
	l.running.Add(1)
	l.mu.Unlock()
	defer l.running.Done()
	l.remove(parent)
}

// drain cancels the pending removals and starts removing their parents at
// once, at most parallel at a time; afterwards released removes at once. It
// returns a channel closed when these removals, and those already in
// progress, have ended (closing the connection ends them).
func (l *lingering) drain(parallel int) <-chan struct{} {
	l.mu.Lock()
	l.closed = true
	parents := make([]string, 0, len(l.pending))
	for p, r := range l.pending {
		r.timer.Stop()
		parents = append(parents, p)
	}
	clear(l.pending)
	l.mu.Unlock()
	sem := make(chan struct{}, parallel)
	for _, p := range parents {
		l.running.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			l.remove(p)
		})
	}
	done := make(chan struct{})
	go func() {
		l.running.Wait()
		close(done)
	}()
	return done
}
