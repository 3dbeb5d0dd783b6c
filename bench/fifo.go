package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// confirmTimeout bounds how long a goroutine's queue entry may take to show
// on the store before the next goroutine may queue anyway (the join is then
// counted as unconfirmed, and the FIFO check of the cell is void).
const confirmTimeout = time.Second

// fifoHandoff measures the handoff on a hot key and checks that the lock is
// granted in the order the goroutines started waiting.
//
// g goroutines, each with a client of its own (rc.lks[i]: every waiter
// queues on the store, not in a client), contend for one key: each locks
// it, holds it for cs, releases it and queues again, until rc.dur has passed
// (then the goroutines still waiting finish).
//
// Queueing is sequenced so that the order is well defined: a goroutine takes
// a ticket (a number, in increasing order) and calls Lock, and the next
// goroutine may take its ticket only when the store shows the previous one's
// record: the number of lock records on the server (etcd keys, ZooKeeper
// ephemeral znodes; the libraries keep one per holder or waiter) has reached
// the number of goroutines that hold a ticket and have not finished
// releasing. So a goroutine with a smaller ticket queued on the store before
// one with a larger ticket, and a FIFO lock must grant the lock in ticket
// order: each acquisition must go to the goroutine with the smallest ticket
// among those in Lock. Acquisitions that do not are counted as out of order.
//
// A goroutine that released waits until the next holder has the lock (if
// anyone was waiting) before it queues again, so that its queueing does not
// overlap the handoff being measured; the others keep the queue long.
//
// The handoff is the time from the holder calling release (a timestamp taken
// just before, in shared state) to the next holder's Lock returning, counted
// when that goroutine had taken its ticket before the release began (it was
// waiting, not arriving at a free lock).
func fifoHandoff(rc *runCtx, s *samples, g int, cs time.Duration) {
	key := rc.prefix + "hot"
	base, err := rc.records(rc.ctx)
	if err != nil {
		s.err(fmt.Errorf("counting lock records (needed to sequence the queue): %w", err))
		return
	}
	q := newFifoQueue(rc.ctx, rc.records, base)
	if s.counts == nil {
		s.counts = make([]int, g)
	}
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(rc.dur)
	for i := range g {
		wg.Go(func() {
			l := rc.lks[i%len(rc.lks)]
			var waits []time.Duration
			gaveUp := 0
			defer func() {
				s.mu.Lock()
				s.locks = append(s.locks, waits...)
				s.ops += len(waits)
				s.counts[i] += len(waits)
				s.gaveUp += gaveUp
				s.mu.Unlock()
			}()
			for time.Now().Before(deadline) && rc.ctx.Err() == nil {
				t, err := q.join()
				if err != nil {
					return // the run was cancelled
				}
				unlock, gave, err := rc.lock(l, key)
				got := time.Now()
				if err != nil {
					q.leave(t)
					if gave {
						gaveUp++
						continue
					}
					s.err(err)
					return
				}
				q.acquired(t, got)
				waits = append(waits, got.Sub(t.at))
				if cs > 0 {
					time.Sleep(cs)
				}
				next, waited := q.releasing()
				err = unlock(rc.ctx)
				q.released()
				if err != nil {
					s.err(err)
					return
				}
				if waited {
					// Queue again once the next holder has the lock.
					select {
					case <-next:
					case <-time.After(rc.budget):
					case <-rc.ctx.Done():
					}
				}
			}
		})
	}
	wg.Wait()
	q.wg.Wait()
	s.elapsed += time.Since(start)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fromCall = append(s.fromCall, q.handoffs...)
	s.outOfOrder += q.outOfOrder
	s.unconfirmed += q.unconfirmed
	if q.recordsErr != nil {
		s.nErrs++
		if s.firstErr == nil {
			s.firstErr = fmt.Errorf("counting lock records: %w", q.recordsErr)
		}
	}
}

// fifoQueue is the shared state of fifoHandoff.
type fifoQueue struct {
	ctx     context.Context
	records func(context.Context) (int, error)
	base    int           // records on the server before the first ticket
	gate    chan struct{} // full from a ticket until its record shows
	wg      sync.WaitGroup

	mu       sync.Mutex
	next     int           // the next ticket
	waiting  []int         // tickets of the goroutines in Lock, in order
	inflight int           // goroutines with a ticket that have not finished releasing
	release  time.Time     // when the holder began to release; zero once the next holder has the lock
	acq      chan struct{} // closed at the next acquisition

	handoffs    []time.Duration
	outOfOrder  int
	unconfirmed int
	recordsErr  error
}

// newFifoQueue returns the shared state of fifoHandoff: records counts the
// lock records on the server, base of which were there before.
func newFifoQueue(ctx context.Context, records func(context.Context) (int, error), base int) *fifoQueue {
	return &fifoQueue{ctx: ctx, records: records, base: base, gate: make(chan struct{}, 1), acq: make(chan struct{})}
}

type ticket struct {
	n  int
	at time.Time // taken just before Lock was called
}

// join waits for its turn to queue, takes a ticket and starts watching for
// its record on the store. The caller calls Lock at once.
func (q *fifoQueue) join() (ticket, error) {
	select {
	case q.gate <- struct{}{}:
	case <-q.ctx.Done():
		return ticket{}, q.ctx.Err()
	}
	q.mu.Lock()
	t := ticket{n: q.next, at: time.Now()}
	q.next++
	q.waiting = append(q.waiting, t.n)
	q.inflight++
	q.mu.Unlock()
	q.wg.Go(q.confirm)
	return t, nil
}

// confirm opens the gate for the next ticket once the store holds a record
// for every goroutine that has a ticket and has not finished releasing
// (and so for the last one to take a ticket). The number of those
// goroutines is read before each count: a record is created after its
// goroutine counts itself in and deleted before it counts itself out, so a
// count that reaches the number read before it includes the newest record.
func (q *fifoQueue) confirm() {
	defer func() { <-q.gate }()
	deadline := time.Now().Add(confirmTimeout)
	for {
		q.mu.Lock()
		want := q.inflight
		q.mu.Unlock()
		n, err := q.records(q.ctx)
		if err == nil && n-q.base >= want {
			return
		}
		if err != nil || time.Now().After(deadline) {
			q.mu.Lock()
			if q.unconfirmed++; err != nil && q.recordsErr == nil && q.ctx.Err() == nil {
				q.recordsErr = err
			}
			q.mu.Unlock()
			return
		}
	}
}

// acquired records that the holder of t got the lock at got.
func (q *fifoQueue) acquired(t ticket, got time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.waiting[0] != t.n {
		q.outOfOrder++
	}
	q.waiting = slices.DeleteFunc(q.waiting, func(n int) bool { return n == t.n })
	if !q.release.IsZero() {
		if t.at.Before(q.release) {
			q.handoffs = append(q.handoffs, got.Sub(q.release))
		}
		q.release = time.Time{}
	}
	close(q.acq)
	q.acq = make(chan struct{})
}

// leave records that the holder of t gave up waiting.
func (q *fifoQueue) leave(t ticket) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.waiting = slices.DeleteFunc(q.waiting, func(n int) bool { return n == t.n })
	q.inflight--
}

// releasing records that the holder is about to release. It returns a
// channel closed when the next holder has the lock, and whether anyone was
// waiting.
func (q *fifoQueue) releasing() (next <-chan struct{}, waited bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.release = time.Now()
	return q.acq, len(q.waiting) > 0
}

// released records that the holder's release has returned.
func (q *fifoQueue) released() {
	q.mu.Lock()
	q.inflight--
	q.mu.Unlock()
}
