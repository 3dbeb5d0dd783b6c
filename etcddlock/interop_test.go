package etcddlock

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// The interop tests run etcd's own lock clients against the driver on the
// same names: etcdctl lock (a process: the etcd-client package's etcdctl),
// concurrency.Mutex (a client of its own in this process) and the server's
// v3lock service. Each logs one row per pair and direction, "interop: PAIR |
// DIRECTION | overlaps N | takeover T", for the interop table. Run them
// alone with
//
//	CI=true go test -race -count=1 -run TestInterop -v ./etcddlock/

// foreignLock is a lock client other than dlock, holding one etcd lock name.
type foreignLock interface {
	// lock returns once the lock is held, or fails.
	lock(ctx context.Context) error
	// unlock releases the lock as the client does on an orderly exit.
	unlock() error
	// crash ends the client without releasing: its session lease expires.
	crash()
	// key returns the etcd key of its entry, once held.
	key() string
}

// witness counts the parties inside their critical sections, independently
// of the locks: a party enters only after its lock client said it holds the
// lock and exits before it releases, so an overlap it sees is an overlap of
// two holds.
type witness struct {
	mu       sync.Mutex
	in       int
	overlaps int
}

func (w *witness) enter() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.in++; w.in > 1 {
		w.overlaps++
	}
}

func (w *witness) exit() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.in--
}

// etcdctl is `etcdctl lock NAME`: it prints its key once it holds the lock,
// holds it until SIGTERM (then unlocks), and loses it when killed only when
// its session (--ttl) expires.
type etcdctl struct {
	t      *testing.T
	bin    string
	addr   string
	name   string
	ttl    int
	cmd    *exec.Cmd
	waited chan struct{}
	k      string
}

func etcdctlBin(t *testing.T) string {
	bin, err := exec.LookPath("etcdctl")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("etcdctl not found (Debian package etcd-client): %v", err)
		}
		t.Skipf("etcdctl not found (Debian package etcd-client): %v", err)
	}
	return bin
}

func (e *etcdctl) lock(ctx context.Context) error {
	e.cmd = exec.Command(e.bin, "--endpoints="+e.addr, "lock", fmt.Sprintf("--ttl=%d", e.ttl), e.name)
	e.cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	out, err := e.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	e.cmd.Stderr = &stderr
	if err := e.cmd.Start(); err != nil {
		return err
	}
	e.waited = make(chan struct{})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		for sc.Scan() {
		}
		e.cmd.Wait()
		close(e.waited)
	}()
	e.t.Cleanup(func() { e.crash() })
	select {
	case k, ok := <-line:
		if !ok {
			<-e.waited
			return fmt.Errorf("etcdctl lock exited without the lock: %s", stderr.String())
		}
		e.k = k
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *etcdctl) unlock() error {
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	<-e.waited
	return nil
}

func (e *etcdctl) crash() {
	if e.cmd != nil && e.cmd.Process != nil {
		e.cmd.Process.Kill()
		<-e.waited
	}
}

func (e *etcdctl) key() string { return e.k }

// mutex is concurrency.Mutex on a client and session of its own.
type mutex struct {
	cli *clientv3.Client
	s   *concurrency.Session
	m   *concurrency.Mutex
}

func newMutex(t *testing.T, addr, name string, ttl int) *mutex {
	cli := newClient(t, addr)
	t.Cleanup(func() { cli.Close() })
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	return &mutex{cli: cli, s: s, m: concurrency.NewMutex(s, name)}
}

func (m *mutex) lock(ctx context.Context) error { return m.m.Lock(ctx) }

func (m *mutex) unlock() error {
	if err := m.m.Unlock(context.Background()); err != nil {
		return err
	}
	return m.s.Close()
}

// crash stops the session's keep-alive and closes the client: the lease
// expires on the server, as that of a process killed.
func (m *mutex) crash() {
	m.s.Orphan()
	m.cli.Close()
}

func (m *mutex) key() string { return m.m.Key() }

// v3lock is etcd's v3lock service, the server's Lock API, which runs a
// concurrency.Mutex on the lease it is given. It is called over the client's
// gRPC connection with hand-encoded messages (its Go package belongs to the
// server's module): LockRequest{name = 1, lease = 2}, LockResponse{header =
// 1, key = 2} and UnlockRequest{key = 1}.
type v3lock struct {
	cli   *clientv3.Client
	name  string
	lease clientv3.LeaseID
	stop  context.CancelFunc // ends the lease's keep-alive
	k     string
}

