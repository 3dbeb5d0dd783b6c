package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/memdlock"
)

type ctxKey struct{}

// withName returns a context that names its caller, so that a test can tell
// which call an event's Ctx came from.
func withName(name string) context.Context {
	return context.WithValue(context.Background(), ctxKey{}, name)
}

func nameOf(ctx context.Context) string {
	if ctx == nil {
		return "<nil>"
	}
	s, _ := ctx.Value(ctxKey{}).(string)
	return s
}

// byID groups events by acquisition, in the order they were seen.
func (e *events) byID() map[uint64][]dlock.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := map[uint64][]dlock.Event{}
	for _, ev := range e.ev {
		m[ev.ID] = append(m[ev.ID], ev)
	}
	return m
}

// checkAcquisitions checks the sequence of every acquisition's events: one
// EventAcquiring first, then exactly one outcome, then (after EventAcquired)
// the hold's events and at most one end (EventReleased or EventLost); and that all of
// them agree on the key, context, mode and limit. It returns the sequences.
func checkAcquisitions(t *testing.T, e *events) map[uint64][]dlock.Event {
	t.Helper()
	m := e.byID()
	for id, evs := range m {
		if id == 0 {
			t.Errorf("%d events without an ID: %v", len(evs), evs)
			continue
		}
		if evs[0].Kind != dlock.EventAcquiring {
			t.Errorf("acquisition %d starts with %v", id, evs[0].Kind)
		}
		outcomes, ends := 0, 0
		for i, ev := range evs {
			if ev.Key != evs[0].Key || ev.Ctx != evs[0].Ctx || ev.Mode != evs[0].Mode || ev.Limit != evs[0].Limit {
				t.Errorf("acquisition %d: event %d (%v) says key %q ctx %q mode %v limit %d; the first said %q %q %v %d",
					id, i, ev.Kind, ev.Key, nameOf(ev.Ctx), ev.Mode, ev.Limit, evs[0].Key, nameOf(evs[0].Ctx), evs[0].Mode, evs[0].Limit)
			}
			switch ev.Kind {
			case dlock.EventAcquiring:
				if i != 0 {
					t.Errorf("acquisition %d: a second start at %d", id, i)
				}
			case dlock.EventAcquired, dlock.EventNotAcquired:
				outcomes++
				if i != 1 {
					t.Errorf("acquisition %d: outcome %v at %d", id, ev.Kind, i)
				}
			case dlock.EventReleased, dlock.EventLost:
				ends++
				if i < 2 || evs[1].Kind != dlock.EventAcquired {
					t.Errorf("acquisition %d: end %v at %d of %v", id, ev.Kind, i, evs)
				}
			case dlock.EventRenewed, dlock.EventRenewFailed:
				// (A renewal under way when the hold ends may report
				// after the end.)
				if i < 2 || evs[1].Kind != dlock.EventAcquired {
					t.Errorf("acquisition %d: %v at %d", id, ev.Kind, i)
				}
			}
		}
		if outcomes != 1 || ends > 1 {
			t.Errorf("acquisition %d: %d outcomes and %d ends: %v", id, outcomes, ends, evs)
		}
	}
	return m
}

func kindsOf(evs []dlock.Event) []dlock.EventKind {
	var ks []dlock.EventKind
	for _, ev := range evs {
		ks = append(ks, ev.Kind)
	}
	return ks
}

func TestEventKindStrings(t *testing.T) {
	for k, want := range map[dlock.EventKind]string{
		dlock.EventAcquired:    "acquired",
		dlock.EventNotAcquired: "not_acquired",
		dlock.EventReleased:    "released",
		dlock.EventLost:        "lost",
		dlock.EventRenewFailed: "renew_failed",
		dlock.EventAcquiring:   "acquiring",
		dlock.EventRenewed:     "renewed",
		dlock.EventKind(99):    "unknown",
	} {
		if got := k.String(); got != want {
			t.Errorf("EventKind(%d).String() = %q; want %q", int(k), got, want)
		}
	}
}

