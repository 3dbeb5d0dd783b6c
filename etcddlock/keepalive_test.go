package etcddlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// stallingLease is the lease API of a client whose keep-alive streams the
// test ends, as the client library ends a stream on a member that died or
// hangs once the lease's TTL passes without an answer. With refuse set,
// every other renewal fails too, as on a cluster that cannot be reached.
type stallingLease struct {
	clientv3.Lease

	mu      sync.Mutex
	stops   []chan struct{}
	refuse  bool
	renewed chan struct{} // gets a value for each KeepAlive after the first
	calls   int
}

func (l *stallingLease) KeepAlive(ctx context.Context, id clientv3.LeaseID) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	in, err := l.Lease.KeepAlive(ctx, id)
	if err != nil {
		return nil, err
	}
	out, stop := make(chan *clientv3.LeaseKeepAliveResponse), make(chan struct{})
	l.mu.Lock()
	l.stops = append(l.stops, stop)
	if l.calls++; l.calls > 1 {
		select {
		case l.renewed <- struct{}{}:
		default:
		}
	}
	l.mu.Unlock()
	go func() {
		defer close(out)
		for {
			select {
			case r, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- r:
				case <-stop:
					return
				}
			case <-stop:
				return
			}
		}
	}()
	return out, nil
}

func (l *stallingLease) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	l.mu.Lock()
	refuse := l.refuse
	l.mu.Unlock()
	if refuse {
		return nil, errors.New("test: no member answers")
	}
	return l.Lease.KeepAliveOnce(ctx, id)
}

// stall ends the keep-alive streams handed out so far; with refuse, every
// later renewal fails as well.
func (l *stallingLease) stall(refuse bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.stops {
		close(s)
	}
	l.stops, l.refuse = nil, refuse
}

// newStallingDriver returns a driver with a 2s session whose keep-alive the
// test stalls, closed when t ends, and an admin client.
func newStallingDriver(t *testing.T) (*Driver, *stallingLease, *clientv3.Client) {
	t.Helper()
	srv := testsrv.Get(t, testsrv.Etcd)
	cli := newClient(t, srv.Addr)
	sl := &stallingLease{Lease: cli.Lease, renewed: make(chan struct{}, 1)}
	cli.Lease = sl
	d, err := newDriver(cli, true, []Option{WithSessionTTL(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, sl, admin(t)
}

// acquireWatched takes a hold and watches its entry. It returns the time
// until which the hold is valid and a channel closed when the entry goes.
func acquireWatched(t *testing.T, d *Driver, cli *clientv3.Client, r driver.Request) (time.Time, <-chan struct{}) {
	t.Helper()
	sent := time.Now()
	res, err := d.Acquire(ctx(t), r)
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	rec, ok := d.table.Get(reqID(r))
	if !ok {
		t.Fatal("the hold has no record")
	}
	wctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := cli.Watch(wctx, rec.name, clientv3.WithRev(rec.rev))
	gone := make(chan struct{})
	go func() {
		for wr := range w {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					close(gone)
					return
				}
			}
		}
	}()
	return sent.Add(res.TTL), gone
}

// TestKeepAliveStallKeepsSession checks that a keep-alive stream that ends
// (as one on a member that died does) while the lease is alive neither
// removes the holds nor ends the session: the driver renews the lease once,
// starts a new stream, and the holder refreshes as before.
func TestKeepAliveStallKeepsSession(t *testing.T) {
	d, sl, cli := newStallingDriver(t)
	r := req(key(t))
	r.TTL = 2 * time.Second
	_, gone := acquireWatched(t, d, cli, r)
	sl.stall(false)
	select {
	case <-sl.renewed:
	case <-gone:
		t.Fatal("the hold's entry was removed when the session's keep-alive stream ended, though the lease lives")
	case <-time.After(30 * time.Second):
		t.Fatal("no new keep-alive stream after the first ended")
	}
	if err := d.Refresh(ctx(t), r); err != nil {
		t.Fatalf("Refresh after a new keep-alive stream = %v; want the hold kept", err)
	}
	select {
	case <-gone:
		t.Fatal("the hold's entry is gone")
	default:
	}
	if err := d.Release(ctx(t), r); err != nil {
		t.Errorf("Release = %v", err)
	}
}

// TestKeepAliveLostKeepsValidHolds checks that when the session's lease can
// no longer be renewed, the driver removes no hold before the time it
// reported it valid until: the lease is revoked only after the latest proven
// renewal has run out, and the holder is told the hold is gone.
func TestKeepAliveLostKeepsValidHolds(t *testing.T) {
	d, sl, cli := newStallingDriver(t)
	r := req(key(t))
	r.TTL = 2 * time.Second
	validUntil, gone := acquireWatched(t, d, cli, r)
	sl.stall(true)
	select {
	case <-gone:
		if now := time.Now(); now.Before(validUntil) {
			t.Fatalf("the hold's entry was removed %v before the end of the validity reported for it", validUntil.Sub(now))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the entry of a session that cannot be renewed is still there")
	}
	if err := d.Refresh(ctx(t), r); !errors.Is(err, driver.ErrNotOwner) {
		t.Errorf("Refresh after the session ended = %v; want ErrNotOwner", err)
	}
	d.Release(ctx(t), r)
	assertEmpty(t, cli, r.Key)
}