func newV3Lock(t *testing.T, addr, name string, ttl int64) *v3lock {
	cli := newClient(t, addr)
	t.Cleanup(func() { cli.Close() })
	g, err := cli.Grant(ctx(t), ttl)
	if err != nil {
		t.Fatal(err)
	}
	kctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	ch, err := cli.KeepAlive(kctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range ch {
		}
	}()
	return &v3lock{cli: cli, name: name, lease: g.ID, stop: stop}
}

// rawCodec passes encoded messages through gRPC as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// field appends the protobuf field number n of wire type bytes.
func field(b []byte, n byte, v string) []byte {
	return append(binary.AppendUvarint(append(b, n<<3|2), uint64(len(v))), v...)
}

func (v *v3lock) lock(ctx context.Context) error {
	req := binary.AppendUvarint(append(field(nil, 1, v.name), 2<<3), uint64(v.lease))
	var resp []byte
	if err := v.cli.ActiveConnection().Invoke(ctx, "/v3lockpb.Lock/Lock", req, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
		return err
	}
	for len(resp) > 0 { // fields 1 and 2, both of wire type bytes
		tag, n := binary.Uvarint(resp)
		l, m := binary.Uvarint(resp[n:])
		if n <= 0 || m <= 0 || tag&7 != 2 || uint64(len(resp)-n-m) < l {
			return fmt.Errorf("malformed LockResponse %x", resp)
		}
		if tag>>3 == 2 {
			v.k = string(resp[n+m : n+m+int(l)])
		}
		resp = resp[n+m+int(l):]
	}
	return nil
}

func (v *v3lock) unlock() error {
	var resp []byte
	if err := v.cli.ActiveConnection().Invoke(context.Background(), "/v3lockpb.Lock/Unlock", field(nil, 1, v.k), &resp, grpc.ForceCodec(rawCodec{})); err != nil {
		return err
	}
	v.stop()
	_, err := v.cli.Revoke(context.Background(), v.lease)
	return err
}

// crash ends the lease's keep-alive: the lease expires on the server.
func (v *v3lock) crash() { v.stop() }

func (v *v3lock) key() string { return v.k }

