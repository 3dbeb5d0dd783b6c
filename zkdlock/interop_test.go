package zkdlock

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// Interop with the real foreign clients: Apache Curator's recipes (Java,
// testdata/interop/Contender.java) and kazoo's (Python,
// testdata/interop/contender.py), from Debian's libcurator-recipes-java and
// python3-kazoo (scripts/install-servers.sh installs them), on the same
// paths as the driver's keys. Every critical section, the driver's and the
// foreign clients', is recorded in a witness directory that counts
// overlapping sections (see witness.enter). TestInterop prints the table of
// its pairs with -v:
//
//	go test -run Interop -v ./zkdlock/

// interopSession is the session timeout of every contender of the interop
// tests, and so the time a killed holder keeps the lock.
const interopSession = 2 * time.Second

// interopHolderEnv, set, makes the test binary a driver's contender process
// (see interopHolder) instead of running tests.
const interopHolderEnv = "ZKDLOCK_INTEROP_HOLDER"

// foreignClients runs the foreign contender programs.
type foreignClients struct {
	java, classpath, python string
}

// newForeignClients finds java with Curator's jar and python3 with kazoo,
// and compiles Contender.java. If any is missing, the test is skipped, or
// fails in CI.
func newForeignClients(t *testing.T) *foreignClients {
	t.Helper()
	missing := func(what string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s missing (scripts/install-servers.sh installs it)", what)
		}
		t.Skipf("%s missing (scripts/install-servers.sh installs it)", what)
	}
	const jar = "/usr/share/java/curator-recipes.jar" // its manifest names the rest
	java, err := exec.LookPath("java")
	javac, errc := exec.LookPath("javac")
	if _, errj := os.Stat(jar); err != nil || errc != nil || errj != nil {
		missing("java, javac or " + jar + " (libcurator-recipes-java, default-jdk-headless)")
	}
	f := &foreignClients{java: java}
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import kazoo").Run() == nil {
			f.python = p
			break
		}
	}
	if f.python == "" {
		missing("python3 with kazoo (python3-kazoo)")
	}
	classes := t.TempDir()
	if out, err := exec.Command(javac, "-d", classes, "-cp", jar, filepath.Join("testdata", "interop", "Contender.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac Contender.java: %v\n%s", err, out)
	}
	f.classpath = strings.Join([]string{classes, jar, "/usr/share/java/slf4j-nop.jar"}, string(os.PathListSeparator))
	return f
}

// proc is a contender process; lines carries its standard output.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr strings.Builder
	once   sync.Once
	err    error
}

// startProc starts a contender process, killed when t ends if it is still
// running. It prints a few lines only, which lines buffers.
func startProc(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{name: name, cmd: cmd, lines: make(chan string, 16)}
	cmd.Stderr = &p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.lines)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			p.lines <- s.Text()
		}
	}()
	t.Cleanup(p.kill)
	return p
}

// curator starts Contender.java with recipe at path.
func (f *foreignClients) curator(t *testing.T, addr, path, recipe string, n int, w witness, id string, rounds int) *proc {
	t.Helper()
	return startProc(t, "Curator "+recipe, exec.Command(f.java, "-Xmx64m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", f.classpath, "Contender",
		addr, path, recipe, fmt.Sprint(n), w.dir, w.overlaps, id, fmt.Sprint(rounds), fmt.Sprint(interopHold.Milliseconds())))
}

// kazoo starts contender.py with recipe at path.
func (f *foreignClients) kazoo(t *testing.T, addr, path, recipe, extra string, w witness, id string, rounds int) *proc {
	t.Helper()
	return startProc(t, "kazoo "+recipe, exec.Command(f.python, filepath.Join("testdata", "interop", "contender.py"),
		addr, path, recipe, extra, w.dir, w.overlaps, id, fmt.Sprint(rounds), fmt.Sprint(interopHold.Milliseconds())))
}

