// Package memdlock is an in-process dlock backend.
//
// It keeps locks in memory, so it coordinates goroutines of one process only:
// use it in single-process programs and in unit tests of code that takes
// dlock locks. It is also the reference backend of the conformance suite in
// package drivertest: it implements the driver contract exactly, including
// leases, fencing tokens, every mode (exclusive, read-write with writer
// preference and downgrade, semaphores with expiring permits), a FIFO wait
// queue, release notification, listing and forced release.
//
// Its URL scheme is mem://NAME: clients opened with the same NAME in one
// process share one store.
package memdlock

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/admit"
	"github.com/dlockhq/dlock/internal/notify"
)

func init() {
	dlock.Register("mem", func(ctx context.Context, u *url.URL) (driver.Driver, error) {
		name := u.Host + u.Path
		named.Lock()
		defer named.Unlock()
		s := named.m[name]
		if s == nil {
			s = newStore()
			named.m[name] = s
		}
		return &Driver{s: s}, nil
	})
}

var named = struct {
	sync.Mutex
	m map[string]*store
}{m: map[string]*store{}}

// Driver is an in-process driver. Create it with New.
type Driver struct {
	s      *store
	mu     sync.Mutex
	closed bool
}

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.Notifier      = (*Driver)(nil)
	_ driver.Lister        = (*Driver)(nil)
	_ driver.ForceReleaser = (*Driver)(nil)
	_ driver.MultiAcquirer = (*Driver)(nil)
	_ driver.HoldReader    = (*Driver)(nil)
)

// New returns a driver over a new, empty in-memory store.
func New() *Driver { return &Driver{s: newStore()} }

// Share returns another driver over the same store as d, as a second process
// would see it; closing one does not affect the other.
func (d *Driver) Share() *Driver { return &Driver{s: d.s} }

// holder is a live hold on a key.
type holder struct {
	owner   string
	mode    driver.Mode
	token   uint64
	info    string
	expires time.Time
}

// waiter is a queue entry (driver.Request.Queue).
type waiter struct {
	owner   string
	mode    driver.Mode
	expires time.Time
}

// lock is the state of one key: its holders, in token order, and its wait
// queue, in arrival order.
type lock struct {
	holders []*holder
	queue   []*waiter
	limit   int // the semaphore's limit while it has holders or waiters
	// gone remembers queued owners whose entry expired, so that their next
	// Acquire reports the lost place instead of queueing them again.
	gone map[string]time.Time
}

type store struct {
	mu        sync.Mutex
	locks     map[string]*lock
	hub       notify.Hub
	lastToken uint64
	lastSweep time.Time
}

func newStore() *store {
	return &store{locks: map[string]*lock{}}
}

// goneFor is how long a lock remembers a waiter whose entry expired.
const goneFor = time.Minute

// prune drops expired holders and waiters of l and reports whether l has
// nothing left.
func (l *lock) prune(now time.Time) bool {
	l.holders = slices.DeleteFunc(l.holders, func(h *holder) bool { return !now.Before(h.expires) })
	l.queue = slices.DeleteFunc(l.queue, func(w *waiter) bool {
		if now.Before(w.expires) {
			return false
		}
		if l.gone == nil {
			l.gone = map[string]time.Time{}
		}
		l.gone[w.owner] = now
		return true
	})
	for o, t := range l.gone {
		if now.Sub(t) > goneFor {
			delete(l.gone, o)
		}
	}
	return len(l.holders) == 0 && len(l.queue) == 0 && len(l.gone) == 0
}

// get returns the pruned state of key, or nil if it has none. s.mu is held.
func (s *store) get(key string, now time.Time) *lock {
	l := s.locks[key]
	if l != nil && l.prune(now) {
		delete(s.locks, key)
		return nil
	}
	return l
}

// sweep prunes every key at most once a second, so that abandoned leases do
// not accumulate. s.mu is held.
func (s *store) sweep(now time.Time) {
	if now.Sub(s.lastSweep) < time.Second {
		return
	}
	s.lastSweep = now
	for k := range s.locks {
		s.get(k, now)
	}
}

func (l *lock) holderOf(owner string) *holder {
	for _, h := range l.holders {
		if h.owner == owner {
			return h
		}
	}
	return nil
}

func (l *lock) waiterAt(owner string) int {
	return slices.IndexFunc(l.queue, func(w *waiter) bool { return w.owner == owner })
}

// semaphore reports whether the key is in use as a semaphore.
func (l *lock) semaphore() bool {
	for _, h := range l.holders {
		return h.mode == driver.Semaphore
	}
	for _, w := range l.queue {
		return w.mode == driver.Semaphore
	}
	return false
}

// admits reports whether a request of mode m (and limit n) at position pos
// of the queue may hold the key now: the key's holders allow it, and no
// waiter ahead of it comes first (the queue is fair).
func (l *lock) admits(m driver.Mode, n, pos int) bool {
	var k admit.Key
	k.Holders, k.HolderExclusive = admit.Count(l.holders, func(h *holder) driver.Mode { return h.mode })
	k.Ahead, k.AheadExclusive = admit.Count(l.queue[:pos], func(w *waiter) driver.Mode { return w.mode })
	return k.Admits(m, n, true)
}