// queued returns a channel that is closed once the queue of name has n
// entries of its own (not those of nested names), which it watches for.
func queued(t *testing.T, cli *clientv3.Client, name string, n int) <-chan struct{} {
	ctx, cancel := context.WithCancel(ctx(t))
	t.Cleanup(cancel)
	ch := make(chan struct{})
	go func() {
		for {
			resp, err := cli.Get(ctx, name+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
			if err != nil {
				return
			}
			m := 0
			for _, kv := range resp.Kvs {
				if !strings.Contains(string(kv.Key[len(name)+1:]), "/") {
					m++
				}
			}
			if m >= n {
				close(ch)
				return
			}
			if _, ok := <-cli.Watch(ctx, name+"/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)); !ok {
				return
			}
		}
	}()
	return ch
}

// interopPair is a foreign lock client and the dlock mode it meets.
type interopPair struct {
	name    string
	foreign func(t *testing.T, addr, name string) foreignLock
	opts    []dlock.LockOption // the dlock side's mode
}

func interopPairs() []interopPair {
	ctl := func(t *testing.T, addr, name string) foreignLock {
		return &etcdctl{t: t, bin: etcdctlBin(t), addr: addr, name: name, ttl: 2}
	}
	mu := func(t *testing.T, addr, name string) foreignLock { return newMutex(t, addr, name, 2) }
	v3 := func(t *testing.T, addr, name string) foreignLock { return newV3Lock(t, addr, name, 2) }
	return []interopPair{
		{"etcdctl lock / dlock exclusive", ctl, nil},
		{"concurrency.Mutex / dlock exclusive", mu, nil},
		{"concurrency.Mutex / dlock shared", mu, []dlock.LockOption{dlock.Shared()}},
		{"concurrency.Mutex / dlock semaphore 2", mu, []dlock.LockOption{dlock.WithLimit(2)}},
		{"v3lock service / dlock exclusive", v3, nil},
	}
}

// A foreign lock client and dlock on the same etcd lock name exclude each
// other both ways, and dlock takes over from a foreign holder that dies once
// its session lease expires. dlock key K under prefix P is the etcd lock
// name P+K.
func TestInteropExclusion(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	cli := admin(t)
	for _, p := range interopPairs() {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel() // each waits for a lease to expire
			c := newLockClient(t, newTestDriver(t, srv.Addr))
			row := func(dir string, w *witness, takeover time.Duration) {
				to := "-"
				if takeover > 0 {
					to = takeover.Round(10 * time.Millisecond).String()
				}
				t.Logf("interop: %s | %s | overlaps %d | takeover %s", p.name, dir, w.overlaps, to)
				if w.overlaps > 0 {
					t.Errorf("%s: %d overlapping critical sections", dir, w.overlaps)
				}
			}

			// dlock waits for the foreign holder.
			k := key(t)
			var w1, w2, w3 witness
			f := p.foreign(t, srv.Addr, DefaultPrefix+k)
			if err := f.lock(ctx(t)); err != nil {
				t.Fatal(err)
			}
			w1.enter()
			got := lockAsync(ctx(t), c, k, p.opts...)
			select {
			case <-queued(t, cli, DefaultPrefix+k, 2):
			case r := <-got:
				w1.enter() // dlock holds beside the foreign holder
				row("foreign holds, dlock waits", &w1, 0)
				if r.err == nil {
					r.l.Release(ctx(t))
				}
				return
			}
			w1.exit()
			if err := f.unlock(); err != nil {
				t.Fatal(err)
			}
			r := <-got
			if r.err != nil {
				t.Fatal(r.err)
			}
			w1.enter()
			w1.exit()
			row("foreign holds, dlock waits", &w1, 0)

			// The foreign client waits for dlock.
			w2.enter()
			f = p.foreign(t, srv.Addr, DefaultPrefix+k)
			fgot := make(chan error, 1)
			go func() { fgot <- f.lock(ctx(t)) }()
			select {
			case <-queued(t, cli, DefaultPrefix+k, 2):
			case <-fgot:
				w2.enter() // the foreign client holds beside dlock
				row("dlock holds, foreign waits", &w2, 0)
				return
			}
			w2.exit()
			if err := r.l.Release(ctx(t)); err != nil {
				t.Fatal(err)
			}
			if err := <-fgot; err != nil {
				t.Fatal(err)
			}
			w2.enter()
			w2.exit()
			row("dlock holds, foreign waits", &w2, 0)

			// dlock takes over once the foreign holder, killed, loses
			// its session lease.
			w3.enter()
			got = lockAsync(ctx(t), c, k, p.opts...)
			<-queued(t, cli, DefaultPrefix+k, 2)
			fk := f.key()
			w3.exit()
			killed := time.Now()
			f.crash()
			r = <-got
			takeover := time.Since(killed)
			if r.err != nil {
				t.Fatal(r.err)
			}
			w3.enter()
			if resp, err := cli.Get(ctx(t), fk); err != nil || len(resp.Kvs) > 0 {
				w3.overlaps++ // dlock holds while the dead holder's key lives
			}
			w3.exit()
			row("foreign killed, dlock takes over", &w3, takeover)
			if err := r.l.Release(ctx(t)); err != nil {
				t.Fatal(err)
			}
			assertEmpty(t, cli, k)
		})
	}
}