// expect waits for the line want from p.
func (p *proc) expect(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("%s ended before %q: %v\n%s", p.name, want, p.wait(), p.stderr.String())
			}
			if l == want {
				return
			}
		case <-timeout:
			p.kill()
			t.Fatalf("%s: no %q after a minute\n%s", p.name, want, p.stderr.String())
		}
	}
}

// wait waits for p to end.
func (p *proc) wait() error {
	p.once.Do(func() { p.err = p.cmd.Wait() })
	return p.err
}

// kill kills p (SIGKILL) and waits for it to end.
func (p *proc) kill() {
	p.cmd.Process.Kill()
	p.wait()
}

// stop closes p's standard input, which makes it release and end.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.stdin.Close()
	if err := p.wait(); err != nil {
		t.Errorf("%s: %v\n%s", p.name, err, p.stderr.String())
	}
}

// interopHold is how long each round of a contender's loop holds the lock.
const interopHold = 10 * time.Millisecond

// witness records critical sections as files in dir, named KIND-ID with
// KIND x (exclusive), r (reader) or s (a permit), and counts in overlaps
// the sections that found a conflicting one in dir when they began: every
// section creates its file first and then lists dir, so of two overlapping
// sections the later one sees the earlier one. Contender.java and
// contender.py follow the same protocol.
type witness struct{ dir, overlaps string }

func newWitness(t *testing.T) witness {
	return witness{dir: t.TempDir(), overlaps: t.TempDir()}
}

// enter begins a section of kind (with limit permits, for s) and returns
// the function that ends it.
func (w witness) enter(kind string, limit int, id string) (exit func(), err error) {
	mine := filepath.Join(w.dir, kind+"-"+id)
	f, err := os.OpenFile(mine, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	f.Close()
	names, err := os.ReadDir(w.dir)
	if err != nil {
		return nil, err
	}
	count := map[byte]int{}
	for _, n := range names {
		if n.Name() != kind+"-"+id {
			count[n.Name()[0]]++
		}
	}
	overlap := count['x']+count['r']+count['s'] > 0
	switch kind {
	case "r":
		overlap = count['x']+count['s'] > 0
	case "s":
		overlap = count['x']+count['r'] > 0 || count['s']+1 > limit
	}
	if overlap {
		f, err := os.CreateTemp(w.overlaps, kind+"-"+id+".")
		if err != nil {
			return nil, err
		}
		f.Close()
	}
	return func() { os.Remove(mine) }, nil
}

// count returns the overlapping sections recorded so far.
func (w witness) count(t *testing.T) int {
	t.Helper()
	names, err := os.ReadDir(w.overlaps)
	if err != nil {
		t.Fatal(err)
	}
	return len(names)
}

// forget removes the sections of id, a contender that was killed in them.
func (w witness) forget(t *testing.T, id string) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(w.dir, "?-"+id))
	for _, n := range names {
		if err := os.Remove(n); err != nil {
			t.Fatal(err)
		}
	}
}

// lockMode is a driver's lock mode in the interop tests.
type lockMode struct {
	name  string
	opts  []dlock.LockOption
	kind  string // the witness kind
	limit int
}

var (
	exclusiveMode = lockMode{"Exclusive", nil, "x", 1}
	sharedMode    = lockMode{"Shared", []dlock.LockOption{dlock.Shared()}, "r", 1}
)

func semaphoreMode(n int) lockMode {
	return lockMode{fmt.Sprintf("Semaphore(%d)", n), []dlock.LockOption{dlock.WithLimit(n)}, "s", n}
}

