package zkdlock

import (
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// TestParentLinger checks the life of a key's znode with a linger period:
// it goes once the period has passed after a release, a lock within the
// period reuses it, and Close removes it at once.
func TestParentLinger(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	tc, err := dial(ctx(t), srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	cycle := func(d *Driver, k string) (czxid int64, token uint64) {
		t.Helper()
		r := req(k)
		res, err := d.Acquire(ctx(t), r)
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire = %+v, %v", res, err)
		}
		ok, st, err := tc.Exists(d.parentPath(k))
		if err != nil || !ok {
			t.Fatalf("key's znode while held: exists %v, %v", ok, err)
		}
		if err := d.Release(ctx(t), r); err != nil {
			t.Fatal(err)
		}
		return st.Czxid, res.Token
	}

	t.Run("gone after the period", func(t *testing.T) {
		d := newTestDriver(t, srv.Addr) // the default period
		k := key(t)
		cycle(d, k)
		ok, _, ch, err := tc.ExistsW(d.parentPath(k))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if ev := wait(t, ch, "the key's znode to go"); ev.Type != zk.EventNodeDeleted {
				t.Fatalf("event on the key's znode = %+v; want its deletion", ev)
			}
		}
		assertNoResidue(t, srv.Addr, k)
	})

	t.Run("reused within the period", func(t *testing.T) {
		d := newTestDriver(t, srv.Addr, WithParentLinger(time.Hour))
		k := key(t)
		c1, t1 := cycle(d, k)
		if ok, _, err := tc.Exists(d.parentPath(k)); err != nil || !ok {
			t.Fatalf("key's znode after the release: exists %v, %v; want it lingering", ok, err)
		}
		c2, t2 := cycle(d, k)
		if c1 != c2 {
			t.Errorf("key's znode created anew (czxid %#x, then %#x); want it reused", c1, c2)
		}
		if t2 <= t1 {
			t.Errorf("tokens %d, then %d; want them increasing", t1, t2)
		}
		if n, err := nodes(ctx(t), srv.Addr, DefaultPrefix, k); err != nil || n != 0 {
			t.Errorf("%d znodes besides the lingering one, %v; want none", n, err)
		}

		// Close removes the lingering znode at once.
		d.Close()
		if ok, _, err := tc.Exists(d.parentPath(k)); err != nil || ok {
			t.Errorf("key's znode after Close: exists %v, %v; want it gone", ok, err)
		}
		assertNoResidue(t, srv.Addr, k)
	})
}

// TestLingering checks the bookkeeping of lingering parents: Acquire calls
// in flight cancel and defer the removal, a node left behind defers it
// until its own removal, and draining removes what is pending (and, from
// then on, what is released).
func TestLingering(t *testing.T) {
	removed := make(chan string, 8)
	l := newLingering(time.Hour, func(p string) { removed <- p })
	pending := func() []string {
		l.mu.Lock()
		defer l.mu.Unlock()
		var ps []string
		for p := range l.pending {
			ps = append(ps, p)
		}
		slices.Sort(ps)
		return ps
	}
	expect := func(what string, want ...string) {
		t.Helper()
		if got := pending(); !slices.Equal(got, want) {
			t.Errorf("%s: pending %q; want %q", what, got, want)
		}
	}
	l.released("/a")
	expect("after a release", "/a")
	l.begin("/a")
	expect("during an Acquire")
	l.released("/a")
	expect("after a release during an Acquire")
	l.end("/a", true)
	expect("after an Acquire that left a node")
	l.begin("/a")
	l.begin("/a")
	l.end("/a", false)
	expect("while another Acquire runs")
	l.end("/a", false)
	expect("after Acquire calls that left no node", "/a")
	l.released("/b")
	<-l.drain(2)
	got := []string{<-removed, <-removed}
	slices.Sort(got)
	if !slices.Equal(got, []string{"/a", "/b"}) {
		t.Errorf("drain removed %q; want /a and /b", got)
	}
	l.released("/c")
	expect("after drain")
	select {
	case p := <-removed:
		if p != "/c" {
			t.Errorf("after drain, a release removed %q; want /c", p)
		}
	default:
		t.Errorf("after drain, a release removed nothing at once")
	}

	// The period passes.
	l = newLingering(time.Millisecond, func(p string) { removed <- p })
	l.released("/d")
	if p := wait(t, removed, "the removal"); p != "/d" {
		t.Errorf("removed %q; want /d", p)
	}

	// Without a period, parents go at once.
	l = newLingering(0, func(p string) { removed <- p })
	l.released("/e")
	select {
	case p := <-removed:
		if p != "/e" {
			t.Errorf("removed %q; want /e", p)
		}
	default:
		t.Errorf("no removal without a linger period")
	}
}
