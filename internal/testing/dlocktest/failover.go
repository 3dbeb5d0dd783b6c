package dlocktest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// Failover workload: contenders, each with a Client of its own opened from
// a URL, take turns on one key while a fault hits the store. Every holder
// checks a fenced register on entry: no other holder whose lock is still
// valid, and a token above every earlier one.
const (
	contenders  = 4
	failoverTTL = 3 * time.Second
	holdFor     = 50 * time.Millisecond
)

// register is the protected resource of the failover workload.
type register struct {
	mu       sync.Mutex
	holder   *dlock.Lock // the latest holder, until it leaves
	token    uint64      // the highest token seen
	times    []time.Time // acquisition times, in order
	faults   []string    // safety violations
	acquired chan struct{}
}

func newRegister() *register { return &register{acquired: make(chan struct{}, 1)} }

// enter records l as the holder, checking it against the previous one.
func (r *register) enter(l *dlock.Lock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.holder; h != nil && h.Cause() == nil {
		r.faults = append(r.faults, fmt.Sprintf("token %d acquired while token %d still held", l.Token(), h.Token()))
	}
	if l.Token() <= r.token {
		r.faults = append(r.faults, fmt.Sprintf("token %d after token %d", l.Token(), r.token))
	}
	r.holder, r.token = l, max(r.token, l.Token())
	r.times = append(r.times, time.Now())
	select {
	case r.acquired <- struct{}{}:
	default:
	}
}

// leave clears the holder if it is l.
func (r *register) leave(l *dlock.Lock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holder == l {
		r.holder = nil
	}
}

// longestGap returns the longest time between two acquisitions (or the
// start or end of the window and an acquisition) within [from, to].
func (r *register) longestGap(from, to time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var gap time.Duration
	prev := from
	for _, at := range r.times {
		if at.Before(from) {
			continue
		}
		if at.After(to) {
			break
		}
		gap = max(gap, at.Sub(prev))
		prev = at
	}
	return max(gap, to.Sub(prev))
}

// contend takes the key over and over until ctx ends, holding it briefly.
func contend(ctx context.Context, c *dlock.Client, key string, r *register) {
	for ctx.Err() == nil {
		l, err := c.Lock(ctx, key, dlock.WithTTL(failoverTTL))
		if err != nil {
			continue // a lost place in the queue, or ctx ended
		}
		r.enter(l)
		select {
		case <-time.After(holdFor):
		case <-l.Done():
		case <-ctx.Done():
		}
		r.leave(l)
		rctx, cancel := context.WithTimeout(context.Background(), dlock.ReleaseTimeout)
		_ = l.Release(rctx)
		cancel()
	}
}

// failover runs the workload on key over url, waits for a first
// acquisition, runs fault (which injects a fault, lets it last and ends
// it), and waits until acquisitions have resumed. It fails the test on a
// safety violation or if acquisitions do not resume, and logs the longest
// time without an acquisition from the fault on.
func failover(t *testing.T, url, key string, fault func()) {
	t.Helper()
	r := newRegister()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range contenders {
		c, err := dlock.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Go(func() { contend(ctx, c, key, r) })
	}
	resumed := func(what string) {
		t.Helper()
		select {
		case <-r.acquired:
		case <-time.After(time.Minute):
			t.Fatalf("no acquisition for a minute %s", what)
		}
	}
	resumed("at start")
	time.Sleep(time.Second) // some turns before the fault
	r.mu.Lock()
	before := len(r.times)
	r.mu.Unlock()
	from := time.Now()
	fault()
	for len(r.acquired) > 0 {
		<-r.acquired
	}
	resumed("after the fault")
	to := time.Now()
	cancel()
	wg.Wait()
	r.mu.Lock()
	n, faults := len(r.times), r.faults
	r.mu.Unlock()
	for _, f := range faults {
		t.Error(f)
	}
	t.Logf("%d acquisitions in the second before the fault, %d in all; longest gap without one since the fault: %v", before, n, r.longestGap(from, to).Round(time.Millisecond))
}

// faultFor is how long a fault of LeaderFailover lasts.
const faultFor = 6 * time.Second

// LeaderFailover runs the failover workload on key over srv, a replicated
// deployment of the test's own (an etcd cluster, a ZooKeeper ensemble),
// while its leader is killed (and restarted) or paused (SIGSTOP) for
// faultFor, with clients opened from srv's URL: no two holders at once,
// tokens that only grow, and acquisitions that resume after the fault.
func LeaderFailover(t *testing.T, srv *testsrv.Server, key string) {
	for _, tc := range []struct {
		name        string
		fault, heal func(*testsrv.Server) error
	}{
		{"kill", (*testsrv.Server).Kill, func(m *testsrv.Server) error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			return m.Restart(ctx)
		}},
		{"pause", (*testsrv.Server).Pause, (*testsrv.Server).Resume},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failover(t, srv.URL, key+"-"+tc.name, func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				leader, err := srv.Leader(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := tc.fault(leader); err != nil {
					t.Fatal(err)
				}
				time.Sleep(faultFor) // the fault lasts
				if err := tc.heal(leader); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// attempts forwards to a driver, counts the Acquires in flight and signals
// on started as each starts, closes queued once one has been answered, and
// counts those that fail.
type attempts struct {
	driver.Driver
	started  chan struct{}
	queued   chan struct{}
	once     sync.Once
	inflight atomic.Int32
	failed   atomic.Int32
}

func (a *attempts) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	a.inflight.Add(1)
	select {
	case a.started <- struct{}{}:
	default:
	}
	res, err := a.Driver.Acquire(ctx, req)
	a.inflight.Add(-1)
	if err != nil {
		a.failed.Add(1)
	} else {
		a.once.Do(func() { close(a.queued) })
	}
	return res, err
}

func (a *attempts) Subscribe(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	return a.Driver.(driver.Notifier).Subscribe(ctx, req)
}

// WaitThroughResets has a Client over waiter (a Notifier whose connections
// go through p) wait for key while holder holds it, and resets the waiter's
// connections ten times, each while an attempt of the waiter is held up in
// p: the waiter's Lock must not end while its context is live, and returns
// the lock once holder has released it. It logs how many attempts failed.
func WaitThroughResets(t *testing.T, holder *dlock.Client, waiter driver.Driver, p *testsrv.Proxy, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	a := &attempts{Driver: waiter, started: make(chan struct{}, 1), queued: make(chan struct{})}
	w, err := dlock.New(a)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	got := make(chan error, 1)
	go func() {
		// Frequent attempts, so that the resets catch them in flight.
		lw, err := w.Lock(ctx, key, dlock.WithTTL(3*time.Second), dlock.WithBackoff(time.Millisecond, 20*time.Millisecond))
		if err == nil {
			err = lw.Release(ctx)
		}
		got <- err
	}()
	select {
	case <-a.queued: // the store has answered the waiter: it waits
	case <-ctx.Done():
		t.Fatal("the waiter's first attempt got no answer for a minute")
	}
	for range 10 {
		p.Block()
		for a.inflight.Load() == 0 {
			select {
			case <-a.started:
			case err := <-got:
				t.Fatalf("waiter's Lock = %v while the key is held; want it to wait", err)
			case <-ctx.Done():
				t.Fatal("no attempt of the waiter for a minute")
			}
		}
		p.Reset()
		p.Unblock()
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("waiter's Lock = %v; want the lock", err)
		}
	case <-ctx.Done():
		t.Fatal("the waiter did not get the lock within a minute")
	}
	t.Logf("%d of the waiter's attempts failed", a.failed.Load())
}