// The events of one lock carry its ID, the acquiring call's context, its
// mode and limit, from the start of the acquisition to the release.
func TestEventsOfOneLock(t *testing.T) {
	var ev events
	c := newClient(t, memdlock.New(), dlock.WithObserver(&ev))
	ctx := withName("job")
	l, err := c.Lock(ctx, "k", dlock.WithTTL(90*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // renewals at a third of the TTL
	if err := l.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := checkAcquisitions(t, &ev)
	if len(m) != 1 {
		t.Fatalf("%d acquisitions; want 1", len(m))
	}
	for id, evs := range m {
		kinds := kindsOf(evs)
		if len(kinds) < 4 || kinds[len(kinds)-1] != dlock.EventReleased {
			t.Fatalf("events = %v; want acquiring, acquired, renewals, released", kinds)
		}
		for _, e := range evs {
			if nameOf(e.Ctx) != "job" {
				t.Errorf("%v: Ctx = %q; want the acquiring call's", e.Kind, nameOf(e.Ctx))
			}
			if e.Key != "k" || e.Mode != driver.Exclusive || e.Limit != 0 {
				t.Errorf("%v: key %q mode %v limit %d", e.Kind, e.Key, e.Mode, e.Limit)
			}
			switch e.Kind {
			case dlock.EventAcquiring:
				if e.Token != 0 {
					t.Errorf("acquiring: token %d before the lock was granted", e.Token)
				}
			case dlock.EventAcquired:
				if e.Token != l.Token() || e.Wait <= 0 {
					t.Errorf("acquired: token %d wait %v; want %d and a wait", e.Token, e.Wait, l.Token())
				}
			case dlock.EventRenewed:
				if e.Token != l.Token() || e.Held <= 0 {
					t.Errorf("renewed: token %d held %v", e.Token, e.Held)
				}
			case dlock.EventReleased:
				if e.Token != l.Token() || e.Held < 100*time.Millisecond {
					t.Errorf("released: token %d held %v; want at least 100ms", e.Token, e.Held)
				}
			}
		}
		var renewed int
		for _, k := range kinds {
			if k == dlock.EventRenewed {
				renewed++
			}
		}
		if renewed < 2 {
			t.Errorf("acquisition %d: %d renewals; want the automatic ones and Refresh's", id, renewed)
		}
	}
}

func TestEventsOfFailures(t *testing.T) {
	var ev events
	store := memdlock.New()
	f := &faulty{Driver: store}
	c := newClient(t, f, dlock.WithObserver(&ev))
	l, err := c.Lock(withName("holder"), "k", dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// TryLock by another Client finds it held.
	other := newClient(t, store.Share(), dlock.WithObserver(&ev))
	if _, err := other.TryLock(withName("try"), "k"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock = %v; want ErrNotAcquired", err)
	}
	// A wait that times out.
	wctx, cancel := context.WithTimeout(withName("wait"), 50*time.Millisecond)
	defer cancel()
	if _, err := other.Lock(wctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock = %v; want DeadlineExceeded", err)
	}
	// Renewals fail until the lock is lost.
	lost := make(chan struct{})
	ev.mu.Lock()
	ev.lost = lost
	ev.mu.Unlock()
	f.set(func(f *faulty) { f.refreshErr = errors.New("connection reset") })
	<-lost
	m := checkAcquisitions(t, &ev)
	seen := map[string]bool{}
	for _, evs := range m {
		name := nameOf(evs[0].Ctx)
		seen[name] = true
		last := evs[len(evs)-1]
		switch name {
		case "holder":
			var end dlock.Event
			for _, e := range evs {
				if e.Kind == dlock.EventLost || e.Kind == dlock.EventReleased {
					end = e
				}
			}
			if end.Kind != dlock.EventLost || !errors.Is(end.Err, dlock.ErrLost) || end.Token != l.Token() || end.Held <= 0 || end.Reason() != "expired" {
				t.Errorf("holder: end %v (%v, held %v); want lost", end.Kind, end.Err, end.Held)
			}
			var failures int
			for _, e := range evs {
				if e.Kind == dlock.EventRenewFailed {
					failures++
					if e.Err == nil || e.Token != l.Token() {
						t.Errorf("renew_failed: err %v token %d", e.Err, e.Token)
					}
				}
			}
			if failures == 0 {
				t.Errorf("holder: events %v; want renewal failures", kindsOf(evs))
			}
		case "try", "wait":
			if len(evs) != 2 || last.Kind != dlock.EventNotAcquired || !errors.Is(last.Err, dlock.ErrNotAcquired) {
				t.Errorf("%s: events %v (%v); want acquiring, not_acquired", name, kindsOf(evs), last.Err)
			}
			if want := map[string]string{"try": "held", "wait": "timeout"}[name]; last.Reason() != want {
				t.Errorf("%s: Reason() = %q; want %q", name, last.Reason(), want)
			}
			if name == "wait" && (last.Wait < 50*time.Millisecond || !errors.Is(last.Err, context.DeadlineExceeded)) {
				t.Errorf("wait: waited %v (%v); want the context's 50ms", last.Wait, last.Err)
			}
		default:
			t.Errorf("events of an unknown call: %v", kindsOf(evs))
		}
	}
	if len(seen) != 3 {
		t.Errorf("acquisitions seen: %v; want holder, try and wait", seen)
	}
}

// Many waits for one key at once: each start is matched with its own
// outcome by ID, and each outcome carries the context of its own call.
func TestEventsOfConcurrentWaits(t *testing.T) {
	var ev events
	store := memdlock.New()
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		c := newClient(t, store.Share(), dlock.WithObserver(&ev))
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(withName(fmt.Sprint(i)), 10*time.Second)
			defer cancel()
			l, err := c.Lock(ctx, "k")
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
			l.Release(context.Background())
		})
	}
	wg.Wait()
	m := checkAcquisitions(t, &ev)
	if len(m) != n {
		t.Fatalf("%d acquisitions; want %d", len(m), n)
	}
	names := map[string]bool{}
	tokens := map[uint64]bool{}
	for _, evs := range m {
		names[nameOf(evs[0].Ctx)] = true
		if kinds := kindsOf(evs); len(kinds) != 3 || kinds[2] != dlock.EventReleased {
			t.Errorf("events %v; want acquiring, acquired, released", kinds)
		}
		tokens[evs[1].Token] = true
	}
	if len(names) != n || len(tokens) != n {
		t.Errorf("%d contexts and %d tokens among %d acquisitions", len(names), len(tokens), n)
	}
}

