package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/memdlock"
	"go.uber.org/goleak"
)

// TestMain fails the run if goroutines are left over.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// faulty wraps a real in-process store and lets a test break single
// operations, as a flaky network would.
type faulty struct {
	*memdlock.Driver
	mu           sync.Mutex
	refreshErr   error         // returned by Refresh instead of refreshing
	acquireErr   error         // returned by Acquire after acquiring (a lost reply)
	acquireDelay time.Duration // added before Acquire returns
	failAttempts map[int]bool  // Acquire attempts (from 1) that fail without reaching the store
	failFrom     int           // if not 0, Acquire attempts from this one on fail too
	onFail       func()        // if not nil, called after each attempt that failed
	attempts     int
}

func (f *faulty) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	f.mu.Lock()
	f.attempts++
	fail := f.failAttempts[f.attempts] || f.failFrom > 0 && f.attempts >= f.failFrom
	onFail := f.onFail
	f.mu.Unlock()
	if fail {
		if onFail != nil {
			defer onFail()
		}
		return driver.Result{}, errors.New("connection refused")
	}
	res, err := f.Driver.Acquire(ctx, req)
	f.mu.Lock()
	aerr, delay := f.acquireErr, f.acquireDelay
	f.mu.Unlock()
	time.Sleep(delay)
	if aerr != nil {
		return driver.Result{}, aerr
	}
	return res, err
}

func (f *faulty) Refresh(ctx context.Context, req driver.Request) error {
	f.mu.Lock()
	rerr := f.refreshErr
	f.mu.Unlock()
	if rerr != nil {
		return rerr
	}
	return f.Driver.Refresh(ctx, req)
}

func (f *faulty) set(fn func(*faulty)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

type events struct {
	mu   sync.Mutex
	ev   []dlock.Event
	lost chan struct{} // if not nil, closed at the first EventLost
}

func (e *events) Observe(ev dlock.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ev = append(e.ev, ev)
	if ev.Kind == dlock.EventLost && e.lost != nil {
		close(e.lost)
		e.lost = nil
	}
}

func (e *events) kinds() []dlock.EventKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ks []dlock.EventKind
	for _, ev := range e.ev {
		ks = append(ks, ev.Kind)
	}
	return ks
}

func newClient(t *testing.T, d driver.Driver, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRenewalFailureLosesLock(t *testing.T) {
	store := memdlock.New()
	f := &faulty{Driver: store.Share()}
	lost := make(chan struct{})
	ev := events{lost: lost}
	c := newClient(t, f, dlock.WithObserver(&ev))
	l, err := c.Lock(context.Background(), "k", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	f.set(func(f *faulty) { f.refreshErr = errors.New("connection reset") })
	<-l.Done()
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLost) {
		t.Fatalf("cause = %v; want ErrLost", cause)
	}
	if err := l.Refresh(context.Background()); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Refresh after loss = %v; want ErrLost", err)
	}
	// The context is cancelled first (the signal must not wait for
	// observers); the lost event follows.
	select {
	case <-lost:
	case <-time.After(time.Minute):
		t.Fatal("no lost event")
	}
	kinds := ev.kinds()
	if len(kinds) < 2 || kinds[0] != dlock.EventAcquiring || kinds[1] != dlock.EventAcquired || kinds[len(kinds)-1] != dlock.EventLost {
		t.Errorf("events = %v; want acquiring, acquired, renew failures, lost", kinds)
	}
	var failures int
	for _, k := range kinds {
		if k == dlock.EventRenewFailed {
			failures++
		}
	}
	if failures == 0 {
		t.Errorf("events = %v; want at least one renew_failed", kinds)
	}
	// The lock was lost locally before the store let it go: once the store
	// expires it, another client takes it.
	other := newClient(t, store.Share())
	l2, err := other.Lock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after %d", l2.Token(), l.Token())
	}
	l2.Release(context.Background())
}

