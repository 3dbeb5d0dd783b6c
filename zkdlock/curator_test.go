package zkdlock

import (
	"context"
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// What Curator's lock recipes compute from a lock's children, transcribed
// from its source (LockInternals, StandardLockInternalsDriver,
// InterProcessReadWriteLock).

const (
	// curatorUUID is the protected prefix Curator's create().withProtection()
	// puts in front of a node's name: "_c_" + a UUID + "-".
	curatorUUID = "_c_0f8fad5b-d9cb-469f-a165-70867728950e-"
	// curatorData is the data of a Curator lock node made without lock
	// data: the client's default data, its host address.
	curatorData = "127.0.0.1"
)

// curatorFix is StandardLockInternalsDriver.standardFixForSorting.
func curatorFix(s, lockName string) string {
	if i := strings.LastIndex(s, lockName); i >= 0 {
		return s[i+len(lockName):]
	}
	return s
}

// curatorSorted is LockInternals.getSortedChildren with the fixForSorting
// of InterProcessMutex (rw false) or InterProcessReadWriteLock (rw true).
// Java's Collections.sort is stable.
func curatorSorted(children []string, rw bool) []string {
	fix := func(s string) string {
		if rw {
			return curatorFix(curatorFix(s, curatorReadName), curatorWriteName)
		}
		return curatorFix(s, curatorMutexName)
	}
	out := slices.Clone(children)
	slices.SortStableFunc(out, func(a, b string) int { return strings.Compare(fix(a), fix(b)) })
	return out
}

// curatorKind is the Curator recipe a simulated contender uses.
type curatorKind int

const (
	curatorMutex  curatorKind = iota // InterProcessMutex
	curatorWriter                    // InterProcessReadWriteLock.writeLock()
	curatorReader                    // InterProcessReadWriteLock.readLock()
)

// curatorGetsTheLock is what a Curator contender whose node is ours decides
// from the lock's children: StandardLockInternalsDriver.getsTheLock with
// maxLeases 1 for a mutex or a writer, the read driver's getsTheLock for a
// reader (it goes when no write node is ahead of it).
func curatorGetsTheLock(children []string, ours string, kind curatorKind) (bool, string) {
	sorted := curatorSorted(children, kind != curatorMutex)
	if kind != curatorReader {
		i := slices.Index(sorted, ours)
		if i < 0 {
			panic("our node is not among the children")
		}
		if i < 1 {
			return true, ""
		}
		return false, sorted[i-1]
	}
	firstWrite, our := len(sorted), -1
	for i, n := range sorted {
		if strings.Contains(n, curatorWriteName) {
			firstWrite = min(firstWrite, i)
		} else if strings.HasPrefix(n, ours) {
			our = i
			break
		}
	}
	if our < 0 {
		panic("our node is not among the children")
	}
	if our < firstWrite {
		return true, ""
	}
	return false, sorted[firstWrite]
}

// TestCuratorSortsDriverNodes checks that Curator sorts the driver's nodes
// by their sequence numbers among its own, in the recipe of each layout.
func TestCuratorSortsDriverNodes(t *testing.T) {
	for _, tc := range []struct {
		l  Layout
		rw bool
	}{{CuratorMutex, false}, {CuratorReadWriteLock, true}} {
		names := []string{curatorUUID + "lock-0000000004"}
		if tc.rw {
			names = []string{curatorUUID + "__READ__0000000004", curatorUUID + "__WRIT__0000000006"}
		}
		names = append(names,
			nodeBase("a", driver.Exclusive, 0, tc.l)+"0000000003",
			nodeBase("b", driver.Shared, 0, tc.l)+"0000000005",
			nodeBase("c", driver.Semaphore, 2, tc.l)+"0000000001")
		var want []string
		for _, n := range queue(names) {
			want = append(want, n.name)
		}
		slices.Reverse(names)
		if got := curatorSorted(names, tc.rw); !slices.Equal(got, want) {
			t.Errorf("%v: Curator sorts %q; want %q (by sequence number)", tc.l, got, want)
		}
	}
	// A driver's write node is a writer to Curator's readers.
	r := curatorUUID + "__READ__0000000002"
	w := nodeBase("a", driver.Exclusive, 0, CuratorReadWriteLock) + "0000000001"
	if ok, watch := curatorGetsTheLock([]string{r, w}, r, curatorReader); ok || watch != w {
		t.Errorf("a Curator reader behind the driver's writer: gets the lock %v, watches %q", ok, watch)
	}
}

// rawConn returns the address of the ZooKeeper server and a connection of
// the test's own to it, for the nodes of foreign recipes, closed when t
// ends.
func rawConn(t *testing.T) (addr string, tc *zk.Conn) {
	t.Helper()
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	tc, err := dial(ctx(t), srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	return srv.Addr, tc
}

// spied returns a driver over addr, a spy over it and a client over the spy.
func spied(t *testing.T, addr string, opts ...Option) (*Driver, *spy, *dlock.Client) {
	t.Helper()
	d := newTestDriver(t, addr, opts...)
	sp := newSpy(d)
	return d, sp, client(t, sp)
}

// deleteNode deletes the node p with tc.
func deleteNode(t *testing.T, tc *zk.Conn, p string) {
	t.Helper()
	if err := tc.Delete(p, -1); err != nil {
		t.Fatal(err)
	}
}

// release releases l.
func release(t *testing.T, l *dlock.Lock) {
	t.Helper()
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// tryLock tries to lock k, releases the lock if it got it, and returns
// TryLock's error.
func tryLock(t *testing.T, c *dlock.Client, k string, opts ...dlock.LockOption) error {
	l, err := c.TryLock(ctx(t), k, opts...)
	if err == nil {
		l.Release(ctx(t))
	}
	return err
}

// foreignNode creates an ephemeral sequential node named base (the server
// appends the sequence number) under the key's znode parent, as a Curator
// client does (creating the parent as a container), and returns its path.
func foreignNode(t *testing.T, c *zk.Conn, parent, base string) string {
	t.Helper()
	for range 3 {
		p, err := c.Create(parent+"/"+base, []byte(curatorData), zk.FlagEphemeralSequential, acl)
		if err == nil {
			return p
		}
		if !errors.Is(err, zk.ErrNoNode) {
			t.Fatal(err)
		}
		dir := ""
		for part := range strings.SplitSeq(parent[1:], "/") {
			dir += "/" + part
			if _, err := c.CreateContainer(dir, nil, zk.FlagContainer, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				t.Fatal(err)
			}
		}
	}
	t.Fatalf("cannot create %s/%s", parent, base)
	return ""
}

// curatorContender creates a simulated Curator contender's node and reports
// whether Curator's code would let it hold the lock, from the key's
// children listed after its creation.
func curatorContender(t *testing.T, c *zk.Conn, parent string, kind curatorKind) (p string, holds bool) {
	t.Helper()
	base := curatorUUID + curatorMutexName
	switch kind {
	case curatorWriter:
		base = curatorUUID + curatorWriteName
	case curatorReader:
		base = curatorUUID + curatorReadName
	}
	p = foreignNode(t, c, parent, base)
	children, _, err := c.Children(parent)
	if err != nil {
		t.Fatal(err)
	}
	holds, _ = curatorGetsTheLock(children, path.Base(p), kind)
	return p, holds
}

// blockedThenFreed checks that the lock asked with opts cannot be taken
// while the foreign node p is there, that a Lock waits for it, and that the
// Lock acquires once p is deleted.
func blockedThenFreed(t *testing.T, c *dlock.Client, sp *spy, tc *zk.Conn, k, p string, opts ...dlock.LockOption) {
	t.Helper()
	sp.rearm()
	if err := tryLock(t, c, k, opts...); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock while %s holds = %v; want ErrNotAcquired", path.Base(p), err)
	}
	type result struct {
		l   *dlock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.Lock(ctx(t), k, opts...)
		got <- result{l, err}
	}()
	wait(t, sp.waiting, "the Lock waiting")
	select {
	case r := <-got:
		t.Fatalf("Lock returned while %s holds: %v", path.Base(p), r.err)
	default:
	}
	deleteNode(t, tc, p)
	r := wait(t, got, "the Lock after the foreign node went")
	if r.err != nil {
		t.Fatal(r.err)
	}
	release(t, r.l)
}

// rearm makes s signal the next wait.
func (s *spy) rearm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting, s.subscribed, s.signalled = make(chan struct{}), false, false
}

// TestForeignMutexNodes locks keys held by nodes the driver did not make,
// named as Curator's InterProcessMutex and the plain ZooKeeper recipe name
// them: they hold the key, and a waiter wakes when they go.
func TestForeignMutexNodes(t *testing.T) {
	addr, tc := rawConn(t)
	for _, name := range []string{
		curatorUUID + "lock-", // Curator's InterProcessMutex
		"lock-",               // the plain recipe
		"8f3d1c2e-7a6b-4c5d-9e8f-0a1b2c3d4e5f-lock-", // the plain recipe, with a GUID
		"anything-", // any sequential node
	} {
		t.Run(strings.Trim(name, "-_"), func(t *testing.T) {
			d, sp, c := spied(t, addr)
			k := key(t)
			parent := d.parentPath(k)
			p := foreignNode(t, tc, parent, name)
			blockedThenFreed(t, c, sp, tc, k, p)
			// A foreign node at the head also blocks readers.
			p = foreignNode(t, tc, parent, name)
			if err := tryLock(t, c, k, dlock.Shared()); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("shared TryLock while %s holds = %v; want ErrNotAcquired", name, err)
			}
			deleteNode(t, tc, p)
		})
	}
}