// A foreign holder lists with its etcd key as Info, and ForceRelease deletes
// it with the rest of the key's queue but not the entries of nested keys.
// Nested names: dlock's "K" does not wait for a holder of "K/sub", whoever it
// is, while concurrency.Mutex's "K" waits for dlock's "K/sub" (as for its
// own): it counts every key under "K/".
func TestInteropListAndNested(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	cli := admin(t)
	c := newLockClient(t, newTestDriver(t, srv.Addr))
	k := key(t)
	m := newMutex(t, srv.Addr, DefaultPrefix+k, 5)
	if err := m.lock(ctx(t)); err != nil {
		t.Fatal(err)
	}
	defer m.unlock()
	sub, err := c.TryLock(ctx(t), k+"/sub")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Release(ctx(t))
	m2 := newMutex(t, srv.Addr, DefaultPrefix+k+"/sub2", 5)
	if err := m2.lock(ctx(t)); err != nil {
		t.Fatal(err)
	}
	defer m2.unlock()

	mk, err := cli.Get(ctx(t), m.key())
	if err != nil || len(mk.Kvs) != 1 {
		t.Fatalf("Mutex's key %q: %v, %v", m.key(), mk, err)
	}
	hs, err := c.Holders(ctx(t), k)
	if err != nil || len(hs) != 1 || hs[0].Info != m.key() || hs[0].Mode != driver.Exclusive || hs[0].Token != uint64(mk.Kvs[0].CreateRevision) {
		t.Errorf("Holders(%q) = %+v, %v; want the Mutex's key %q, exclusive, token %d", k, hs, err, m.key(), mk.Kvs[0].CreateRevision)
	}
	if n, err := c.ForceRelease(ctx(t), k); err != nil || n != 1 {
		t.Errorf("ForceRelease = %d, %v; want 1", n, err)
	}
	if resp, err := cli.Get(ctx(t), m.key()); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("the Mutex's key after ForceRelease: %v, %v; want it gone", resp, err)
	}
	for _, nested := range []string{k + "/sub", k + "/sub2"} {
		if hs, err := c.Holders(ctx(t), nested); err != nil || len(hs) != 1 {
			t.Errorf("Holders(%q) after ForceRelease(%q) = %+v, %v; want its holder", nested, k, hs, err)
		}
	}

	l, err := c.TryLock(ctx(t), k)
	if err != nil {
		t.Fatalf("TryLock(%q) beside holders of nested keys: %v", k, err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	m3 := newMutex(t, srv.Addr, DefaultPrefix+k, 5)
	defer m3.s.Close()
	if err := m3.m.TryLock(ctx(t)); !errors.Is(err, concurrency.ErrLocked) {
		t.Errorf("Mutex.TryLock(%q) while dlock holds %q = %v; want ErrLocked (Mutex counts nested keys)", k, k+"/sub", err)
	}

	for _, err := range []error{sub.Release(ctx(t)), m2.unlock(), m.s.Close(), m3.s.Close()} {
		if err != nil {
			t.Error(err)
		}
	}
	assertEmpty(t, cli, k)
}

// dlock clients, concurrency.Mutex clients and etcdctl lock contend for one
// name round after round, each inside the critical section for a moment:
// the witness sees no overlap.
func TestInteropContention(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	k := key(t)
	name := DefaultPrefix + k
	const rounds = 10
	var w witness
	var wg sync.WaitGroup
	errs := make(chan error, 5*rounds)
	hold := func() {
		w.enter()
		time.Sleep(5 * time.Millisecond) // a moment inside, for others to collide with
		w.exit()
	}
	start := time.Now()
	for range 2 {
		c := newLockClient(t, newTestDriver(t, srv.Addr))
		wg.Go(func() {
			for range rounds {
				l, err := c.Lock(ctx(t), k)
				if err != nil {
					errs <- err
					return
				}
				hold()
				if err := l.Release(ctx(t)); err != nil {
					errs <- err
				}
			}
		})
		m := newMutex(t, srv.Addr, name, 5)
		wg.Go(func() {
			defer m.s.Close()
			for range rounds {
				if err := m.lock(ctx(t)); err != nil {
					errs <- err
					return
				}
				hold()
				if err := m.m.Unlock(ctx(t)); err != nil {
					errs <- err
				}
			}
		})
	}
	bin := etcdctlBin(t)
	wg.Go(func() {
		for range rounds {
			e := &etcdctl{t: t, bin: bin, addr: srv.Addr, name: name, ttl: 5}
			if err := e.lock(ctx(t)); err != nil {
				errs <- err
				return
			}
			hold()
			if err := e.unlock(); err != nil {
				errs <- err
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("interop: dlock x2, concurrency.Mutex x2, etcdctl lock | %d rounds each, all contending | overlaps %d | %v in all", rounds, w.overlaps, time.Since(start).Round(10*time.Millisecond))
	if w.overlaps > 0 {
		t.Errorf("%d overlapping critical sections", w.overlaps)
	}
}
