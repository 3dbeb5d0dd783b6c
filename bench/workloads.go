package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// result is the outcome of one cell: one workload with one set of
// parameters on one library. Durations are in nanoseconds in JSON.
type result struct {
	Cell       string        `json:"cell"` // store/workload/params/library
	Store      string        `json:"store"`
	Workload   string        `json:"workload"`
	Library    string        `json:"library"`
	Servers    int           `json:"servers"`
	Goroutines int           `json:"goroutines"`
	CS         time.Duration `json:"critical_section,omitempty"`
	Elapsed    time.Duration `json:"elapsed"`

	Ops       int     `json:"ops"` // lock/unlock pairs, acquisitions (hot key, FIFO) or handoffs (Redis handoff)
	OpsPerSec float64 `json:"ops_per_sec"`

	// Time spent in Lock (uncontended: the acquire latency; hot key: the
	// wait), and a whole Lock+unlock pair.
	LockP50 time.Duration `json:"lock_p50"`
	LockP99 time.Duration `json:"lock_p99"`
	LockMax time.Duration `json:"lock_max"`
	PairP50 time.Duration `json:"pair_p50,omitempty"`

	MinPerG int `json:"min_per_goroutine,omitempty"` // acquisitions of the least lucky goroutine
	MaxPerG int `json:"max_per_goroutine,omitempty"`
	// Fairness is Jain's index of the acquisitions per goroutine,
	// (sum x)^2 / (n sum x^2): 1 when every goroutine got as many, 1/n
	// when one got them all.
	Fairness float64 `json:"fairness,omitempty"`
	GaveUp   int     `json:"gave_up"` // Lock calls that ran out of the wait budget

	// Handoff: release returned (or was called) -> waiter holds the lock.
	// Hot key and FIFO measure from release called only.
	Handoffs         int           `json:"handoffs,omitempty"`
	HandoffReturnP50 time.Duration `json:"handoff_return_p50,omitempty"`
	HandoffReturnP99 time.Duration `json:"handoff_return_p99,omitempty"`
	HandoffCallP50   time.Duration `json:"handoff_call_p50,omitempty"`
	HandoffCallP99   time.Duration `json:"handoff_call_p99,omitempty"`
	HandoffCallMax   time.Duration `json:"handoff_call_max,omitempty"`
	HandoffCallMean  time.Duration `json:"handoff_call_mean,omitempty"`
	// Handoff: a no-op round trip (a PING on Redis) measured inside the
	// cell, once per round while the lock is held, so under the same
	// conditions as the handoff.
	RTTP50 time.Duration `json:"rtt_p50,omitempty"`

	// FIFO: acquisitions by a goroutine other than the one that had waited
	// longest, and queue entries the store did not show in time (see
	// fifoHandoff).
	OutOfOrder  int `json:"out_of_order"`
	Unconfirmed int `json:"unconfirmed_joins,omitempty"`

	// The medians of each round (slice) of the cell, in order: the rounds
	// of a cell interleave the libraries, so round i of two libraries ran
	// at about the same time.
	RoundLockP50    []time.Duration `json:"round_lock_p50,omitempty"`
	RoundHandoffP50 []time.Duration `json:"round_handoff_p50,omitempty"`

	// CPU time per operation of this process (all its goroutines) and of
	// the redis-servers of the cell (INFO cpu, all servers summed).
	ClientCPUPerOp time.Duration `json:"client_cpu_per_op,omitempty"`
	ServerCPUPerOp time.Duration `json:"server_cpu_per_op,omitempty"`
	// Heap allocations per operation in this process (cells in one
	// process only): the library's, its client's and the workload's own.
	AllocsPerOp float64 `json:"allocs_per_op,omitempty"`
	BytesPerOp  float64 `json:"bytes_per_op,omitempty"`

	// Handoff across processes on Redis: where its time goes.
	Legs *legs `json:"legs,omitempty"`

	Errors   int    `json:"errors"`
	FirstErr string `json:"first_error,omitempty"`
}

// runCtx is what a workload runs with: one library's clients for one cell.
type runCtx struct {
	ctx    context.Context
	lks    []locker                    // one per client
	prefix string                      // fresh key prefix for this cell and library
	dur    time.Duration               // how long to keep starting new operations
	budget time.Duration               // wait budget of one Lock call
	ping   func(context.Context) error // one no-op round trip to the (first) server

	// records counts the lock records on the server (see probe).
	records func(context.Context) (int, error)
}

// samples are the raw measurements of a workload. A cell runs in slices
// (interleaved with the other libraries); the slices' samples are merged
// and then summarised into a result.
type samples struct {
	elapsed time.Duration
	ops     int
	gaveUp  int
	counts  []int // acquisitions per goroutine
	locks   []time.Duration
	pairs   []time.Duration

	fromReturn, fromCall, rtts []time.Duration
	windows                    []handoffWindow // handoff: each one's times

	outOfOrder, unconfirmed int

	// Per round: where the round's samples begin, and the round medians.
	roundLocks0, roundCall0       int
	roundLockP50, roundHandoffP50 []time.Duration

	clientCPU, serverCPU time.Duration
	mallocs, bytes       uint64

	mu       sync.Mutex
	nErrs    int
	firstErr error
}