func TestTransientRefreshErrorKeepsLock(t *testing.T) {
	f := &faulty{Driver: memdlock.New()}
	c := newClient(t, f)
	l, err := c.Lock(context.Background(), "k", dlock.WithTTL(time.Minute), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	f.set(func(f *faulty) { f.refreshErr = errors.New("timeout") })
	err = l.Refresh(context.Background())
	if err == nil || errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Refresh with a transient failure = %v; want a plain error", err)
	}
	if l.Cause() != nil {
		t.Fatalf("lock ended after one transient failure: %v", l.Cause())
	}
	f.set(func(f *faulty) { f.refreshErr = nil })
	if err := l.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestLostReplyLeavesNothing(t *testing.T) {
	store := memdlock.New()
	f := &faulty{Driver: store.Share(), acquireErr: errors.New("reply lost")}
	c := newClient(t, f)
	_, err := c.TryLock(context.Background(), "k")
	if err == nil || !strings.Contains(err.Error(), "reply lost") {
		t.Fatalf("TryLock = %v; want the store's error", err)
	}
	if n := store.Count(""); n != 0 {
		t.Errorf("store keeps %d records after a failed acquire; want 0", n)
	}
}

func TestWaitRidesOutStoreErrors(t *testing.T) {
	store := memdlock.New()
	holder := newClient(t, store.Share())
	held, err := holder.Lock(context.Background(), "k", dlock.WithTTL(100*time.Millisecond), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	// The first attempt reaches the store and finds the lock held; the
	// next two fail; the wait goes on and gets the lock once it expires.
	f := &faulty{Driver: store.Share(), failAttempts: map[int]bool{2: true, 3: true}}
	c := newClient(t, f)
	l, err := c.Lock(context.Background(), "k", dlock.WithBackoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatalf("Lock with store errors while waiting = %v; want the lock", err)
	}
	if l.Token() <= held.Token() {
		t.Errorf("token %d after %d", l.Token(), held.Token())
	}
	l.Release(context.Background())

	// A store that fails the very first attempt is reported at once.
	f = &faulty{Driver: store.Share(), failAttempts: map[int]bool{1: true}}
	c = newClient(t, f)
	_, err = c.Lock(context.Background(), "k")
	if err == nil || errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Lock on a store failing its first attempt = %v; want the store's error", err)
	}
}

func TestLateReplyIsNotHandedOut(t *testing.T) {
	store := memdlock.New()
	f := &faulty{Driver: store.Share(), acquireDelay: 60 * time.Millisecond}
	c := newClient(t, f)
	_, err := c.TryLock(context.Background(), "k", dlock.WithTTL(50*time.Millisecond))
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock whose reply came after the lease = %v; want ErrNotAcquired", err)
	}
	if n := store.Count(""); n != 0 {
		t.Errorf("store keeps %d records; want 0", n)
	}
}

// TestLateReplyAfterMaxHold checks that a lock whose reply came after its
// max hold had run out is not handed out, already ended.
func TestLateReplyAfterMaxHold(t *testing.T) {
	store := memdlock.New()
	f := &faulty{Driver: store.Share(), acquireDelay: 60 * time.Millisecond}
	c := newClient(t, f)
	_, err := c.TryLock(context.Background(), "k", dlock.WithMaxHold(20*time.Millisecond))
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock whose reply came after the max hold = %v; want ErrNotAcquired", err)
	}
	if n := store.Count(""); n != 0 {
		t.Errorf("store keeps %d records; want 0", n)
	}
}

func TestReleaseAfter(t *testing.T) {
	store := memdlock.New()
	a, b := newClient(t, store.Share()), newClient(t, store.Share())
	l, err := a.Lock(context.Background(), "job", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseAfter(context.Background(), 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrNotHeld) {
		t.Errorf("cause = %v; want ErrNotHeld", cause)
	}
	if _, err := b.TryLock(context.Background(), "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock during the hold = %v; want ErrNotAcquired", err)
	}
	l2, err := b.Lock(context.Background(), "job")
	if err != nil {
		t.Fatalf("Lock after the hold: %v", err)
	}
	l2.Release(context.Background())
	// A hold shorter than the backend's minimum TTL is raised to it.
	l3, _ := a.Lock(context.Background(), "job")
	if err := l3.ReleaseAfter(context.Background(), time.Nanosecond); err != nil {
		t.Errorf("ReleaseAfter below the minimum TTL = %v; want nil", err)
	}
	l4, err := b.Lock(context.Background(), "job")
	if err != nil {
		t.Fatalf("Lock after a minimal hold: %v", err)
	}
	l4.Release(context.Background())
}

func TestDo(t *testing.T) {
	c := newClient(t, memdlock.New())
	boom := errors.New("boom")
	var token uint64
	err := c.Do(context.Background(), "k", func(ctx context.Context, l *dlock.Lock) error {
		token = l.Token()
		return boom
	})
	if !errors.Is(err, boom) || token == 0 {
		t.Errorf("Do = %v with token %d; want fn's error and a token", err, token)
	}
	// The lock was released: it can be taken at once.
	l, err := c.TryLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	l.Release(context.Background())
}