// TestCuratorMutexSeesDriver checks the other direction: with the driver
// holding a key, a Curator InterProcessMutex contender at the key's znode
// finds a node ahead of its own, and watches the driver's node.
func TestCuratorMutexSeesDriver(t *testing.T) {
	addr, tc := rawConn(t)
	d := newTestDriver(t, addr)
	c := client(t, d)
	for _, opts := range [][]dlock.LockOption{nil, {dlock.Shared()}} {
		k := key(t)
		l, err := c.Lock(ctx(t), k, opts...)
		if err != nil {
			t.Fatal(err)
		}
		p, holds := curatorContender(t, tc, d.parentPath(k), curatorMutex)
		if holds {
			t.Errorf("%v: a Curator mutex contender gets the lock the driver holds", l.Mode())
		}
		deleteNode(t, tc, p)
		release(t, l)
		// Released, the key is Curator's.
		p, holds = curatorContender(t, tc, d.parentPath(k), curatorMutex)
		if !holds {
			t.Errorf("a Curator mutex contender does not get the free lock")
		}
		deleteNode(t, tc, p)
	}
}

// TestCuratorReadWriteLock checks that the driver, in the
// CuratorReadWriteLock layout, and Curator's InterProcessReadWriteLock
// exclude each other: a Curator reader lets the driver's readers in but not
// its writers, a Curator writer blocks both, and Curator's contenders see
// the driver's holds as a Curator contender of the same kind would.
func TestCuratorReadWriteLock(t *testing.T) {
	addr, tc := rawConn(t)
	newClient := func(t *testing.T) (*Driver, *spy, *dlock.Client) {
		return spied(t, addr, WithCuratorLayout(CuratorReadWriteLock))
	}

	t.Run("CuratorReader", func(t *testing.T) {
		d, sp, c := newClient(t)
		k := key(t)
		p := foreignNode(t, tc, d.parentPath(k), curatorUUID+curatorReadName)
		r, err := c.TryLock(ctx(t), k, dlock.Shared())
		if err != nil {
			t.Fatalf("shared TryLock beside a Curator reader: %v", err)
		}
		release(t, r)
		blockedThenFreed(t, c, sp, tc, k, p)
	})
	t.Run("CuratorWriter", func(t *testing.T) {
		d, sp, c := newClient(t)
		k := key(t)
		p := foreignNode(t, tc, d.parentPath(k), curatorUUID+curatorWriteName)
		blockedThenFreed(t, c, sp, tc, k, p, dlock.Shared())
		p = foreignNode(t, tc, d.parentPath(k), curatorUUID+curatorWriteName)
		blockedThenFreed(t, c, sp, tc, k, p)
	})
	t.Run("DriverWriter", func(t *testing.T) {
		d, _, c := newClient(t)
		k := key(t)
		l, err := c.Lock(ctx(t), k)
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range []curatorKind{curatorReader, curatorWriter} {
			p, holds := curatorContender(t, tc, d.parentPath(k), kind)
			if holds {
				t.Errorf("Curator contender %d gets the lock the driver holds Exclusive", kind)
			}
			deleteNode(t, tc, p)
		}
		release(t, l)
	})
	t.Run("DriverReader", func(t *testing.T) {
		d, _, c := newClient(t)
		k := key(t)
		l, err := c.Lock(ctx(t), k, dlock.Shared())
		if err != nil {
			t.Fatal(err)
		}
		p, holds := curatorContender(t, tc, d.parentPath(k), curatorReader)
		if !holds {
			t.Errorf("a Curator reader does not share the driver's read hold")
		}
		deleteNode(t, tc, p)
		p, holds = curatorContender(t, tc, d.parentPath(k), curatorWriter)
		if holds {
			t.Errorf("a Curator writer gets the lock the driver holds Shared")
		}
		deleteNode(t, tc, p)
		release(t, l)
	})
}