func (d *Driver) check(ctx context.Context) error {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return fmt.Errorf("memdlock: driver closed")
	}
	return ctx.Err()
}

// Acquire implements driver.Driver.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := d.check(ctx); err != nil {
		return driver.Result{}, err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.sweep(now)
	return s.acquire(req, now)
}

// AcquireAll implements driver.MultiAcquirer: it grants each request in
// turn under the store's lock and, if one cannot be granted, takes back the
// holds it gave, so that no other caller ever sees a part of them.
func (d *Driver) AcquireAll(ctx context.Context, reqs []driver.Request) (driver.MultiResult, error) {
	if err := d.check(ctx); err != nil {
		return driver.MultiResult{}, err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.sweep(now)
	results := make([]driver.Result, len(reqs))
	for i, req := range reqs {
		res, err := s.acquire(req, now)
		if err != nil || !res.Acquired {
			for _, r := range reqs[:i] {
				l := s.locks[r.Key]
				l.holders = slices.DeleteFunc(l.holders, func(h *holder) bool { return h.owner == r.Owner })
				s.dropIfEmpty(r.Key, l)
			}
			if err != nil {
				return driver.MultiResult{}, err
			}
			return driver.MultiResult{Blocked: i, RetryAfter: res.RetryAfter}, nil
		}
		results[i] = res
	}
	return driver.MultiResult{Acquired: true, Results: results}, nil
}

// acquire is Acquire's step. s.mu is held.
func (s *store) acquire(req driver.Request, now time.Time) (driver.Result, error) {
	l := s.get(req.Key, now)
	if l == nil {
		l = &lock{}
		s.locks[req.Key] = l
	}
	if h := l.holderOf(req.Owner); h != nil {
		return s.rehold(h, req, now)
	}
	if !l.fits(req) {
		s.dropIfEmpty(req.Key, l)
		return driver.Result{}, fmt.Errorf("memdlock: %q is in use as %s (limit %d), asked for %s (limit %d): %w",
			req.Key, l.mode(), l.limit, req.Mode, req.Limit, driver.ErrModeMismatch)
	}
	pos := l.waiterAt(req.Owner)
	if pos < 0 {
		if _, ok := l.gone[req.Owner]; ok && req.Queue {
			return driver.Result{}, fmt.Errorf("memdlock: %q: the queue entry expired: %w", req.Key, driver.ErrNotOwner)
		}
		pos = len(l.queue)
	}
	if l.admits(req.Mode, req.Limit, pos) {
		if pos < len(l.queue) {
			l.queue = slices.Delete(l.queue, pos, pos+1)
			s.hub.Notify(req.Key) // the next in line may be admitted too
		}
		s.lastToken++
		l.holders = append(l.holders, &holder{owner: req.Owner, mode: req.Mode, token: s.lastToken, info: req.Info, expires: now.Add(req.TTL)})
		l.limit = req.Limit
		return driver.Result{Acquired: true, Token: s.lastToken}, nil
	}
	if req.Queue {
		if pos < len(l.queue) {
			l.queue[pos].expires = now.Add(req.TTL)
		} else {
			l.queue = append(l.queue, &waiter{owner: req.Owner, mode: req.Mode, expires: now.Add(req.TTL)})
			l.limit = req.Limit
		}
	}
	res := driver.Result{}
	for _, h := range l.holders {
		if left := h.expires.Sub(now); res.RetryAfter == 0 || left < res.RetryAfter {
			res.RetryAfter = left
		}
	}
	s.dropIfEmpty(req.Key, l)
	return res, nil
}

// rehold is acquire for an owner that holds the key: it extends the hold,
// and downgrades an exclusive hold asked for as shared.
func (s *store) rehold(h *holder, req driver.Request, now time.Time) (driver.Result, error) {
	switch {
	case h.mode == driver.Exclusive && req.Mode == driver.Shared:
		h.mode = driver.Shared // a downgrade: readers may join
		s.hub.Notify(req.Key)
	case h.mode == driver.Shared && req.Mode == driver.Exclusive:
		return driver.Result{}, fmt.Errorf("memdlock: %q: an upgrade from shared to exclusive: %w", req.Key, driver.ErrModeMismatch)
	}
	h.expires = now.Add(req.TTL)
	return driver.Result{Acquired: true, Token: h.token}, nil
}

// fits reports whether req asks for the key's mode (and limit), if in use.
func (l *lock) fits(req driver.Request) bool {
	return len(l.holders)+len(l.queue) == 0 || (req.Mode == driver.Semaphore) == l.semaphore() && (req.Mode != driver.Semaphore || req.Limit == l.limit)
}

// mode returns the mode the key is in use as.
func (l *lock) mode() driver.Mode {
	for _, h := range l.holders {
		return h.mode
	}
	for _, w := range l.queue {
		return w.mode
	}
	return driver.Exclusive
}

// dropIfEmpty forgets key if it has no state left. s.mu is held.
func (s *store) dropIfEmpty(key string, l *lock) {
	if len(l.holders) == 0 && len(l.queue) == 0 && len(l.gone) == 0 {
		delete(s.locks, key)
	}
}

// Refresh implements driver.Driver.
func (d *Driver) Refresh(ctx context.Context, req driver.Request) error {
	if err := d.check(ctx); err != nil {
		return err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var h *holder
	if l := s.get(req.Key, now); l != nil {
		h = l.holderOf(req.Owner)
	}
	if h == nil {
		return fmt.Errorf("memdlock: refresh %q: %w", req.Key, driver.ErrNotOwner)
	}
	h.expires = now.Add(req.TTL)
	return nil
}

// Release implements driver.Driver.
func (d *Driver) Release(ctx context.Context, req driver.Request) error {
	if err := d.check(ctx); err != nil {
		return err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	l := s.locks[req.Key]
	if l == nil {
		return fmt.Errorf("memdlock: release %q: %w", req.Key, driver.ErrNotOwner)
	}
	_, wasGone := l.gone[req.Owner]
	delete(l.gone, req.Owner)
	var h *holder
	if i := slices.IndexFunc(l.holders, func(h *holder) bool { return h.owner == req.Owner }); i >= 0 {
		h = l.holders[i]
		l.holders = slices.Delete(l.holders, i, i+1)
	}
	queued := false
	if i := l.waiterAt(req.Owner); i >= 0 {
		queued = now.Before(l.queue[i].expires)
		l.queue = slices.Delete(l.queue, i, i+1)
	}
	s.dropIfEmpty(req.Key, l)
	if h != nil || queued || wasGone {
		s.hub.Notify(req.Key)
	}
	switch {
	case h != nil && now.Before(h.expires), h == nil && queued:
		return nil
	case h != nil:
		return fmt.Errorf("memdlock: release %q: lease had expired: %w", req.Key, driver.ErrNotOwner)
	}
	return fmt.Errorf("memdlock: release %q: %w", req.Key, driver.ErrNotOwner)
}

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Modes:           driver.Modes(driver.Exclusive, driver.Shared, driver.Semaphore),
		FIFO:            true,
		ServerClock:     true,
		MinTTL:          time.Millisecond,
		CancelsPromptly: true,
		// The store outlives a driver closed over it (see Share and the
		// mem:// URLs), though not the process.
		PortableHolds: true,
		LockDelay:     true, // the lease is a TTL on the record
	}
}

// Close implements driver.Driver. The store stays usable by other drivers
// sharing it.
func (d *Driver) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	return nil
}

