package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/memdlock"
)

// sessionBound is an in-process store that declares its holds bound to the
// driver, as the etcd and ZooKeeper drivers do.
type sessionBound struct{ *memdlock.Driver }

func (s sessionBound) Capabilities() driver.Capabilities {
	caps := s.Driver.Capabilities()
	caps.PortableHolds = false
	return caps
}

// holders returns the holders of key on c's store.
func holders(t *testing.T, c *dlock.Client, key string) []dlock.Holder {
	t.Helper()
	hs, err := c.List(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// A detached lock outlives its Client's Close, and a Lock resumed from its
// hold ID on another Client extends and releases it.
func TestDetachAndResume(t *testing.T) {
	ctx := context.Background()
	store := memdlock.New()
	a, err := dlock.New(store.Share())
	if err != nil {
		t.Fatal(err)
	}
	l, err := a.Lock(ctx, "phone:555", dlock.WithTTL(time.Minute), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	id := l.HoldID()
	if err := l.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if err := l.Detach(); err != nil {
		t.Errorf("second Detach: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := newClient(t, store.Share())
	if hs := holders(t, b, "phone:555"); len(hs) != 1 || hs[0].Token != l.Token() || hs[0].Owner != l.OwnerID() {
		t.Fatalf("holders after Detach and Close: %+v; want the detached hold", hs)
	}
	if _, err := b.TryLock(ctx, "phone:555"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of a detached hold: %v; want ErrNotAcquired", err)
	}

	r, err := b.Resume(ctx, id, dlock.WithTTL(time.Hour), dlock.WithoutRenewal())
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if r.Key() != l.Key() || r.Token() != l.Token() || r.OwnerID() != l.OwnerID() || r.Mode() != driver.Exclusive || r.TTL() != time.Hour {
		t.Errorf("resumed %v (owner %s, ttl %v); want %v (owner %s), ttl 1h", r, r.OwnerID(), r.TTL(), l, l.OwnerID())
	}
	if hs := holders(t, b, "phone:555"); len(hs) != 1 || hs[0].TTL <= time.Minute {
		t.Errorf("holders after Resume WithTTL(1h): %+v; want the lease extended", hs)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatalf("Release of the resumed lock: %v", err)
	}
	if hs := holders(t, b, "phone:555"); len(hs) != 0 {
		t.Errorf("holders after Release: %+v", hs)
	}
	// The hold ID is stale now: refused, and the store unchanged.
	next, err := b.TryLock(ctx, "phone:555")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Resume(ctx, id); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Resume of a released hold: %v; want ErrNotHeld", err)
	}
	if err := next.Refresh(ctx); err != nil {
		t.Errorf("the new holder after a stale Resume: %v", err)
	}
}

// After Detach the handle is done and changes nothing on the store.
func TestDetachedHandle(t *testing.T) {
	ctx := context.Background()
	store := memdlock.New()
	ev := &events{}
	c := newClient(t, store.Share(), dlock.WithObserver(ev))
	l, err := c.Lock(ctx, "k", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Detach(); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrNotHeld) || !strings.Contains(cause.Error(), "detached") {
		t.Errorf("context cause %v; want ErrNotHeld saying the lock was detached", cause)
	}
	for name, err := range map[string]error{
		"Refresh":      l.Refresh(ctx),
		"Release":      l.Release(ctx),
		"ReleaseAfter": l.ReleaseAfter(ctx, time.Second),
		"Err":          l.Cause(),
	} {
		if !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("%s after Detach: %v; want ErrNotHeld", name, err)
		}
	}
	if hs := holders(t, c, "k"); len(hs) != 1 || hs[0].TTL <= 50*time.Second {
		t.Errorf("holders: %+v; want the hold, untouched", hs)
	}
	if got := ev.kinds(); !equal(got, []dlock.EventKind{dlock.EventAcquiring, dlock.EventAcquired, dlock.EventReleased}) {
		t.Errorf("events %v; want acquiring, acquired, released", got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if hs := holders(t, newClient(t, store.Share()), "k"); len(hs) != 1 {
		t.Errorf("holders after Close: %+v; want the detached hold", hs)
	}
}

// Detach of a lock that ended otherwise reports why: the hold is not left
// on the store.
func TestDetachEndedLock(t *testing.T) {
	ctx := context.Background()
	store := memdlock.New()
	c := newClient(t, store.Share())
	l, err := c.Lock(ctx, "k", dlock.WithTTL(time.Minute), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := l.Refresh(ctx); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Refresh after a forced release: %v", err)
	}
	if err := l.Detach(); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Detach of a lost lock: %v; want ErrLost", err)
	}
	l, err = c.Lock(ctx, "k2")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Detach(); !errors.Is(err, dlock.ErrNotHeld) || strings.Contains(err.Error(), "detached") {
		t.Errorf("Detach of a released lock: %v; want ErrNotHeld for the release", err)
	}
}

// A hold ID that names no live hold is refused with ErrNotHeld and changes
// nothing; a malformed one gets an *ArgError that does not show it.
func TestResumeRefusesBadHoldIDs(t *testing.T) {
	ctx := context.Background()
	store := memdlock.New()
	c := newClient(t, store.Share())
	l, err := c.Lock(ctx, "k", dlock.WithTTL(time.Minute), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	id := l.HoldID()
	other, err := c.Lock(ctx, "other", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// Another hold of the same key, with an owner of its own: the ID of
	// one that held "k" before.
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	cur, err := c.Lock(ctx, "k", dlock.WithTTL(time.Minute), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	before := holders(t, c, "")
	if _, err := c.Resume(ctx, id, dlock.WithTTL(time.Hour)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Resume with a stale hold ID: %v; want ErrNotHeld", err)
	}
	after := holders(t, c, "")
	if len(after) != 2 || after[0].Token != before[0].Token || after[0].TTL > before[0].TTL {
		t.Errorf("holders %+v after a refused Resume; want them unchanged: %+v", after, before)
	}

	for name, bad := range map[string]string{
		"empty":        "",
		"no prefix":    strings.TrimPrefix(id, "dlh1."),
		"next version": "dlh2." + strings.TrimPrefix(id, "dlh1."),
		"truncated":    id[:len(id)-3],
		"not base64":   id[:10] + "!" + id[11:],
		"trailing":     id + "AAAA",
		"a token":      cur.OwnerID(),
	} {
		_, err := c.Resume(ctx, bad)
		var ae *dlock.ArgError
		if !errors.As(err, &ae) || ae.Name != "hold ID" || !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: %v; want an *ArgError for the hold ID", name, err)
			continue
		}
		if len(bad) > 8 && strings.Contains(err.Error(), bad[5:13]) {
			t.Errorf("%s: the error %q shows the hold ID", name, err)
		}
	}
	if err := cur.Refresh(ctx); err != nil {
		t.Errorf("the holder after refused Resumes: %v", err)
	}
	if err := other.Refresh(ctx); err != nil {
		t.Errorf("the other holder after refused Resumes: %v", err)
	}
}

// A resumed lock keeps the mode and limit of its hold, renews itself, and
// its own hold ID can be resumed again.
func TestResumeModes(t *testing.T) {
	ctx := context.Background()
	store := memdlock.New()
	a := newClient(t, store.Share())
	b := newClient(t, store.Share())
	const ttl = 200 * time.Millisecond
	sem, err := a.Lock(ctx, "sem", dlock.WithLimit(2), dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Resume(ctx, sem.HoldID(), dlock.Shared()); !errors.Is(err, dlock.ErrModeMismatch) {
		t.Errorf("Resume of a permit as Shared: %v; want ErrModeMismatch", err)
	}
	if _, err := b.Resume(ctx, sem.HoldID(), dlock.WithLimit(3)); !errors.Is(err, dlock.ErrModeMismatch) {
		t.Errorf("Resume of a permit with another limit: %v; want ErrModeMismatch", err)
	}
	r, err := b.Resume(ctx, sem.HoldID(), dlock.WithLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode() != driver.Semaphore || r.Limit() != 2 || r.TTL() != ttl {
		t.Errorf("resumed %v limit %d ttl %v; want a permit of 2 with the hold's lease", r, r.Limit(), r.TTL())
	}
	if err := sem.Detach(); err != nil {
		t.Fatal(err)
	}
	// The resumed lock renews the hold: it outlives several leases.
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) {
		if err := r.Cause(); err != nil {
			t.Fatalf("the resumed lock ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	again, err := a.Resume(ctx, r.HoldID())
	if err != nil {
		t.Fatalf("Resume of a resumed lock's hold ID: %v", err)
	}
	if err := r.Detach(); err != nil {
		t.Fatal(err)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if hs := holders(t, a, "sem"); len(hs) != 0 {
		t.Errorf("holders after Release: %+v", hs)
	}
}

// On a store whose holds live on the client's session, Detach and Resume
// refuse, and the lock stays as it was.
func TestDetachUnsupported(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, sessionBound{memdlock.New()})
	l, err := c.Lock(ctx, "k", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Detach(); !errors.Is(err, dlock.ErrUnsupported) || !strings.Contains(err.Error(), "session") {
		t.Errorf("Detach: %v; want ErrUnsupported saying why", err)
	}
	if _, err := c.Resume(ctx, l.HoldID()); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("Resume: %v; want ErrUnsupported", err)
	}
	if err := l.Refresh(ctx); err != nil {
		t.Errorf("the lock after a refused Detach: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release after a refused Detach: %v", err)
	}
}

// Neither a Lock nor its errors show the owner token or the hold ID.
func TestLockHidesSecrets(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, memdlock.New())
	l, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	id := l.HoldID()
	secret := strings.TrimPrefix(id, "dlh1.")[4:20] // within the owner token's encoding
	for _, s := range []string{fmt.Sprint(l), fmt.Sprintf("%+v", l), fmt.Sprintf("%#v", l)} {
		if strings.Contains(s, secret) || !strings.Contains(s, `key="k"`) {
			t.Errorf("formatted lock %q shows a secret or not its key", s)
		}
	}
	_, err = c.Resume(ctx, id+"x")
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("Resume error %v shows the hold ID", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A detached hold ends with its lease: a waiter gets the key then, not
// before.
func TestDetachedHoldEndsWithItsLease(t *testing.T) {
	ctx := context.Background()
	store := memdlock.New()
	a, err := dlock.New(store.Share())
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 300 * time.Millisecond
	begin := time.Now() // the store applies the lease after this
	l, err := a.Lock(ctx, "k", dlock.WithTTL(ttl), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Detach(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := newClient(t, store.Share())
	if _, err := b.TryLock(ctx, "k"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock after Detach and Close: %v; want ErrNotAcquired", err)
	}
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	next, err := b.Lock(wait, "k")
	if err != nil {
		t.Fatalf("Lock once the lease ends: %v", err)
	}
	if waited := time.Since(begin); waited < ttl {
		t.Errorf("the key was free %v after it was taken, before its lease of %v ended", waited, ttl)
	}
	if next.Token() <= l.Token() {
		t.Errorf("token %d after the detached hold's %d", next.Token(), l.Token())
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A hold ID taken before a Downgrade names a hold the store has as shared:
// Resume returns a shared lock with the hold's token.
func TestResumeAfterDowngrade(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, memdlock.New())
	l, err := c.Lock(ctx, "k", dlock.WithTTL(time.Minute), dlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	id := l.HoldID()
	if err := l.Downgrade(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := c.Resume(ctx, id, dlock.WithoutRenewal())
	if err != nil {
		t.Fatalf("Resume of a hold ID taken before a Downgrade: %v", err)
	}
	if r.Mode() != driver.Shared || r.Token() != l.Token() {
		t.Errorf("resumed %v; want the shared hold of token %d", r, l.Token())
	}
	if _, err := c.Resume(ctx, id, dlock.WithoutRenewal(), dlock.Shared()); err != nil {
		t.Errorf("Resume with Shared of the downgraded hold: %v", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// FuzzParseHoldID feeds Resume any string as a hold ID: it never panics,
// resumes only the one real hold (with its own token), and refuses the rest
// with an *ArgError or ErrNotHeld that never shows the ID.
func FuzzParseHoldID(f *testing.F) {
	ctx := context.Background()
	c, err := dlock.New(memdlock.New())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { c.Close() })
	l, err := c.Lock(ctx, "k", dlock.WithTTL(time.Hour), dlock.WithoutRenewal())
	if err != nil {
		f.Fatal(err)
	}
	id := l.HoldID()
	for _, s := range []string{id, id + "A", id[:len(id)-1], " " + id + "\n", "", "dlh1.", "dlh1.AAAA", "dlh1.AQA", "dlh2." + id[5:]} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := c.Resume(ctx, s, dlock.WithoutRenewal())
		if err == nil {
			if r.Token() != l.Token() || r.Key() != "k" {
				t.Errorf("resumed %v; want the one hold, token %d", r, l.Token())
			}
			if err := r.Detach(); err != nil {
				t.Fatal(err)
			}
			return
		}
		var ae *dlock.ArgError
		if !errors.As(err, &ae) && !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Resume(%q) = %v; want an *ArgError or ErrNotHeld", s, err)
		}
		if id := strings.TrimSpace(s); len(id) > 12 && strings.Contains(err.Error(), id) {
			t.Errorf("the error %q shows the hold ID", err)
		}
	})
}