// TestForeignRecipesRefused locks keys whose znodes are used by recipes that
// would not see the driver's nodes: Curator's semaphores (children locks
// and leases), Curator's read-write lock beside the mutex layout and
// Curator's mutex beside the read-write layout. TryLock and Lock fail with
// ErrPermanent in every mode, naming what they found, and leave no node.
func TestForeignRecipesRefused(t *testing.T) {
	addr, tc := rawConn(t)
	for _, x := range []struct {
		name, child, base, want string
		layout                  Layout
	}{
		{"SemaphoreLease", curatorSemLeases, curatorUUID + "lease-", `child "leases"`, CuratorMutex},
		{"SemaphoreLock", curatorSemLocks, curatorUUID + curatorMutexName, `child "locks"`, CuratorReadWriteLock},
		{"ReadWriteLockWriter", "", curatorUUID + curatorWriteName, "curator=rwlock", CuratorMutex},
		{"ReadWriteLockReader", "", curatorUUID + curatorReadName, "curator=rwlock", CuratorMutex},
		{"Mutex", "", curatorUUID + curatorMutexName, "curator=mutex", CuratorReadWriteLock},
	} {
		t.Run(x.name, func(t *testing.T) {
			d := newTestDriver(t, addr, WithCuratorLayout(x.layout))
			c := client(t, d)
			k := key(t)
			parent := d.parentPath(k)
			dir := parent
			if x.child != "" {
				dir += "/" + x.child
			}
			p := foreignNode(t, tc, dir, x.base)
			for _, opts := range [][]dlock.LockOption{nil, {dlock.Shared()}, {dlock.WithLimit(2)}} {
				for _, lock := range []func(context.Context, string, ...dlock.LockOption) (*dlock.Lock, error){c.TryLock, c.Lock} {
					l, err := lock(ctx(t), k, opts...)
					if !errors.Is(err, dlock.ErrPermanent) || !strings.Contains(err.Error(), x.want) {
						t.Errorf("%v: lock = %v, %v; want ErrPermanent naming %s", opts, l, err, x.want)
					}
					if err == nil {
						l.Release(ctx(t))
					}
				}
			}
			if children, _, err := tc.Children(parent); err != nil || len(children) != 1 {
				t.Errorf("children of the key's znode = %q, %v; want only the foreign one", children, err)
			}
			deleteNode(t, tc, p)
		})
	}
}

