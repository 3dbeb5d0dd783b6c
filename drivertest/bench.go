package drivertest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// RunBenchmarks runs the standard workloads on the driver as sub-benchmarks
// of b:
//
//   - Uncontended/G=1 and G=64: goroutines lock and release keys of their
//     own;
//   - HotKey/G=8 and G=64, CS=0 and CS=1ms: goroutines contend for one key
//     and hold it for the critical section CS;
//   - ReadHeavy/G=64/CS=1ms, if the driver declares Shared: a read-write lock
//     on one key, where one goroutine in eight writes and the others read;
//   - Semaphore/N=4/G=16/CS=1ms, if the driver declares Semaphore: goroutines
//     share four permits of one key;
//   - Fair/G=8/CS=1ms, if the driver declares FIFO: HotKey with Fair locks;
//   - Reentrant/G=1: a goroutine holds its key and re-enters it;
//   - MultiLock/K=3/G=1 and G=8/CS=1ms: goroutines take three of four keys
//     (which share a Redis Cluster hash tag) with LockAll; on a driver that
//     implements driver.MultiAcquirer the same workloads run again as
//     MultiLockOneByOne with it hidden, so that the atomic step can be
//     compared with taking the keys one by one in one run.
//
// Goroutines are spread over up to four Clients, each with its own driver,
// as separate processes would be. Besides ns/op each reports acquisitions per
// second (acq/s) and the median and 99th percentile of the time spent
// acquiring (wait-p50-µs, wait-p99-µs).
func RunBenchmarks(b *testing.B, cfg Config) {
	for _, g := range []int{1, 64} {
		b.Run(fmt.Sprintf("Uncontended/G=%d", g), func(b *testing.B) { runBench(b, cfg, workload{goroutines: g}) })
	}
	for _, g := range []int{8, 64} {
		for _, cs := range []time.Duration{0, time.Millisecond} {
			b.Run(fmt.Sprintf("HotKey/G=%d/CS=%v", g, cs), func(b *testing.B) { runBench(b, cfg, workload{goroutines: g, hot: true, cs: cs}) })
		}
	}
	d := cfg.NewDriver(b)
	caps := d.Capabilities()
	d.Close()
	if caps.Modes.Has(driver.Shared) {
		b.Run("ReadHeavy/G=64/CS=1ms", func(b *testing.B) {
			runBench(b, cfg, workload{goroutines: 64, hot: true, cs: time.Millisecond, opts: func(g int) []dlock.LockOption {
				if g%32 < 4 {
					return nil // a writer, on each of the four clients twice
				}
				return []dlock.LockOption{dlock.Shared()}
			}})
		})
	}
	if caps.Modes.Has(driver.Semaphore) {
		b.Run("Semaphore/N=4/G=16/CS=1ms", func(b *testing.B) {
			runBench(b, cfg, workload{goroutines: 16, hot: true, cs: time.Millisecond, opts: func(int) []dlock.LockOption {
				return []dlock.LockOption{dlock.WithLimit(4)}
			}})
		})
	}
	if caps.FIFO {
		b.Run("Fair/G=8/CS=1ms", func(b *testing.B) {
			runBench(b, cfg, workload{goroutines: 8, hot: true, cs: time.Millisecond, opts: func(int) []dlock.LockOption {
				return []dlock.LockOption{dlock.Fair()}
			}})
		})
	}
	b.Run("Reentrant/G=1", func(b *testing.B) { runBench(b, cfg, workload{goroutines: 1, reenter: true}) })
	_, multi := d.(driver.MultiAcquirer)
	for _, hide := range []bool{false, true} {
		if hide && !multi {
			break
		}
		c := cfg
		name := "MultiLock"
		if hide {
			name += "OneByOne"
			c.NewDriver = func(t testing.TB) driver.Driver { return oneByOne{cfg.NewDriver(t)} }
		}
		b.Run(name+"/K=3/G=1", func(b *testing.B) { runBench(b, c, workload{goroutines: 1, multi: true}) })
		b.Run(name+"/K=3/G=8/CS=1ms", func(b *testing.B) {
			runBench(b, c, workload{goroutines: 8, hot: true, cs: time.Millisecond, multi: true})
		})
	}
}

// workload is one benchmark's load.
type workload struct {
	goroutines int
	hot        bool          // one key for all (or four, multi), else a key each
	cs         time.Duration // the critical section
	// opts gives goroutine g's lock options; nil means none.
	opts func(g int) []dlock.LockOption
	// multi makes each goroutine take three of four keys with LockAll.
	multi bool
	// reenter makes each goroutine hold its key and re-enter it.
	reenter bool
}

// runBench runs one workload: goroutines lock, hold the lock for the
// critical section and release it, until b.N acquisitions are made.
func runBench(b *testing.B, cfg Config, w workload) {
	goroutines := w.goroutines
	clients := make([]*dlock.Client, min(goroutines, 4))
	for i := range clients {
		c, err := dlock.New(cfg.NewDriver(b))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	base := prefix(b)
	ctx := context.Background()
	var (
		next  atomic.Int64
		mu    sync.Mutex
		waits = make([]time.Duration, 0, b.N)
		wg    sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	for g := range goroutines {
		wg.Go(func() {
			c := clients[g%len(clients)]
			key := base + "hot"
			if !w.hot {
				key = base + strconv.Itoa(g)
			}
			var mine []time.Duration
			defer func() {
				mu.Lock()
				waits = append(waits, mine...)
				mu.Unlock()
			}()
			opts := []dlock.LockOption{dlock.WithTTL(30 * time.Second)}
			if w.opts != nil {
				opts = append(opts, w.opts(g)...)
			}
			var keys []string // the MultiLock workloads
			if w.multi {
				for i := range 3 {
					keys = append(keys, key+"{m}"+strconv.Itoa((g+i)%4))
				}
			}
			lctx := ctx
			if w.reenter {
				outer, err := c.Lock(ctx, key, opts...)
				if err != nil {
					b.Error(err)
					return
				}
				defer outer.Release(ctx)
				lctx = outer.Context()
			}
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				var (
					l   interface{ Release(context.Context) error }
					err error
				)
				if w.multi {
					l, err = c.LockAll(ctx, keys, opts...)
				} else {
					l, err = c.Lock(lctx, key, opts...)
				}
				if err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(t0))
				if w.cs > 0 {
					time.Sleep(w.cs)
				}
				if err := l.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if len(waits) == 0 {
		return
	}
	slices.Sort(waits)
	pct := func(p float64) float64 {
		return float64(waits[int(p*float64(len(waits)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(float64(len(waits))/elapsed.Seconds(), "acq/s")
	b.ReportMetric(pct(0.50), "wait-p50-µs")
	b.ReportMetric(pct(0.99), "wait-p99-µs")
}

// oneByOne hides a driver's MultiAcquirer (and Lister and ForceReleaser),
// keeping its notifications.
type oneByOne struct{ driver.Driver }

func (o oneByOne) Subscribe(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	if n, ok := o.Driver.(driver.Notifier); ok {
		return n.Subscribe(ctx, req)
	}
	return nil, driver.ErrUnsupported
}