// Subscribe implements driver.Notifier.
func (d *Driver) Subscribe(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	return d.s.hub.Subscribe(req.Key), nil
}

// List implements driver.Lister.
func (d *Driver) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var hs []driver.Holder
	for k := range s.locks {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		l := s.get(k, now)
		if l == nil {
			continue
		}
		for _, h := range l.holders {
			hs = append(hs, l.describe(k, h, now))
		}
	}
	slices.SortFunc(hs, func(a, b driver.Holder) int {
		return cmp.Or(strings.Compare(a.Key, b.Key), cmp.Compare(a.Token, b.Token))
	})
	return hs, nil
}

// describe returns the driver.Holder of h, a holder of l, the lock of key.
func (l *lock) describe(key string, h *holder, now time.Time) driver.Holder {
	limit := 0
	if h.mode == driver.Semaphore {
		limit = l.limit
	}
	return driver.Holder{Key: key, Owner: h.owner, Mode: h.mode, Limit: limit, Token: h.token, Info: h.info, TTL: h.expires.Sub(now)}
}

// ReadHold implements driver.HoldReader.
func (d *Driver) ReadHold(ctx context.Context, key, owner string) (driver.Holder, error) {
	if err := d.check(ctx); err != nil {
		return driver.Holder{}, err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if l := s.get(key, now); l != nil {
		if h := l.holderOf(owner); h != nil {
			return l.describe(key, h, now), nil
		}
	}
	return driver.Holder{}, fmt.Errorf("memdlock: read hold %q: %w", key, driver.ErrNotOwner)
}

// ForceRelease implements driver.ForceReleaser.
func (d *Driver) ForceRelease(ctx context.Context, key string) (int, error) {
	if err := d.check(ctx); err != nil {
		return 0, err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.get(key, time.Now())
	if l == nil {
		return 0, nil
	}
	delete(s.locks, key)
	s.hub.Notify(key)
	return len(l.holders), nil
}

// Count returns the number of records the store keeps for keys that start
// with prefix: holders and queue entries, live or expired but not yet swept.
// Tests use it to check that nothing is left behind.
func (d *Driver) Count(prefix string) int {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	n := 0
	for k, l := range d.s.locks {
		if strings.HasPrefix(k, prefix) {
			n += len(l.holders) + len(l.queue)
		}
	}
	return n
}