// TestForeignRecipeEndsWait checks that a waiting Lock that finds, when it
// looks again, a recipe blind to its node ends with ErrPermanent rather
// than acquiring beside it, and leaves its node.
func TestForeignRecipeEndsWait(t *testing.T) {
	addr, tc := rawConn(t)
	d := newTestDriver(t, addr)
	sp := newSpy(d)
	c := client(t, classifying{sp})
	k := key(t)
	p := foreignNode(t, tc, d.parentPath(k), curatorUUID+curatorMutexName) // the Curator mutex holds
	got := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx(t), k)
		if err == nil {
			l.Release(ctx(t))
		}
		got <- err
	}()
	wait(t, sp.waiting, "the Lock waiting")
	// A Curator read-write lock comes, whose writer sorts the driver's
	// node behind its own; then the mutex goes.
	w := foreignNode(t, tc, d.parentPath(k), curatorUUID+curatorWriteName)
	deleteNode(t, tc, p)
	if err := wait(t, got, "the Lock after the mutex went"); !errors.Is(err, dlock.ErrPermanent) {
		t.Errorf("Lock = %v; want ErrPermanent", err)
	}
	if children, _, err := tc.Children(d.parentPath(k)); err != nil || len(children) != 1 {
		t.Errorf("children of the key's znode = %q, %v; want only the writer's", children, err)
	}
	deleteNode(t, tc, w)
}