// Mode and limit are the ones asked for, and stay so through a Downgrade.
func TestEventsOfModes(t *testing.T) {
	var ev events
	c := newClient(t, memdlock.New(), dlock.WithObserver(&ev))
	ctx := context.Background()
	p, err := c.Lock(ctx, "sem", dlock.WithLimit(3))
	if err != nil {
		t.Fatal(err)
	}
	p.Release(ctx)
	r, err := c.Lock(ctx, "rw", dlock.Shared())
	if err != nil {
		t.Fatal(err)
	}
	r.Release(ctx)
	w, err := c.Lock(ctx, "down")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Downgrade(ctx); err != nil {
		t.Fatal(err)
	}
	w.Release(ctx)
	want := map[string]struct {
		mode  dlock.Mode
		limit int
	}{"sem": {driver.Semaphore, 3}, "rw": {driver.Shared, 0}, "down": {driver.Exclusive, 0}}
	m := checkAcquisitions(t, &ev)
	if len(m) != 3 {
		t.Fatalf("%d acquisitions; want 3", len(m))
	}
	for _, evs := range m {
		w := want[evs[0].Key]
		for _, e := range evs {
			if e.Mode != w.mode || e.Limit != w.limit {
				t.Errorf("%q %v: mode %v limit %d; want %v %d", e.Key, e.Kind, e.Mode, e.Limit, w.mode, w.limit)
			}
		}
		if kindsOf(evs)[len(evs)-1] != dlock.EventReleased {
			t.Errorf("%q: %v", evs[0].Key, kindsOf(evs))
		}
	}
}

// IDs are unique across Clients, and re-entry reports nothing.
func TestEventIDs(t *testing.T) {
	var ev events
	store := memdlock.New()
	c1 := newClient(t, store.Share(), dlock.WithObserver(&ev))
	c2 := newClient(t, store.Share(), dlock.WithObserver(&ev))
	ctx := context.Background()
	for i := range 5 {
		for _, c := range []*dlock.Client{c1, c2} {
			l, err := c.Lock(ctx, fmt.Sprint("k", i))
			if err != nil {
				t.Fatal(err)
			}
			inner, err := c.Lock(l.Context(), l.Key()) // re-entry
			if err != nil {
				t.Fatal(err)
			}
			inner.Release(ctx)
			l.Release(ctx)
		}
	}
	m := checkAcquisitions(t, &ev)
	if len(m) != 10 {
		t.Errorf("%d acquisitions; want 10 (re-entries report none)", len(m))
	}
}

