package zkdlock

import (
	"errors"
	"path"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// modeReq returns a request for key in mode m (limit permits).
func modeReq(key string, m driver.Mode, limit int, queue bool) driver.Request {
	r := req(key)
	r.Mode, r.Limit, r.Queue = m, limit, queue
	return r
}

// mustAcquire acquires r on d and fails t unless the outcome is want.
func mustAcquire(t *testing.T, d *Driver, r driver.Request, want bool) driver.Result {
	t.Helper()
	res, err := d.Acquire(ctx(t), r)
	if err != nil || res.Acquired != want {
		t.Fatalf("Acquire(%s, owner %.6s) = %+v, %v; want acquired %v", r.Mode, r.Owner, res, err, want)
	}
	return res
}

// waitList returns the base names of the nodes the record of owner waits for.
func waitList(t *testing.T, d *Driver, owner string) (names []string, first bool) {
	t.Helper()
	h, ok := d.holds.Get(owner)
	if !ok {
		t.Fatalf("no record of owner %.6s", owner)
	}
	return h.wait, h.first
}

func nodeName(t *testing.T, d *Driver, owner string) string {
	t.Helper()
	h, ok := d.holds.Get(owner)
	if !ok {
		t.Fatalf("no record of owner %.6s", owner)
	}
	return path.Base(h.path)
}

// TestDowngradeWakesReaders checks that a reader queued behind a writer
// watches the writer's node and is told of its downgrade, which keeps the
// node, its token and its place: a writer queued behind still waits.
func TestDowngradeWakesReaders(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	d := newTestDriver(t, srv.Addr)
	k := key(t)
	w := modeReq(k, driver.Exclusive, 0, false)
	r := modeReq(k, driver.Shared, 0, true)
	w2 := modeReq(k, driver.Exclusive, 0, true)
	res := mustAcquire(t, d, w, true)
	mustAcquire(t, d, r, false)
	mustAcquire(t, d, w2, false)
	if names, first := waitList(t, d, r.Owner); len(names) != 1 || names[0] != nodeName(t, d, w.Owner) || !first {
		t.Fatalf("the reader waits for %v (first %v); want the writer's node, to be read", names, first)
	}
	sub, err := d.Subscribe(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	down := w
	down.Mode = driver.Shared
	if got := mustAcquire(t, d, down, true); got.Token != res.Token {
		t.Fatalf("downgrade token %d; want the write lock's %d", got.Token, res.Token)
	}
	wait(t, sub.C(), "signal for the downgrade")
	mustAcquire(t, d, r, true)
	mustAcquire(t, d, w2, false)
	// A repeated downgrade, and a refresh, change nothing.
	if got := mustAcquire(t, d, down, true); got.Token != res.Token {
		t.Fatalf("repeated downgrade token %d; want %d", got.Token, res.Token)
	}
	if err := d.Refresh(ctx(t), down); err != nil {
		t.Fatal(err)
	}
	hs, err := d.List(ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[0].Mode != driver.Shared || hs[0].Token != res.Token || hs[1].Mode != driver.Shared {
		t.Errorf("List = %+v; want the downgraded writer and the reader, shared", hs)
	}
	// The upgrade back is refused, and the hold stays.
	if _, err := d.Acquire(ctx(t), w); !errors.Is(err, driver.ErrModeMismatch) {
		t.Errorf("upgrade after downgrade: %v; want ErrModeMismatch", err)
	}
	for _, x := range []driver.Request{down, r} {
		if err := d.Release(ctx(t), x); err != nil {
			t.Fatal(err)
		}
	}
	mustAcquire(t, d, w2, true)
	if err := d.Release(ctx(t), w2); err != nil {
		t.Fatal(err)
	}
	d.Close()
	assertNoResidue(t, srv.Addr, k)
}

// TestDowngradeReplyLost checks that a downgrade whose setData was applied
// but whose reply was lost succeeds when asked again.
func TestDowngradeReplyLost(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	d := newTestDriver(t, srv.Addr)
	k := key(t)
	w := modeReq(k, driver.Exclusive, 0, false)
	res := mustAcquire(t, d, w, true)
	h, _ := d.holds.Get(w.Owner)
	if _, err := d.conn.Set(h.path, encodeData(w.Owner, w.Info, true), h.version); err != nil {
		t.Fatal(err)
	}
	w.Mode = driver.Shared
	if got := mustAcquire(t, d, w, true); got.Token != res.Token {
		t.Fatalf("downgrade token %d; want %d", got.Token, res.Token)
	}
	if h, _ := d.holds.Get(w.Owner); !h.downgraded {
		t.Errorf("the record is not downgraded")
	}
	if err := d.Release(ctx(t), w); err != nil {
		t.Fatal(err)
	}
}

// TestReaderBehindWaitingWriter checks writer preference and that a reader
// queued behind a waiting writer watches that writer only, without reading
// it.
func TestReaderBehindWaitingWriter(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	d := newTestDriver(t, srv.Addr)
	k := key(t)
	r1 := modeReq(k, driver.Shared, 0, false)
	w := modeReq(k, driver.Exclusive, 0, true)
	r2 := modeReq(k, driver.Shared, 0, true)
	mustAcquire(t, d, r1, true)
	mustAcquire(t, d, w, false)
	mustAcquire(t, d, r2, false)
	if names, first := waitList(t, d, r2.Owner); len(names) != 1 || names[0] != nodeName(t, d, w.Owner) || first {
		t.Fatalf("the reader waits for %v (first %v); want the writer's node only, not to be read", names, first)
	}
	if names, _ := waitList(t, d, w.Owner); len(names) != 1 || names[0] != nodeName(t, d, r1.Owner) {
		t.Fatalf("the writer waits for %v; want its predecessor", names)
	}
	sub, err := d.Subscribe(ctx(t), r2)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := d.Release(ctx(t), r1); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, d, w, true)
	mustAcquire(t, d, r2, false)
	if err := d.Release(ctx(t), w); err != nil {
		t.Fatal(err)
	}
	wait(t, sub.C(), "signal for the writer's release")
	mustAcquire(t, d, r2, true)
	if err := d.Release(ctx(t), r2); err != nil {
		t.Fatal(err)
	}
}

// TestSemaphoreWindow checks that a waiting permit watches the nodes within
// its limit ahead, so that a release of any holder wakes it, not only one
// of its predecessor.
func TestSemaphoreWindow(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	d := newTestDriver(t, srv.Addr)
	k := key(t)
	h1 := modeReq(k, driver.Semaphore, 2, false)
	h2 := modeReq(k, driver.Semaphore, 2, false)
	w := modeReq(k, driver.Semaphore, 2, true)
	mustAcquire(t, d, h1, true)
	mustAcquire(t, d, h2, true)
	mustAcquire(t, d, w, false)
	if names, _ := waitList(t, d, w.Owner); len(names) != 2 {
		t.Fatalf("the permit waits for %v; want both holders", names)
	}
	sub, err := d.Subscribe(ctx(t), w)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := d.Release(ctx(t), h1); err != nil { // not its predecessor
		t.Fatal(err)
	}
	wait(t, sub.C(), "signal for the first holder's release")
	mustAcquire(t, d, w, true)
	hs, err := d.List(ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[0].Limit != 2 || hs[0].Mode != driver.Semaphore {
		t.Errorf("List = %+v; want 2 permits of 2", hs)
	}
	for _, r := range []driver.Request{h2, w} {
		if err := d.Release(ctx(t), r); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSemaphoreManyPermits checks a semaphore whose waiters watch the key's
// children, its limit being above maxWindow.
func TestSemaphoreManyPermits(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	d := newTestDriver(t, srv.Addr)
	k := key(t)
	const n = maxWindow + 1
	var hs []driver.Request
	for range n {
		r := modeReq(k, driver.Semaphore, n, false)
		mustAcquire(t, d, r, true)
		hs = append(hs, r)
	}
	w := modeReq(k, driver.Semaphore, n, true)
	mustAcquire(t, d, w, false)
	sub, err := d.Subscribe(ctx(t), w)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := d.Release(ctx(t), hs[3]); err != nil {
		t.Fatal(err)
	}
	wait(t, sub.C(), "signal for a holder's release")
	mustAcquire(t, d, w, true)
	if got, err := d.ForceRelease(ctx(t), k); err != nil || got != n {
		t.Errorf("ForceRelease = %d, %v; want %d holders", got, err, n)
	}
	d.Close()
	assertNoResidue(t, srv.Addr, k)
}

// TestForeignNodeBlocks checks that nodes of another mode family, as an
// incompatible request racing with the key's users leaves for a moment,
// hold back the nodes behind them rather than share the key with them.
func TestForeignNodeBlocks(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	d := newTestDriver(t, srv.Addr)
	tc, err := dial(ctx(t), srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	k := key(t)
	r1 := modeReq(k, driver.Shared, 0, false)
	mustAcquire(t, d, r1, true)
	// A permit node, as a racing semaphore request makes before it learns
	// that the key is a read-write lock.
	s := modeReq(k, driver.Semaphore, 5, false)
	p, err := tc.Create(d.parentPath(k)+"/"+nodeBase(s.Owner, s.Mode, s.Limit, CuratorMutex), encodeData(s.Owner, "", false), zk.FlagEphemeralSequential, acl)
	if err != nil {
		t.Fatal(err)
	}
	r2 := modeReq(k, driver.Shared, 0, true)
	mustAcquire(t, d, r2, false)
	sub, err := d.Subscribe(ctx(t), r2)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// The key is a read-write lock: a semaphore request is refused.
	if _, err := d.Acquire(ctx(t), modeReq(k, driver.Semaphore, 5, false)); !errors.Is(err, driver.ErrModeMismatch) {
		t.Errorf("semaphore request on a read lock: %v; want ErrModeMismatch", err)
	}
	if err := tc.Delete(p, -1); err != nil {
		t.Fatal(err)
	}
	wait(t, sub.C(), "signal for the foreign node's deletion")
	mustAcquire(t, d, r2, true)
	hs, err := d.ForceRelease(ctx(t), k)
	if err != nil || hs != 2 {
		t.Errorf("ForceRelease = %d, %v; want the 2 readers", hs, err)
	}
	d.Close()
	assertNoResidue(t, srv.Addr, k)
}

// TestJudge checks the admission rules on queues made up by hand.
func TestJudge(t *testing.T) {
	w := func() node { return node{mode: driver.Exclusive} }
	r := func() node { return node{mode: driver.Shared} }
	s := func(n int) node { return node{mode: driver.Semaphore, limit: n} }
	for _, tc := range []struct {
		name  string
		q     []node
		held  bool
		wait  int
		first bool
	}{
		{"lone writer", []node{w()}, true, 0, false},
		{"writer behind reader", []node{r(), w()}, false, 1, false},
		{"readers", []node{r(), r(), r()}, true, 0, false},
		{"reader behind writer", []node{w(), r(), r()}, false, 1, true},
		{"reader behind waiting writer", []node{r(), w(), r()}, false, 1, false},
		{"reader behind permit", []node{r(), s(3), r()}, false, 1, false},
		{"third permit of 3", []node{s(3), s(3), s(3)}, true, 0, false},
		{"fourth permit of 3", []node{s(3), s(3), s(3), s(3)}, false, 3, false},
		{"fifth permit of 3", []node{s(3), s(3), s(3), s(3), s(3)}, false, 3, false},
		{"permit behind another limit", []node{s(2), s(3)}, false, 1, false},
		{"permit behind reader", []node{r(), s(3)}, false, 1, false},
	} {
		v := judge(tc.q, len(tc.q)-1)
		if v.held != tc.held || len(v.wait) != tc.wait || v.first != tc.first {
			t.Errorf("%s: %+v; want held %v, %d to wait for, first %v", tc.name, v, tc.held, tc.wait, tc.first)
		}
	}
}