// classifying is a spy that classifies errors as the driver does.
type classifying struct{ *spy }

func (classifying) Permanent(err error) bool { return permanent(err) }

// TestKazooReadLock checks that kazoo's ReadLock nodes count as readers:
// the driver's readers share the key with them and its writers wait, and
// listings name the foreign node.
func TestKazooReadLock(t *testing.T) {
	addr, tc := rawConn(t)
	d, sp, c := spied(t, addr)
	k := key(t)
	p := foreignNode(t, tc, d.parentPath(k), "0f8fad5bd9cb469fa16570867728950e"+kazooReadName)
	r, err := c.TryLock(ctx(t), k, dlock.Shared())
	if err != nil {
		t.Fatalf("shared TryLock beside a kazoo reader: %v", err)
	}
	hs, err := client(t, d).Holders(ctx(t), k)
	if err != nil || len(hs) != 2 || hs[0].Info != path.Base(p) || hs[0].Mode != driver.Shared {
		t.Errorf("Holders = %+v, %v; want the kazoo reader, named by its node, and the driver's", hs, err)
	}
	release(t, r)
	blockedThenFreed(t, c, sp, tc, k, p)
}

// TestForeignRecipeEndsHold checks that a hold whose key's znode a foreign
// recipe comes to that does not see the driver's node (a Curator semaphore;
// Curator's read-write lock beside the CuratorMutex layout, its mutex beside
// the other), and so may hold the key too, ends with ErrLost at its next
// renewal, and that its node goes.
func TestForeignRecipeEndsHold(t *testing.T) {
	addr, tc := rawConn(t)
	rw := []Option{WithCuratorLayout(CuratorReadWriteLock)}
	for _, tt := range []struct {
		name   string
		layout []Option
		opts   []dlock.LockOption
		dir    string // the foreign node's parent under the key's znode, if any
		base   string
		naming string // what the end of the hold names
	}{
		{"semaphore", nil, nil, curatorSemLeases, curatorUUID + "lease-", curatorSemLeases},
		{"semaphore/limit", nil, []dlock.LockOption{dlock.WithLimit(1)}, curatorSemLeases, curatorUUID + "lease-", curatorSemLeases},
		{"rwlock writer/mutex layout", nil, nil, "", curatorUUID + curatorWriteName, "InterProcessReadWriteLock"},
		{"rwlock reader/mutex layout", nil, []dlock.LockOption{dlock.Shared()}, "", curatorUUID + curatorReadName, "InterProcessReadWriteLock"},
		{"mutex/rwlock layout", rw, nil, "", curatorUUID + curatorMutexName, "InterProcessMutex"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newTestDriver(t, addr, tt.layout...)
			k := key(t)
			l, err := client(t, d).Lock(ctx(t), k, append(tt.opts, dlock.WithTTL(time.Second))...)
			if err != nil {
				t.Fatal(err)
			}
			parent := d.parentPath(k)
			if tt.dir != "" {
				parent += "/" + tt.dir
			}
			p := foreignNode(t, tc, parent, tt.base)
			wait(t, l.Context().Done(), "the end of the hold")
			if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLost) || !strings.Contains(cause.Error(), tt.naming) {
				t.Errorf("the hold ended with %v; want ErrLost naming %s", cause, tt.naming)
			}
			if children, _, err := tc.Children(d.parentPath(k)); err != nil || len(children) != 1 {
				t.Errorf("children of the key's znode = %q, %v; want only the foreign recipe's", children, err)
			}
			deleteNode(t, tc, p)
		})
	}
}