// takeTurns takes and releases the lock on k rounds times in mode m, each hold
// a witnessed section of interopHold.
func takeTurns(ctx context.Context, c *dlock.Client, k string, m lockMode, w witness, id string, n int) error {
	for i := range n {
		l, err := c.Lock(ctx, k, m.opts...)
		if err != nil {
			return err
		}
		exit, err := w.enter(m.kind, m.limit, fmt.Sprintf("%s-%d", id, i))
		if err != nil {
			return err
		}
		time.Sleep(interopHold) // the work of the section
		exit()
		if err := l.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

// interopRow is a line of the interop table.
type interopRow struct{ pair, direction, result, takeover string }

// interopTable collects the rows of TestInterop's subtests.
type interopTable struct {
	mu   sync.Mutex
	rows []interopRow
}

func (tb *interopTable) add(r interopRow) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.rows = append(tb.rows, r)
}

func (tb *interopTable) log(t *testing.T) {
	var b strings.Builder
	b.WriteString("\n| pair | direction | overlaps / outcome | takeover after kill -9 |\n|---|---|---|---|\n")
	for _, r := range tb.rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.pair, r.direction, r.result, r.takeover)
	}
	t.Log(b.String())
}

// holderSpec is what interopHolder reads from interopHolderEnv.
type holderSpec struct {
	Addr, Key, Kind, Witness, Overlaps, ID string
	Layout                                 Layout
	Shared                                 bool
}

