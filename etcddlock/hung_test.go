package etcddlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// newHungDriver returns a driver dialled through a proxy to addr, closed
// when t ends, and the proxy's Block, which hangs the server for it.
func newHungDriver(t testing.TB, addr string, opts ...Option) (*Driver, func()) {
	t.Helper()
	p, err := testsrv.StartProxy(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return newTestDriver(t, p.Addr(), opts...), p.Block
}

// TestCloseHungServer checks that Close returns in bounded time while the
// server is blackholed, with a session lease to revoke and a cancellable
// call in flight, and that the cancelled call fails with an error
// wrapping context.Canceled.
func TestCloseHungServer(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	d, hang := newHungDriver(t, srv.Addr)
	held := req(key(t))
	if res, err := d.Acquire(ctx(t), held); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	hang()
	callCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var callErr error
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	var took time.Duration
	wg.Go(func() {
		_, callErr = d.Acquire(callCtx, req(key(t)))
		took = time.Since(start)
	})
	time.AfterFunc(100*time.Millisecond, cancel)
	wg.Wait()
	if !errors.Is(callErr, context.Canceled) {
		t.Errorf("Acquire cancelled on a hung server = %v; want an error wrapping context.Canceled", callErr)
	}
	t.Logf("cancelled Acquire returned after %v", took)

	const bound = closeTimeout + 10*time.Second // Close revokes the session within closeTimeout
	start = time.Now()
	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	select {
	case err := <-closed:
		t.Logf("Close returned after %v: %v", time.Since(start), err)
	case <-time.After(bound):
		t.Fatalf("Close still running after %v on a hung server", bound)
	}
}