func (s *samples) err(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nErrs++; s.firstErr == nil {
		s.firstErr = err
	}
}

// startRound begins a round (slice) of a cell.
func (s *samples) startRound() { s.roundLocks0, s.roundCall0 = len(s.locks), len(s.fromCall) }

// endRound records the round's medians (0 if it has no samples).
func (s *samples) endRound() {
	s.roundLockP50 = append(s.roundLockP50, pct(s.locks[s.roundLocks0:], 0.5))
	s.roundHandoffP50 = append(s.roundHandoffP50, pct(s.fromCall[s.roundCall0:], 0.5))
}

func (s *samples) result() result {
	r := result{Elapsed: s.elapsed, Ops: s.ops, GaveUp: s.gaveUp, Errors: s.nErrs}
	r.OutOfOrder, r.Unconfirmed = s.outOfOrder, s.unconfirmed
	if len(s.locks) > 0 {
		r.RoundLockP50 = s.roundLockP50
	}
	if len(s.fromCall) > 0 {
		r.RoundHandoffP50 = s.roundHandoffP50
	}
	r.Handoffs = len(s.fromCall)
	if s.elapsed > 0 {
		r.OpsPerSec = float64(s.ops) / s.elapsed.Seconds()
	}
	r.LockP50, r.LockP99, r.LockMax = pct(s.locks, 0.50), pct(s.locks, 0.99), pct(s.locks, 1)
	r.PairP50 = pct(s.pairs, 0.50)
	if len(s.counts) > 0 {
		r.Goroutines, r.MinPerG, r.MaxPerG = len(s.counts), slices.Min(s.counts), slices.Max(s.counts)
		r.Fairness = jain(s.counts)
	}
	r.HandoffReturnP50, r.HandoffReturnP99 = pct(s.fromReturn, 0.50), pct(s.fromReturn, 0.99)
	r.HandoffCallP50, r.HandoffCallP99, r.HandoffCallMax = pct(s.fromCall, 0.50), pct(s.fromCall, 0.99), pct(s.fromCall, 1)
	r.HandoffCallMean = mean(s.fromCall)
	r.RTTP50 = pct(s.rtts, 0.50)
	if s.ops > 0 {
		r.ClientCPUPerOp, r.ServerCPUPerOp = s.clientCPU/time.Duration(s.ops), s.serverCPU/time.Duration(s.ops)
		r.AllocsPerOp, r.BytesPerOp = float64(s.mallocs)/float64(s.ops), float64(s.bytes)/float64(s.ops)
	}
	if s.firstErr != nil {
		r.FirstErr = s.firstErr.Error()
	}
	return r
}

// lock calls l.Lock with the wait budget. gaveUp reports that the budget ran
// out (and not the run's context).
func (rc *runCtx) lock(l locker, key string) (unlock func(context.Context) error, gaveUp bool, err error) {
	ctx, cancel := context.WithTimeout(rc.ctx, rc.budget)
	defer cancel()
	unlock, err = l.Lock(ctx, key)
	if err != nil && rc.ctx.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		gaveUp = true
	}
	return unlock, gaveUp, err
}

// loop runs g goroutines over the lockers (goroutine i uses client i mod
// clients) that lock, hold for cs and unlock key(i) until rc.dur has passed.
// It records the time spent in each Lock call and each whole pair, and with
// a handoff recorder the acquisitions and releases of the handoffs.
func loop(rc *runCtx, s *samples, g int, cs time.Duration, key func(i int) string, hc handoffRecorder) {
	if s.counts == nil {
		s.counts = make([]int, g)
	}
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(rc.dur)
	for i := range g {
		wg.Go(func() {
			l, k := rc.lks[i%len(rc.lks)], key(i)
			var locks, pairs []time.Duration
			gaveUp := 0
			defer func() {
				s.mu.Lock()
				s.locks, s.pairs = append(s.locks, locks...), append(s.pairs, pairs...)
				s.ops += len(locks)
				s.counts[i] += len(locks)
				s.gaveUp += gaveUp
				s.mu.Unlock()
			}()
			for time.Now().Before(deadline) && rc.ctx.Err() == nil {
				t0 := time.Now()
				unlock, gave, err := rc.lock(l, k)
				if gave {
					gaveUp++
					continue
				}
				if err != nil {
					s.err(err)
					return
				}
				t1 := time.Now()
				if hc != nil {
					hc.acquired(t0, t1)
				}
				if cs > 0 {
					time.Sleep(cs)
				}
				t2 := time.Now()
				if hc != nil {
					hc.releasing(t2)
				}
				if err := unlock(rc.ctx); err != nil {
					s.err(err)
					return
				}
				locks = append(locks, t1.Sub(t0))
				pairs = append(pairs, t1.Sub(t0)+time.Since(t2))
			}
		})
	}
	wg.Wait()
	s.elapsed += time.Since(start)
}

