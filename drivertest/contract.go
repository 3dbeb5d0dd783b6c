package drivertest

import (
	"context"
	"sync"
	"testing"

	"github.com/dlockhq/dlock/driver"
)

// contract wraps the driver of every Client the suite makes and checks the
// rule package dlock keeps for drivers (see "Contexts" in package driver):
// no Acquire, Refresh or Release for an owner starts while an Acquire for
// that owner is still running, even after its caller gave up on it.
type contract struct {
	driver.Driver
	t testing.TB

	mu        sync.Mutex
	acquiring map[string]bool // owners with an Acquire in flight
}

func newContract(t testing.TB, d driver.Driver) *contract {
	return &contract{Driver: d, t: t, acquiring: map[string]bool{}}
}

// enter records a call for the owners; acquire says whether it acquires.
func (c *contract) enter(call string, acquire bool, reqs ...driver.Request) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range reqs {
		if c.acquiring[r.Owner] {
			c.t.Errorf("driver contract: package dlock called %s for an owner of %q while an Acquire for it was still running", call, r.Key)
		}
	}
	if !acquire {
		return func() {}
	}
	for _, r := range reqs {
		c.acquiring[r.Owner] = true
	}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, r := range reqs {
			delete(c.acquiring, r.Owner)
		}
	}
}

func (c *contract) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	defer c.enter("Acquire", true, req)()
	return c.Driver.Acquire(ctx, req)
}

func (c *contract) Refresh(ctx context.Context, req driver.Request) error {
	c.enter("Refresh", false, req)
	return c.Driver.Refresh(ctx, req)
}

func (c *contract) Release(ctx context.Context, req driver.Request) error {
	c.enter("Release", false, req)
	return c.Driver.Release(ctx, req)
}

// The optional interfaces are forwarded; where the driver lacks one, the
// answer is what package dlock does without it.

func (c *contract) Subscribe(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	if n, ok := c.Driver.(driver.Notifier); ok {
		return n.Subscribe(ctx, req)
	}
	return nil, driver.ErrUnsupported
}

func (c *contract) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	if l, ok := c.Driver.(driver.Lister); ok {
		return l.List(ctx, prefix)
	}
	return nil, driver.ErrUnsupported
}

func (c *contract) ForceRelease(ctx context.Context, key string) (int, error) {
	if f, ok := c.Driver.(driver.ForceReleaser); ok {
		return f.ForceRelease(ctx, key)
	}
	return 0, driver.ErrUnsupported
}

func (c *contract) AcquireAll(ctx context.Context, reqs []driver.Request) (driver.MultiResult, error) {
	m, ok := c.Driver.(driver.MultiAcquirer)
	if !ok {
		return driver.MultiResult{}, driver.ErrUnsupported
	}
	defer c.enter("AcquireAll", true, reqs...)()
	return m.AcquireAll(ctx, reqs)
}

func (c *contract) ReadHold(ctx context.Context, key, owner string) (driver.Holder, error) {
	if r, ok := c.Driver.(driver.HoldReader); ok {
		return r.ReadHold(ctx, key, owner)
	}
	return driver.Holder{}, driver.ErrUnsupported
}