// interopHolder is the driver's contender process of the takeover tests:
// it takes the lock, enters a witnessed section, prints "held" and keeps
// both until its standard input closes (or it is killed).
func interopHolder(spec string) int {
	var s holderSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	d, err := New([]string{s.Addr}, WithSessionTTL(interopSession), WithCuratorLayout(s.Layout), WithParentLinger(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := dlock.New(d)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	var opts []dlock.LockOption
	if s.Shared {
		opts = append(opts, dlock.Shared())
	}
	ctx := context.Background()
	l, err := c.Lock(ctx, s.Key, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	exit, err := witness{s.Witness, s.Overlaps}.enter(s.Kind, 1, s.ID)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("held")
	io.Copy(io.Discard, os.Stdin)
	exit()
	if err := l.Release(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startHolder starts the driver's contender process on k.
func startHolder(t *testing.T, addr, k string, l Layout, m lockMode, w witness, id string) *proc {
	t.Helper()
	spec, err := json.Marshal(holderSpec{Addr: addr, Key: k, Kind: m.kind, Witness: w.dir, Overlaps: w.overlaps, ID: id, Layout: l, Shared: m.kind == "r"})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), interopHolderEnv+"="+string(spec))
	return startProc(t, "dlock holder", cmd)
}

// waitContenders waits until the key's znode parent has n contenders.
func waitContenders(t *testing.T, tc *zk.Conn, parent string, n int) {
	t.Helper()
	for {
		children, _, ev, err := tc.ChildrenW(parent)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Fatal(err)
		}
		if len(queue(children)) >= n {
			return
		}
		if errors.Is(err, zk.ErrNoNode) {
			_, _, ev, err = tc.ExistsW(parent)
			if err != nil {
				t.Fatal(err)
			}
		}
		wait(t, ev, "a change of "+parent)
	}
}

// TestInterop runs the driver against Curator and kazoo on the same paths:
// pairs that must exclude each other take the lock in turns with zero
// overlapping sections, and a killed holder of either side (kill -9) hands
// the lock over once its session ends; pairs the driver cannot see into
// are refused by the driver; and the limits the package documentation
// states (Foreign clients) are checked as stated. With -v it prints the
// table of its rows.
func TestInterop(t *testing.T) {
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	f := newForeignClients(t)
	tc, err := dial(ctx(t), srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	table := &interopTable{}
	defer table.log(t)
	defer assertNoResidue(t, srv.Addr, "zk:"+t.Name())
	// newKey returns a key for t whose znode, and whatever the foreign
	// clients left there (kazoo's persistent lock path, Curator's
	// containers), is deleted when t ends.
	newKey := func(t *testing.T, d *Driver) string {
		k := key(t)
		t.Cleanup(func() { removeTree(t, tc, d.parentPath(k)) })
		return k
	}
	newClient := func(t *testing.T, l Layout) (*Driver, *dlock.Client) {
		d := newTestDriver(t, srv.Addr, WithSessionTTL(interopSession), WithCuratorLayout(l), WithParentLinger(0))
		return d, client(t, d)
	}
	type foreignSide struct {
		name  string
		start func(t *testing.T, path string, w witness, id string, rounds int) *proc
	}
	curator := func(recipe string, n int) foreignSide {
		name := "Curator " + map[string]string{"mutex": "InterProcessMutex", "read": "InterProcessReadWriteLock.readLock", "write": "InterProcessReadWriteLock.writeLock",
			"semaphore": fmt.Sprintf("InterProcessSemaphoreV2(%d)", n), "semmutex": "InterProcessSemaphoreMutex"}[recipe]
		return foreignSide{name, func(t *testing.T, path string, w witness, id string, rounds int) *proc {
			return f.curator(t, srv.Addr, path, recipe, n, w, id, rounds)
		}}
	}
	kazoo := func(recipe, extra string) foreignSide {
		name := "kazoo " + map[string]string{"lock": "Lock", "read": "ReadLock", "write": "WriteLock"}[recipe]
		if extra != "" {
			name += fmt.Sprintf(`(extra_lock_patterns=("%s",))`, extra)
		}
		return foreignSide{name, func(t *testing.T, path string, w witness, id string, rounds int) *proc {
			return f.kazoo(t, srv.Addr, path, recipe, extra, w, id, rounds)
		}}
	}
	pairName := func(fs foreignSide, l Layout, m lockMode) string {
		return fmt.Sprintf("%s / dlock %s, curator=%s", fs.name, m.name, l)
	}

	// Pairs that exclude each other: both sides take the lock in turns.
	const n = 15
	excl := []struct {
		fs foreignSide
		l  Layout
		m  lockMode
	}{
		{curator("mutex", 0), CuratorMutex, exclusiveMode},
		{curator("mutex", 0), CuratorMutex, sharedMode},
		{curator("write", 0), CuratorReadWriteLock, exclusiveMode},
		{curator("write", 0), CuratorReadWriteLock, sharedMode},
		{curator("read", 0), CuratorReadWriteLock, exclusiveMode},
		{kazoo("lock", "lock-"), CuratorMutex, exclusiveMode},
		{kazoo("write", "lock-"), CuratorMutex, sharedMode},
	}
	t.Run("Exclude", func(t *testing.T) {
		for _, x := range excl {
			t.Run(strings.ReplaceAll(pairName(x.fs, x.l, x.m), " ", "_"), func(t *testing.T) {
				d, c := newClient(t, x.l)
				k := newKey(t, d)
				w := newWitness(t)
				p := x.fs.start(t, d.parentPath(k), w, "foreign", n)
				p.expect(t, "ready")
				if err := takeTurns(ctx(t), c, k, x.m, w, "dlock", n); err != nil {
					t.Fatal(err)
				}
				p.expect(t, "done")
				p.stop(t)
				overlaps := w.count(t)
				if overlaps != 0 {
					t.Errorf("%d overlapping sections in %d rounds of each", overlaps, n)
				}
				table.add(interopRow{pairName(x.fs, x.l, x.m), fmt.Sprintf("both take turns, %d rounds each", n), fmt.Sprint(overlaps), ""})
			})
		}
	})

	// Takeover: a holder of either side killed with SIGKILL, the other
	// side waiting; the lock passes once the killed one's session ends.
	t.Run("Takeover", func(t *testing.T) {
		for _, x := range excl {
			if x.m.kind != "x" {
				continue
			}
			t.Run(strings.ReplaceAll(pairName(x.fs, x.l, x.m), " ", "_"), func(t *testing.T) {
				t.Parallel() // mostly waiting for sessions to end
				d, c := newClient(t, x.l)
				sp := newSpy(d)
				k := newKey(t, d)
				parent := d.parentPath(k)
				w := newWitness(t)

				// The foreign holder is killed; the driver takes over.
				p := x.fs.start(t, parent, w, "foreign", 0)
				p.expect(t, "held")
				// Listings name the foreign holder by its node.
				if hs, err := c.Holders(ctx(t), k); err != nil || len(hs) != 1 || hs[0].Info == "" {
					t.Errorf("Holders = %+v, %v; want the foreign holder, named", hs, err)
				}
				got := make(chan error, 1)
				var took time.Time
				go func() {
					l, err := client(t, sp).Lock(ctx(t), k)
					took = time.Now()
					if err == nil {
						var exit func()
						if exit, err = w.enter("x", 1, "dlock"); err == nil {
							exit()
						}
						err = errors.Join(err, l.Release(ctx(t)))
					}
					got <- err
				}()
				wait(t, sp.waiting, "the driver waiting")
				p.kill()
				killed := time.Now()
				w.forget(t, "foreign")
				if err := wait(t, got, "the driver's Lock"); err != nil {
					t.Fatal(err)
				}
				toDriver := took.Sub(killed)

				// The driver's holder (another process) is killed; the
				// foreign client takes over.
				h := startHolder(t, srv.Addr, k, x.l, x.m, w, "dlock-holder")
				h.expect(t, "held")
				p = x.fs.start(t, parent, w, "foreign2", 0)
				waitContenders(t, tc, parent, 2)
				h.kill()
				killed = time.Now()
				w.forget(t, "dlock-holder")
				p.expect(t, "held")
				toForeign := time.Since(killed)
				p.stop(t)
				overlaps := w.count(t)
				if overlaps != 0 {
					t.Errorf("%d overlapping sections", overlaps)
				}
				t.Logf("kill -9 of the foreign holder: the driver took over after %v; of the driver's: the foreign client after %v (sessions of %v)", toDriver, toForeign, interopSession)
				table.add(interopRow{pairName(x.fs, x.l, x.m), "foreign holder killed, dlock waits", fmt.Sprint(overlaps), toDriver.Round(time.Millisecond).String()})
				table.add(interopRow{pairName(x.fs, x.l, x.m), "dlock holder killed, foreign waits", fmt.Sprint(overlaps), toForeign.Round(time.Millisecond).String()})
			})
		}
	})

	// Recipes the driver cannot take part in: once a foreign client uses
	// the path, the driver refuses the key in every mode.
	t.Run("Refuse", func(t *testing.T) {
		for _, x := range []struct {
			fs foreignSide
			l  Layout
			m  lockMode
		}{
			{curator("semaphore", 2), CuratorMutex, semaphoreMode(2)},
			{curator("semmutex", 0), CuratorMutex, exclusiveMode},
			{curator("semmutex", 0), CuratorMutex, semaphoreMode(1)},
			{curator("write", 0), CuratorMutex, exclusiveMode},
			{curator("read", 0), CuratorMutex, sharedMode},
			{curator("mutex", 0), CuratorReadWriteLock, exclusiveMode},
		} {
			t.Run(strings.ReplaceAll(pairName(x.fs, x.l, x.m), " ", "_"), func(t *testing.T) {
				d, c := newClient(t, x.l)
				k := newKey(t, d)
				w := newWitness(t)
				p := x.fs.start(t, d.parentPath(k), w, "foreign", 0)
				p.expect(t, "held")
				l, err := c.Lock(ctx(t), k, x.m.opts...)
				if err == nil {
					l.Release(ctx(t))
				}
				if !errors.Is(err, dlock.ErrPermanent) {
					t.Errorf("Lock beside the foreign holder = %v; want ErrPermanent", err)
				}
				p.stop(t)
				table.add(interopRow{pairName(x.fs, x.l, x.m), "foreign holds, dlock asks", "dlock refused (ErrPermanent)", ""})
			})
		}
	})

	// What the package documentation states the driver cannot prevent:
	// a foreign recipe blind to the driver's nodes enters while the
	// driver holds. (The driver ends its holds at their next renewal when
	// it sees a Curator recipe's nodes, and refuses the key from then on,
	// where it can tell.) A
	// change here means that documentation is out of date.
	t.Run("Limits", func(t *testing.T) {
		for _, x := range []struct {
			fs      foreignSide
			l       Layout
			m       lockMode
			lost    bool // the driver's holds end with ErrLost
			refused bool // the driver refuses the key afterwards
		}{
			{curator("semaphore", 2), CuratorMutex, semaphoreMode(2), true, true},
			{curator("semmutex", 0), CuratorMutex, exclusiveMode, true, true},
			{curator("write", 0), CuratorMutex, exclusiveMode, true, true},
			{kazoo("lock", ""), CuratorMutex, exclusiveMode, false, false},
			{kazoo("read", ""), CuratorMutex, exclusiveMode, false, false},
		} {
			t.Run(strings.ReplaceAll(pairName(x.fs, x.l, x.m), " ", "_"), func(t *testing.T) {
				d, c := newClient(t, x.l)
				k := newKey(t, d)
				w := newWitness(t)
				held := x.m.limit
				var ls []*dlock.Lock
				for range held {
					l, err := c.Lock(ctx(t), k, x.m.opts...)
					if err != nil {
						t.Fatal(err)
					}
					defer l.Release(ctx(t))
					exit, err := w.enter(x.m.kind, x.m.limit, fmt.Sprintf("dlock-%d", len(ls)))
					if err != nil {
						t.Fatal(err)
					}
					defer exit()
					ls = append(ls, l)
				}
				p := x.fs.start(t, d.parentPath(k), w, "foreign", 0)
				p.expect(t, "held")
				entered := time.Now()
				overlaps := w.count(t)
				if overlaps == 0 {
					t.Errorf("the foreign client entered beside the driver's %d holds and no overlap was seen", held)
				}
				outcome := "the foreign client enters; "
				if x.lost {
					for _, l := range ls {
						wait(t, l.Context().Done(), "the end of the driver's hold")
						if cause := context.Cause(l.Context()); !errors.Is(cause, dlock.ErrLost) {
							t.Errorf("the driver's hold ended with %v; want ErrLost", cause)
						}
					}
					outcome += fmt.Sprintf("dlock's holds end with ErrLost by %v after it says it entered; ", time.Since(entered).Round(time.Millisecond))
				}
				outcome += "then dlock waits"
				_, other := newClient(t, x.l)
				_, err := other.TryLock(ctx(t), k, x.m.opts...)
				switch {
				case x.refused && errors.Is(err, dlock.ErrPermanent):
					outcome = strings.Replace(outcome, "dlock waits", "dlock refuses (ErrPermanent)", 1)
				case x.refused || !errors.Is(err, dlock.ErrNotAcquired):
					t.Errorf("TryLock after the foreign client entered = %v", err)
				}
				p.stop(t)
				table.add(interopRow{pairName(x.fs, x.l, x.m), "dlock holds, foreign asks (documented limit)",
					fmt.Sprintf("%d: %s", overlaps, outcome), ""})
			})
		}
	})

	// kazoo's ReadLock nodes are readers to the driver.
	t.Run("Share", func(t *testing.T) {
		fs := kazoo("read", "")
		d, c := newClient(t, CuratorMutex)
		k := newKey(t, d)
		w := newWitness(t)
		p := fs.start(t, d.parentPath(k), w, "foreign", 0)
		p.expect(t, "held")
		r, err := c.TryLock(ctx(t), k, dlock.Shared())
		if err != nil {
			t.Fatalf("shared TryLock beside kazoo's reader: %v", err)
		}
		if err := r.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryLock(ctx(t), k); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("exclusive TryLock beside kazoo's reader = %v; want ErrNotAcquired", err)
		}
		p.stop(t)
		table.add(interopRow{pairName(fs, CuratorMutex, sharedMode), "foreign reader holds, dlock asks", "both read; a dlock writer waits", ""})
	})
}

// removeTree deletes the znode p and everything under it.
func removeTree(t *testing.T, c *zk.Conn, p string) {
	children, _, err := c.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return
	}
	if err != nil {
		t.Error(err)
		return
	}
	for _, ch := range children {
		removeTree(t, c, p+"/"+ch)
	}
	if err := c.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Error(err)
	}
}