// uncontended: g goroutines, each on a key of its own.
func uncontended(rc *runCtx, s *samples, g int) {
	loop(rc, s, g, 0, func(i int) string { return rc.prefix + strconv.Itoa(i) }, nil)
}

// hotKey: g goroutines contend for one key and hold it for cs. It also
// measures the handoffs (see handoffClock).
func hotKey(rc *runCtx, s *samples, g int, cs time.Duration) {
	hc := &handoffClock{}
	loop(rc, s, g, cs, func(int) string { return rc.prefix + "hot" }, hc)
	s.fromCall = append(s.fromCall, hc.samples...)
}

// handoffRecorder is told of each acquisition (when its Lock was called and
// when it returned holding the lock) and each release (just before the
// release call) on a hot key.
type handoffRecorder interface {
	acquired(called, got time.Time)
	releasing(at time.Time)
}

// handoffClock measures the handoffs on one key: the time from the holder
// beginning to release (releasing, just before the release call) to the
// next holder's Lock returning (acquired), counted when that Lock call had
// begun before the release did (the next holder was waiting, not arriving
// at a free lock). A nil clock measures nothing.
type handoffClock struct {
	mu      sync.Mutex
	release time.Time // zero once the next holder has the lock
	samples []time.Duration
}

// acquired records that a Lock called at called returned holding the lock
// at got.
func (h *handoffClock) acquired(called, got time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.release.IsZero() {
		if called.Before(h.release) {
			h.samples = append(h.samples, got.Sub(h.release))
		}
		h.release = time.Time{}
	}
}

// releasing records that the holder is about to release, at at.
func (h *handoffClock) releasing(at time.Time) {
	h.mu.Lock()
	h.release = at
	h.mu.Unlock()
}

// handoff measures how long a waiter in another client (or process: with
// remoteLockers the times are the workers' own) takes to hold the
// lock once the holder releases it. The holder keeps the lock 2-3ms, long
// enough for the waiter to be waiting (subscribed, or polling at a random
// phase), then releases; the two clients swap roles every round. Halfway
// through the hold it measures one no-op round trip (rc.ping: a PING on
// Redis): the round trip under the same conditions (a machine that was idle
// for a millisecond or so can take several times longer to answer than one
// that is busy).
func handoff(rc *runCtx, s *samples) {
	key := rc.prefix + "handoff"
	start := time.Now()
	defer func() { s.elapsed += time.Since(start) }()
	for i := 0; time.Since(start) < rc.dur && rc.ctx.Err() == nil; i++ {
		holder, waiter := rc.lks[i%2], rc.lks[(i+1)%2]
		unlock, _, err := rc.lock(holder, key)
		if err != nil {
			s.err(err)
			return
		}
		type got struct {
			unlock func(context.Context) error
			at     time.Time
			err    error
		}
		ch := make(chan got, 1)
		go func() {
			u, _, err := rc.lock(waiter, key)
			now := time.Now()
			_, at := stamped(waiter, now, now)
			ch <- got{u, at, err}
		}()
		time.Sleep(time.Millisecond + rand.N(time.Millisecond))
		t0 := time.Now()
		if err := rc.ping(rc.ctx); err != nil {
			s.err(err)
		} else {
			s.rtts = append(s.rtts, time.Since(t0))
		}
		time.Sleep(time.Millisecond)
		called := time.Now()
		err = unlock(rc.ctx)
		returned := time.Now()
		called, returned = stamped(holder, called, returned)
		w := <-ch
		if err == nil {
			err = w.err
		}
		if err != nil {
			s.err(err)
			if w.unlock != nil {
				w.unlock(rc.ctx)
			}
			return
		}
		s.fromReturn = append(s.fromReturn, w.at.Sub(returned)) // may be < 0: the waiter can win the race with the reply
		s.fromCall = append(s.fromCall, w.at.Sub(called))
		s.windows = append(s.windows, handoffWindow{holder: clientName(i % 2), called: called, returned: returned, got: w.at})
		s.ops++
		if err := w.unlock(rc.ctx); err != nil {
			s.err(err)
			return
		}
	}
}

// jain returns Jain's fairness index of xs, (sum x)^2 / (n sum x^2), 0 if
// all are 0.
func jain(xs []int) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// mean returns the mean of ds, 0 if empty.
func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// pct returns the p-quantile of ds (sorting ds), 0 if empty.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	if !slices.IsSorted(ds) {
		slices.Sort(ds)
	}
	return ds[int(p*float64(len(ds)-1)+0.5)]
}

// serverCPU returns the CPU time (user + system) the servers have used, from
// INFO cpu.
func serverCPU(ctx context.Context, cs []*redis.Client) time.Duration {
	var total time.Duration
	for _, c := range cs {
		info, err := c.Info(ctx, "cpu").Result()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(info, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			if k == "used_cpu_user" || k == "used_cpu_sys" {
				f, _ := strconv.ParseFloat(v, 64)
				total += time.Duration(f * 1e9)
			}
		}
	}
	return total
}