// LockAll reports one acquisition per key, whether the keys are taken at
// once or (after the atomic attempt found one held) one by one.
func TestEventsOfLockAll(t *testing.T) {
	var ev events
	store := memdlock.New()
	c := newClient(t, store.Share(), dlock.WithObserver(&ev))
	other := newClient(t, store.Share())
	ctx := withName("all")
	m, err := c.LockAll(ctx, []string{"b", "a"})
	if err != nil {
		t.Fatal(err)
	}
	m.Release(ctx)
	// "b" is held: the atomic attempt fails, and the wait goes on key by
	// key until "b" is released.
	hb, err := other.Lock(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { hb.Release(context.Background()) })
	m, err = c.LockAll(ctx, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	m.Release(ctx)
	// TryLockAll fails: every key's acquisition reports it.
	hb, err = other.Lock(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLockAll(ctx, []string{"a", "b"}); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLockAll = %v; want ErrNotAcquired", err)
	}
	// LockAll times out one by one, at "b": "c" never starts waiting, and
	// reports the failure too.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.LockAll(wctx, []string{"a", "b", "c"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockAll = %v; want DeadlineExceeded", err)
	}
	hb.Release(context.Background())
	got := map[string][]string{} // key: the outcome of each acquisition in order
	for _, evs := range checkAcquisitions(t, &ev) {
		if nameOf(evs[0].Ctx) != "all" {
			t.Errorf("%q: Ctx %q; want LockAll's", evs[0].Key, nameOf(evs[0].Ctx))
		}
		got[evs[0].Key] = append(got[evs[0].Key], evs[1].Kind.String())
	}
	want := map[string]int{"a": 4, "b": 4, "c": 2}
	for k, n := range want {
		if len(got[k]) != n {
			t.Errorf("%q: outcomes %v; want %d acquisitions", k, got[k], n)
		}
	}
	if len(got) != len(want) {
		t.Errorf("keys %v", got)
	}
}

func TestEventReason(t *testing.T) {
	wrap := func(errs ...error) error {
		f := "x"
		args := make([]any, len(errs))
		for i, e := range errs {
			f += ": %w"
			args[i] = e
		}
		return fmt.Errorf(f, args...)
	}
	for _, tc := range []struct {
		kind dlock.EventKind
		err  error
		want string
	}{
		{dlock.EventNotAcquired, wrap(dlock.ErrNotAcquired), "held"},
		{dlock.EventNotAcquired, wrap(dlock.ErrNotAcquired, context.DeadlineExceeded), "timeout"},
		{dlock.EventNotAcquired, wrap(dlock.ErrNotAcquired, context.Canceled), "cancelled"},
		{dlock.EventNotAcquired, wrap(dlock.ErrNotAcquired, dlock.ErrClosed), "closed"},
		{dlock.EventNotAcquired, wrap(dlock.ErrNotAcquired, context.DeadlineExceeded, dlock.ErrUnavailable), "unavailable"},
		{dlock.EventNotAcquired, wrap(dlock.ErrPermanent, dlock.ErrUnavailable), "permanent"},
		{dlock.EventNotAcquired, wrap(dlock.ErrUnavailable), "unavailable"},
		{dlock.EventNotAcquired, wrap(dlock.ErrNotAcquired, dlock.ErrLost), "other"},
		{dlock.EventNotAcquired, errors.New("boom"), "other"},
		{dlock.EventLost, wrap(dlock.ErrLost, dlock.ErrMaxHold), "max_hold"},
		{dlock.EventLost, wrap(dlock.ErrLost, driver.ErrNotOwner), "not_held"},
		{dlock.EventLost, wrap(dlock.ErrLost), "expired"},
		{dlock.EventReleased, nil, ""},
		{dlock.EventRenewFailed, errors.New("boom"), ""},
	} {
		if got := (dlock.Event{Kind: tc.kind, Err: tc.err}).Reason(); got != tc.want {
			t.Errorf("%v %v: Reason() = %q; want %q", tc.kind, tc.err, got, tc.want)
		}
	}
}

// A hold taken over with Resume reports EventAcquired with an ID, mode and
// context of its own, and its end under the same ID.
func TestEventsOfResume(t *testing.T) {
	var ev events
	store := memdlock.New()
	c := newClient(t, store.Share())
	l, err := c.Lock(context.Background(), "k", dlock.WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	id := l.HoldID()
	if err := l.Detach(); err != nil {
		t.Fatal(err)
	}
	other := newClient(t, store.Share(), dlock.WithObserver(&ev))
	r, err := other.Resume(withName("resume"), id)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := ev.byID()
	if len(m) != 1 {
		t.Fatalf("%d acquisitions; want 1", len(m))
	}
	for id, evs := range m {
		if kinds := kindsOf(evs); !equal(kinds, []dlock.EventKind{dlock.EventAcquired, dlock.EventReleased}) || id == 0 {
			t.Errorf("events %v under ID %d; want acquired, released", kinds, id)
		}
		for _, e := range evs {
			if nameOf(e.Ctx) != "resume" || e.Mode != driver.Semaphore || e.Limit != 2 || e.Token != l.Token() {
				t.Errorf("%v: ctx %q mode %v limit %d token %d", e.Kind, nameOf(e.Ctx), e.Mode, e.Limit, e.Token)
			}
		}
	}
}
