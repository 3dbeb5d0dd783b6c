package memcachedlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// hungTimeout is the client's network timeout in the hung-server tests.
const hungTimeout = time.Second

// newHungDriver returns a driver dialled through a proxy to addr, closed
// when t ends, and the proxy's Block, which hangs the server for it.
func newHungDriver(t testing.TB, addr string) (*Driver, func()) {
	t.Helper()
	p, err := testsrv.StartProxy(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	d := newTestDriver(t, p.Addr())
	d.mc.Timeout = hungTimeout
	return d, p.Block
}

// TestCloseHungServer checks that Close returns in bounded time while the
// server is blackholed and a call is in flight. The call runs under a
// context that cannot be cancelled (see TestCloseDuringCancellableCall for
// the other kind).
func TestCloseHungServer(t *testing.T) {
	testCloseHung(t, context.Background())
}

// TestCloseDuringCancellableCall is TestCloseHungServer with a call whose
// context can be cancelled.
func TestCloseDuringCancellableCall(t *testing.T) {
	testCloseHung(t, dlocktest.Ctx(t))
}

func testCloseHung(t *testing.T, callCtx context.Context) {
	srv := testsrv.Get(t, testsrv.Memcached)
	d, hang := newHungDriver(t, srv.Addr)
	r := dlocktest.Request(key(t))
	if res, err := d.Acquire(dlocktest.Ctx(t), r); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	hang()
	var callErr error
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { callErr = d.Release(callCtx, r) })
	// Nothing signals that the request has reached the proxy; give it a
	// moment, so that Close meets a call in flight (if it does not, the
	// test is merely weaker).
	time.Sleep(100 * time.Millisecond)
	const bound = 10 * time.Second // many times the client's timeout
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	select {
	case <-closed:
		t.Logf("Close returned after %v (client timeout %v)", time.Since(start), hungTimeout)
	case <-time.After(bound):
		t.Fatalf("Close still running after %v on a hung server", bound)
	}
	wg.Wait()
	if callErr == nil || errors.Is(callErr, errClosed) {
		t.Errorf("Release in flight on a hung server = %v; want a network error", callErr)
	}
}
