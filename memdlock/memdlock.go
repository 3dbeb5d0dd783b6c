// Package memdlock is an in-process dlock backend.
//
// It keeps locks in memory, so it coordinates goroutines of one process only:
// use it in single-process programs and in unit tests of code that takes
// dlock locks. It is also the reference backend of the conformance suite in
// package drivertest: it implements the driver contract exactly, including
// leases, fencing tokens, release notification, listing and forced release.
//
// Its URL scheme is mem://NAME: clients opened with the same NAME in one
// process share one store.
package memdlock

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
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
)

// New returns a driver over a new, empty in-memory store.
func New() *Driver { return &Driver{s: newStore()} }

// Share returns another driver over the same store as d, as a second process
// would see it; closing one does not affect the other.
func (d *Driver) Share() *Driver { return &Driver{s: d.s} }

type entry struct {
	owner   string
	token   uint64
	info    string
	expires time.Time
}

type store struct {
	mu        sync.Mutex
	locks     map[string]*entry
	hub       notify.Hub
	lastToken uint64
	lastSweep time.Time
}

func newStore() *store {
	return &store{locks: map[string]*entry{}}
}

// live returns the live entry for key, deleting an expired one. s.mu is held.
func (s *store) live(key string, now time.Time) *entry {
	e := s.locks[key]
	if e != nil && !now.Before(e.expires) {
		delete(s.locks, key)
		return nil
	}
	return e
}

// sweep drops expired entries at most once a second, so that abandoned
// leases do not accumulate. s.mu is held.
func (s *store) sweep(now time.Time) {
	if now.Sub(s.lastSweep) < time.Second {
		return
	}
	s.lastSweep = now
	for k, e := range s.locks {
		if !now.Before(e.expires) {
			delete(s.locks, k)
		}
	}
}

func (d *Driver) check(ctx context.Context, req *driver.Request) error {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return fmt.Errorf("memdlock: driver closed")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if req != nil && req.Mode != driver.Exclusive {
		return fmt.Errorf("memdlock: %s mode: %w", req.Mode, driver.ErrUnsupported)
	}
	return nil
}

// Acquire implements driver.Driver.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := d.check(ctx, &req); err != nil {
		return driver.Result{}, err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.sweep(now)
	if e := s.live(req.Key, now); e != nil {
		if e.owner != req.Owner {
			return driver.Result{RetryAfter: e.expires.Sub(now)}, nil
		}
		e.expires = now.Add(req.TTL)
		return driver.Result{Acquired: true, Token: e.token}, nil
	}
	s.lastToken++
	s.locks[req.Key] = &entry{owner: req.Owner, token: s.lastToken, info: req.Info, expires: now.Add(req.TTL)}
	return driver.Result{Acquired: true, Token: s.lastToken}, nil
}

// Refresh implements driver.Driver.
func (d *Driver) Refresh(ctx context.Context, req driver.Request) error {
	if err := d.check(ctx, &req); err != nil {
		return err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	e := s.live(req.Key, now)
	if e == nil || e.owner != req.Owner {
		return fmt.Errorf("memdlock: refresh %q: %w", req.Key, driver.ErrNotHeld)
	}
	e.expires = now.Add(req.TTL)
	return nil
}

// Release implements driver.Driver.
func (d *Driver) Release(ctx context.Context, req driver.Request) error {
	if err := d.check(ctx, &req); err != nil {
		return err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.locks[req.Key]
	if e == nil || e.owner != req.Owner {
		return fmt.Errorf("memdlock: release %q: %w", req.Key, driver.ErrNotHeld)
	}
	delete(s.locks, req.Key)
	s.hub.Notify(req.Key)
	if !time.Now().Before(e.expires) {
		return fmt.Errorf("memdlock: release %q: lease had expired: %w", req.Key, driver.ErrNotHeld)
	}
	return nil
}

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Modes:       driver.Modes(driver.Exclusive),
		ServerClock: true,
		MinTTL:      time.Millisecond,
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
	if err := d.check(ctx, &req); err != nil {
		return nil, err
	}
	return d.s.hub.Subscribe(req.Key), nil
}

// List implements driver.Lister.
func (d *Driver) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	if err := d.check(ctx, nil); err != nil {
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
		if e := s.live(k, now); e != nil {
			hs = append(hs, driver.Holder{Key: k, Owner: e.owner, Mode: driver.Exclusive, Token: e.token, Info: e.info, TTL: e.expires.Sub(now)})
		}
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].Key < hs[j].Key })
	return hs, nil
}

// ForceRelease implements driver.ForceReleaser.
func (d *Driver) ForceRelease(ctx context.Context, key string) (int, error) {
	if err := d.check(ctx, nil); err != nil {
		return 0, err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live(key, time.Now()) == nil {
		return 0, nil
	}
	delete(s.locks, key)
	s.hub.Notify(key)
	return 1, nil
}

// Count returns the number of records the store keeps for keys that start
// with prefix, live or expired but not yet swept. Tests use it to check that
// nothing is left behind.
func (d *Driver) Count(prefix string) int {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	n := 0
	for k := range d.s.locks {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}
