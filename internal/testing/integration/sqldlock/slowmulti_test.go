package sqldlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	. "github.com/dlockhq/dlock/sqldlock"
)

// TestSlowMultiContenderCannotStealRenewal is TestSlowContenderCannotStealRenewal
// for the holds-table steps (Shared and Semaphore holds, writers waiting
// for readers): a client whose every round trip is slow,
// acquiring a key that live readers or permit holders hold, must not make
// them lose their locks. No step keeps a row or lock of the key across its
// round trips, so the holders' renewals never wait behind it; and the
// limits hold throughout.
func TestSlowMultiContenderCannotStealRenewal(t *testing.T) {
	const (
		ttl   = time.Second
		delay = 100 * time.Millisecond
		span  = 4 * ttl
	)
	type contender struct {
		mode  driver.Mode
		limit int
		queue func(i int) bool
	}
	always := func(int) bool { return true }
	every := func(i int) bool { return i%2 == 0 }
	for _, d := range []Dialect{Postgres, MySQL} {
		for _, m := range driverModes {
			t.Run(d.String()+"/mode"+m.suffix, func(t *testing.T) {
				t.Parallel()
				s := newStore(t, d)
				for _, c := range []struct {
					name    string
					holders []dlock.LockOption // one live holder each
					limit   int                // of a semaphore; 0 for a read-write lock
					slow    []contender
				}{
					// A slow reader (queued or not) beside a live reader, and
					// a slow writer waiting for them.
					{"shared", []dlock.LockOption{dlock.Shared()}, 0, []contender{
						{driver.Shared, 0, every},
						{driver.Exclusive, 0, always},
					}},
					// A slow permit-taker (queued or not) on a semaphore whose
					// permits live holders hold.
					{"semaphore", []dlock.LockOption{dlock.WithLimit(2), dlock.WithLimit(2)}, 2, []contender{
						{driver.Semaphore, 2, every},
					}},
				} {
					t.Run(c.name, func(t *testing.T) {
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
						defer cancel()
						key := "slow-" + c.name
						holder, err := dlock.New(s.open(t, m.params...))
						if err != nil {
							t.Fatal(err)
						}
						defer holder.Close()
						raw, _ := s.viaProxy(t, delay, m.params...)
						octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
						sd, err := openURL(octx, raw)
						ocancel()
						if err != nil {
							t.Fatal(err)
						}
						defer sd.Close()
						// Connect and check the schema before the race.
						if _, err := sd.Count(ctx, key); err != nil {
							t.Fatal(err)
						}
						var locks []*dlock.Lock
						for _, o := range c.holders {
							l, err := holder.TryLock(ctx, key, o, dlock.WithTTL(ttl))
							if err != nil {
								t.Fatal(err)
							}
							locks = append(locks, l)
						}
						lost := func() error {
							for _, l := range locks {
								if err := l.Context().Err(); err != nil {
									return l.Cause()
								}
							}
							return nil
						}
						reqs := make([]driver.Request, len(c.slow))
						for j, k := range c.slow {
							reqs[j] = req(key, ttl)
							reqs[j].Mode, reqs[j].Limit = k.mode, k.limit
						}
						end := time.Now().Add(span)
						for i := 0; (i < 2*len(reqs) || time.Now().Before(end)) && lost() == nil; i++ {
							j := i % len(reqs)
							r := &reqs[j]
							r.Queue = c.slow[j].queue(i / len(reqs))
							start := time.Now()
							res, err := sd.Acquire(ctx, *r)
							t.Logf("slow %s Acquire (queue %v) took %v: %+v, %v", r.Mode, r.Queue, time.Since(start).Round(time.Millisecond), res, err)
							if errors.Is(err, driver.ErrNotOwner) && r.Queue {
								// Its queue entry lapsed between two slow
								// calls: it leaves the queue, as dlock has
								// it do, and comes back as a new owner.
								if err := sd.Release(ctx, *r); err != nil && !errors.Is(err, driver.ErrNotOwner) {
									t.Fatalf("slow Release: %v", err)
								}
								mode, limit := r.Mode, r.Limit
								*r = req(key, ttl)
								r.Mode, r.Limit = mode, limit
								continue
							}
							if err != nil {
								t.Fatalf("slow Acquire: %v", err)
							}
							if err := lost(); err != nil {
								break
							}
							if res.Acquired && r.Mode != driver.Shared {
								t.Fatalf("the slow client acquired %q (%s) while it was held", key, r.Mode)
							}
							// The limits hold.
							hs, err := holder.List(ctx, key)
							if err != nil {
								t.Fatal(err)
							}
							for _, h := range hs {
								if h.Mode == driver.Exclusive && len(hs) > 1 || c.limit > 0 && len(hs) > c.limit {
									t.Fatalf("holders of %q: %+v", key, hs)
								}
							}
						}
						if err := lost(); err != nil {
							t.Fatalf("a live holder lost its lock to a slow contender: %v", err)
						}
						for _, l := range locks {
							if err := l.Release(ctx); err != nil {
								t.Fatalf("Release: %v", err)
							}
						}
						// The slow client leaves; the key must be free.
						for _, r := range reqs {
							if err := sd.Release(ctx, r); err != nil && !errors.Is(err, driver.ErrNotOwner) {
								t.Errorf("slow Release: %v", err)
							}
						}
						nl, err := holder.TryLock(ctx, key, dlock.WithTTL(ttl))
						if err != nil {
							t.Fatalf("TryLock after every release: %v", err)
						}
						nl.Release(ctx)
					})
				}
			})
		}
	}
}