func TestObserverSeesLifecycle(t *testing.T) {
	var ev events
	c := newClient(t, memdlock.New(), dlock.WithObserver(&ev))
	l, err := c.Lock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	c.TryLock(context.Background(), "k")
	l.Release(context.Background())
	want := []dlock.EventKind{dlock.EventAcquiring, dlock.EventAcquired, dlock.EventAcquiring, dlock.EventNotAcquired, dlock.EventReleased}
	if got := ev.kinds(); !equal(got, want) {
		t.Errorf("events = %v; want %v", got, want)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestOpen(t *testing.T) {
	_, err := dlock.Open(context.Background(), "nosuch://x")
	var ae *dlock.ArgError
	if !errors.As(err, &ae) || ae.Name != "url" || !strings.Contains(err.Error(), "mem") {
		t.Errorf("Open with an unknown scheme = %v; want an ArgError listing the known schemes", err)
	}
	if _, err := dlock.Open(context.Background(), "no-scheme"); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Open without a scheme = %v; want ErrInvalidArgument", err)
	}
	if _, err := dlock.Open(context.Background(), "mem://x\x7f"); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Open with an unparsable URL = %v; want ErrInvalidArgument", err)
	}
	a, err := dlock.Open(context.Background(), "mem://shared")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := dlock.Open(context.Background(), "mem://shared")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := a.Lock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(context.Background(), "k"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("clients opened on the same mem:// name do not share locks: %v", err)
	}
	l.Release(context.Background())
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := dlock.New(nil); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("New(nil) = %v; want ErrInvalidArgument", err)
	}
	if _, err := dlock.New(memdlock.New(), dlock.WithDefaultTTL(-1)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("New with a negative default TTL = %v; want ErrInvalidArgument", err)
	}
	// memdlock accepts 1ms leases, but a lease within the drift margin
	// would never be valid.
	c := newClient(t, memdlock.New())
	if _, err := c.TryLock(context.Background(), "k", dlock.WithTTL(2*time.Millisecond)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("TryLock with a 2ms TTL = %v; want ErrInvalidArgument (no validity after the drift margin)", err)
	}
}

func TestLocalWaitersQueue(t *testing.T) {
	// Goroutines of one client share one remote wait: however many wait,
	// each gets the lock in turn and all finish.
	c := newClient(t, memdlock.New())
	var wg sync.WaitGroup
	var mu sync.Mutex
	inside := 0
	for range 32 {
		wg.Go(func() {
			l, err := c.Lock(context.Background(), "k")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			inside++
			if inside != 1 {
				t.Errorf("%d holders", inside)
			}
			inside--
			mu.Unlock()
			l.Release(context.Background())
		})
	}
	wg.Wait()
}

// coarse reports a coarse lease clock and records the leases it is asked for.
type coarse struct {
	*memdlock.Driver
	mu   sync.Mutex
	ttls []time.Duration
}

func (c *coarse) Capabilities() driver.Capabilities {
	caps := c.Driver.Capabilities()
	caps.TTLResolution = time.Second
	return caps
}

func (c *coarse) Refresh(ctx context.Context, req driver.Request) error {
	c.mu.Lock()
	c.ttls = append(c.ttls, req.TTL)
	c.mu.Unlock()
	return c.Driver.Refresh(ctx, req)
}

