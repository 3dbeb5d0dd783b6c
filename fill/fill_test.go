package fill_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/fill"
	"github.com/dlockhq/dlock/memdlock"
	"go.uber.org/goleak"
)

// TestMain fails the run if goroutines are left over.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// mapCache is a cache entry in memory, with counters.
type mapCache struct {
	mu       sync.Mutex
	v        string
	ok       bool
	loads    atomic.Int32
	computes atomic.Int32
}

func (m *mapCache) cache(compute func(ctx context.Context) (string, error)) fill.Cache[string] {
	return fill.Cache[string]{
		Load: func(context.Context) (string, bool, error) {
			m.loads.Add(1)
			m.mu.Lock()
			defer m.mu.Unlock()
			return m.v, m.ok, nil
		},
		Compute: func(ctx context.Context) (string, error) {
			m.computes.Add(1)
			return compute(ctx)
		},
		Store: func(_ context.Context, v string) error {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.v, m.ok = v, true
			return nil
		},
	}
}

func newClient(t *testing.T, d *memdlock.Driver) *dlock.Client {
	t.Helper()
	c, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestOnceComputesOnce checks that of eight processes (Clients) that miss
// the same entry at once, one computes it and the others read its value.
func TestOnceComputesOnce(t *testing.T) {
	const n = 8
	store := memdlock.New()
	var m mapCache
	release := make(chan struct{})
	c := m.cache(func(ctx context.Context) (string, error) {
		select {
		case <-release:
			return "value", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	// missed is closed after n reads of the cache (every caller's miss,
	// unless a re-check came first), and computing once one computes.
	missed, computing := make(chan struct{}), make(chan struct{})
	load, compute := c.Load, c.Compute
	var firstLoads atomic.Int32
	c.Load = func(ctx context.Context) (string, bool, error) {
		v, ok, err := load(ctx)
		if firstLoads.Add(1) == n {
			close(missed)
		}
		return v, ok, err
	}
	c.Compute = func(ctx context.Context) (string, error) {
		close(computing)
		return compute(ctx)
	}
	var wg sync.WaitGroup
	results := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		client := newClient(t, store.Share())
		wg.Go(func() { results[i], errs[i] = fill.Once(t.Context(), client, "report:7", c) })
	}
	// Every caller has missed once (and one of them computes): let the
	// computation finish.
	<-missed
	<-computing
	close(release)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || results[i] != "value" {
			t.Errorf("caller %d: %q, %v; want the value", i, results[i], errs[i])
		}
	}
	if got := m.computes.Load(); got != 1 {
		t.Errorf("computed %d times; want once", got)
	}
}

// TestOnceHit checks that a hit is returned without computing.
func TestOnceHit(t *testing.T) {
	client := newClient(t, memdlock.New())
	m := mapCache{v: "cached", ok: true}
	v, err := fill.Once(t.Context(), client, "k", m.cache(func(context.Context) (string, error) { return "fresh", nil }))
	if err != nil || v != "cached" || m.computes.Load() != 0 {
		t.Errorf("Once on a hit = %q, %v, %d computations; want the cached value and none", v, err, m.computes.Load())
	}
}

// TestOnceFailureLetsNextFill checks that when computing fails, the error is
// returned and the next caller computes the entry itself.
func TestOnceFailureLetsNextFill(t *testing.T) {
	client := newClient(t, memdlock.New())
	var m mapCache
	boom := errors.New("database down")
	first := true
	c := m.cache(func(context.Context) (string, error) {
		if first {
			first = false
			return "", boom
		}
		return "value", nil
	})
	if _, err := fill.Once(t.Context(), client, "k", c); !errors.Is(err, boom) {
		t.Fatalf("Once with a failing computation: %v; want it", err)
	}
	if v, err := fill.Once(t.Context(), client, "k", c); err != nil || v != "value" {
		t.Errorf("Once after a failure = %q, %v; want the value", v, err)
	}
	if hs, err := client.Holders(t.Context(), "k"); err != nil || len(hs) != 0 {
		t.Errorf("holders left = %v, %v; want none", hs, err)
	}
}

// TestOnceLostLock checks that a filler whose lock is lost stops: its
// computation's context ends and Once reports the loss.
func TestOnceLostLock(t *testing.T) {
	store := memdlock.New()
	client, admin := newClient(t, store.Share()), newClient(t, store.Share())
	var m mapCache
	c := m.cache(func(ctx context.Context) (string, error) {
		if _, err := admin.ForceRelease(context.Background(), "k"); err != nil {
			return "", err
		}
		<-ctx.Done() // the renewal finds the lock gone
		return "", context.Cause(ctx)
	})
	_, err := fill.Once(t.Context(), client, "k", c, dlock.WithTTL(300*time.Millisecond))
	if !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Once whose lock was lost: %v; want ErrLost", err)
	}
	if m.ok {
		t.Error("a filler that lost its lock stored its value")
	}
}

// TestOnceBadCache checks that a Cache without its functions is refused.
func TestOnceBadCache(t *testing.T) {
	client := newClient(t, memdlock.New())
	if _, err := fill.Once(t.Context(), client, "k", fill.Cache[int]{}); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Once with an empty Cache: %v; want ErrInvalidArgument", err)
	}
}