func TestReleaseAfterCoarseClock(t *testing.T) {
	d := &coarse{Driver: memdlock.New()}
	c := newClient(t, d)
	l, err := c.Lock(context.Background(), "job", dlock.WithTTL(time.Minute), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseAfter(context.Background(), 2500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// Two units more than asked: a store that rounds down and may end a
	// lease a unit early still holds the lock for at least 2.5s.
	if want := 4500 * time.Millisecond; len(d.ttls) != 1 || d.ttls[0] != want {
		t.Errorf("ReleaseAfter asked for leases %v; want [%v]", d.ttls, want)
	}
}

// queueing declares FIFO over an in-process store and records the requests
// it sees; the vanishFor attempts from the one numbered vanishAt on report,
// if queued, that the owner's place in the queue has gone.
type queueing struct {
	*memdlock.Driver
	vanishAt  int // from this attempt on, the queue entry is gone
	vanishFor int // for this many attempts
	blipAt    int // this attempt fails without reaching the store
	mu        sync.Mutex
	reqs      []driver.Request
	releases  int
}

func (q *queueing) Release(ctx context.Context, req driver.Request) error {
	q.mu.Lock()
	q.releases++
	q.mu.Unlock()
	return q.Driver.Release(ctx, req)
}

func (q *queueing) Capabilities() driver.Capabilities {
	caps := q.Driver.Capabilities()
	caps.FIFO = true
	return caps
}

func (q *queueing) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	q.mu.Lock()
	q.reqs = append(q.reqs, req)
	n := len(q.reqs)
	q.mu.Unlock()
	if req.Queue && q.vanishAt > 0 && n >= q.vanishAt && n < q.vanishAt+q.vanishFor {
		return driver.Result{}, fmt.Errorf("queue entry of %q: %w", req.Key, driver.ErrNotOwner)
	}
	if n == q.blipAt {
		return driver.Result{}, errors.New("connection reset")
	}
	return q.Driver.Acquire(ctx, req)
}

// TestQueuedWaitRequeuesWhenPlaceIsLost checks that a queued waiter whose
// place in the queue ends (its session or lease ran out) keeps waiting: it
// clears what is left of the old place and queues again, at once, as a new
// owner, and after a backoff if that place too ends unanswered.
func TestQueuedWaitRequeuesWhenPlaceIsLost(t *testing.T) {
	store := memdlock.New()
	q := &queueing{Driver: store.Share(), vanishAt: 2, vanishFor: 2}
	if err := queuedWait(t, store, q, 5); err != nil {
		t.Fatalf("waiter: %v; want the lock", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	owners := map[string]bool{}
	for _, r := range q.reqs {
		owners[r.Owner] = true
		if !r.Queue {
			t.Errorf("request %+v; want every attempt of Lock queued", r)
		}
	}
	if len(owners) != 3 || q.reqs[0].Owner == q.reqs[2].Owner || q.reqs[2].Owner == q.reqs[3].Owner || q.reqs[3].Owner != q.reqs[4].Owner {
		t.Errorf("owners of the attempts: %v; want a new owner after each lost place", q.reqs)
	}
}

// TestQueuedWaitKeepsPlaceOverBlip checks that a queued waiter whose attempt
// fails keeps its place: it does not release its queue entry before trying
// again.
func TestQueuedWaitKeepsPlaceOverBlip(t *testing.T) {
	store := memdlock.New()
	q := &queueing{Driver: store.Share(), blipAt: 2}
	if err := queuedWait(t, store, q, 3); err != nil {
		t.Fatalf("waiter: %v", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.releases != 1 {
		t.Errorf("%d releases; want 1 (the waiter's own, after it acquired): the blip must not give up the place in the queue", q.releases)
	}
}

// queuedWait has a Client of store hold "k" while a Client over q waits for
// it; once q has seen attempts attempts, the holder releases it. It returns
// how the wait ended (the waiter releases what it got).
func queuedWait(t *testing.T, store *memdlock.Driver, q *queueing, attempts int) error {
	l, err := newClient(t, store.Share()).Lock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	waiter := newClient(t, q, dlock.WithLogger(slog.New(slog.DiscardHandler)))
	got := make(chan error, 1)
	go func() {
		wl, err := waiter.Lock(t.Context(), "k", dlock.WithBackoff(time.Millisecond, time.Millisecond))
		if err == nil {
			err = wl.Release(t.Context())
		}
		got <- err
	}()
	for {
		q.mu.Lock()
		n := len(q.reqs)
		q.mu.Unlock()
		if n >= attempts {
			break
		}
		runtime.Gosched()
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	return <-got
}

// A URL that does not parse is never shown with its password.
func TestOpenHidesSecrets(t *testing.T) {
	for _, raw := range []string{
		"postgres://u:s3cret@h:bad port/x",
		"postgres://u:s3cret%zz@h/x",
		"host=h password=s3cret",
		"nosuch://u:s3cret@h/?password=s3cret",
	} {
		_, err := dlock.Open(context.Background(), raw)
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q) = %v; want an error that hides the secret", raw, err)
		}
	}
}

// TestOpenNamesURLOnce checks that a URL refused by its backend's opener (a
// *dlock.ArgError naming the url) is shown once, with one "dlock:", and that
// any other failure of the opener is wrapped with the (redacted) URL.
func TestOpenNamesURLOnce(t *testing.T) {
	dlock.Register("urlonce", func(ctx context.Context, u *url.URL) (driver.Driver, error) {
		if u.Query().Has("bad") {
			return nil, &dlock.ArgError{Name: "url", Value: u.Redacted(), Reason: "bad parameter"}
		}
		return nil, errors.New("connection refused")
	})
	_, err := dlock.Open(context.Background(), "urlonce://u:s3cret@h/?bad=1")
	if !errors.Is(err, dlock.ErrInvalidArgument) || strings.Count(err.Error(), "dlock:") != 1 || strings.Count(err.Error(), "urlonce://") != 1 {
		t.Errorf("Open of a refused URL = %v; want an ArgError with the URL and \"dlock:\" once", err)
	}
	_, err = dlock.Open(context.Background(), "urlonce://u:s3cret@h/")
	if err == nil || !strings.Contains(err.Error(), "dlock: open urlonce://u:xxxxx@h/: connection refused") {
		t.Errorf("Open of an unreachable store = %v; want the redacted URL and the cause", err)
	}
}
