package job_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	_ "github.com/dlockhq/dlock/etcddlock"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/dlocktest/bounds"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/job"
	_ "github.com/dlockhq/dlock/memdlock"
	_ "github.com/dlockhq/dlock/redisdlock"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(child(spec))
	}
	testsrv.Main(m, testsrv.Redis, testsrv.Etcd, testsrv.Memcached)
}

var stores = []dlocktest.Store{
	{Name: "mem", URL: func(t *testing.T) string { return "mem://" + testsrv.DatabaseName(t.Name()) }},
	{Name: "redis", URL: func(t *testing.T) string {
		return testsrv.Get(t, testsrv.Redis).URL + "?prefix=" + testsrv.DatabaseName(t.Name()) + ":"
	}},
	{Name: "etcd", URL: func(t *testing.T) string {
		return testsrv.Get(t, testsrv.Etcd).URL + "?session=2s&prefix=/" + testsrv.DatabaseName(t.Name())
	}},
}

// eachStore runs test on every store.
func eachStore(t *testing.T, test func(t *testing.T, url string)) {
	dlocktest.EachStore(t, stores, test)
}

// open returns a Client of its own on url, as another instance would have.
func open(t *testing.T, url string) *dlock.Client { return dlocktest.Open(t, url) }

// testCtx bounds a test's waits, so that a bug fails it instead of hanging.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Instances that fire the same job together run it once: the one that got
// the lock runs until every other one has skipped.
func TestOnceAcrossInstances(t *testing.T) {
	const n = 6
	eachStore(t, func(t *testing.T, url string) {
		ctx := testCtx(t)
		clients := make([]*dlock.Client, n)
		for i := range clients {
			clients[i] = open(t, url)
		}
		var ran, skipped atomic.Int32
		allSkipped := make(chan struct{})
		fire := make(chan struct{})
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() {
				<-fire
				errs[i] = job.Run(ctx, c, "report", func(context.Context) error {
					ran.Add(1)
					// Should two instances run it, the others never all
					// skip: give up waiting after a while then.
					select {
					case <-allSkipped:
					case <-time.After(10 * time.Second):
					}
					return nil
				})
				if errors.Is(errs[i], job.ErrSkipped) && skipped.Add(1) == n-1 {
					close(allSkipped)
				}
			})
		}
		close(fire)
		wg.Wait()
		if ran.Load() != 1 || skipped.Load() != n-1 {
			t.Errorf("ran %d times, skipped %d times; want 1 and %d", ran.Load(), skipped.Load(), n-1)
		}
		for i, err := range errs {
			if err != nil && !errors.Is(err, job.ErrSkipped) {
				t.Errorf("instance %d: %v", i, err)
			}
		}
	})
}

// A skip is reported as ErrSkipped, which is also dlock.ErrNotAcquired, and
// the job does not run; a cancelled context or a closed client is no skip.
func TestSkip(t *testing.T) {
	eachStore(t, func(t *testing.T, url string) {
		ctx := testCtx(t)
		a, b := open(t, url), open(t, url)
		l, err := a.TryLock(ctx, "report")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		ran := false
		fn := func(context.Context) error { ran = true; return nil }
		err = job.Run(ctx, b, "report", fn)
		if !errors.Is(err, job.ErrSkipped) || !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("Run while held = %v; want ErrSkipped and ErrNotAcquired", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := job.Run(cctx, b, "free", fn); errors.Is(err, job.ErrSkipped) || !errors.Is(err, context.Canceled) {
			t.Errorf("Run with a cancelled context = %v; want context.Canceled and no skip", err)
		}
		c := open(t, url)
		c.Close()
		if err := job.Run(ctx, c, "free", fn); errors.Is(err, job.ErrSkipped) || !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("Run on a closed client = %v; want ErrClosed and no skip", err)
		}
		if ran {
			t.Error("the job ran")
		}
	})
}

// AtLeast keeps the lock after a job that finished at once, whether it
// succeeded or failed, and the hold ends by itself.
func TestAtLeast(t *testing.T) {
	eachStore(t, func(t *testing.T, url string) {
		ctx := testCtx(t)
		a, b := open(t, url), open(t, url)
		boom := errors.New("boom")
		for _, result := range []error{nil, boom} {
			key := fmt.Sprintf("report-%v", result)
			if err := job.Run(ctx, a, key, func(context.Context) error { return result }, job.AtLeast(time.Hour)); err != result {
				t.Fatalf("Run = %v; want %v", err, result)
			}
			if err := job.Run(ctx, b, key, func(context.Context) error { return nil }); !errors.Is(err, job.ErrSkipped) {
				t.Errorf("after a run that returned %v: Run = %v; want ErrSkipped", result, err)
			}
		}
		// Without AtLeast the next firing runs the job again.
		for _, c := range []*dlock.Client{a, b} {
			if err := job.Run(ctx, c, "plain", func(context.Context) error { return nil }); err != nil {
				t.Errorf("Run without AtLeast = %v; want nil", err)
			}
		}
		// A short hold ends on the store by itself.
		if err := job.Run(ctx, a, "short", func(context.Context) error { return nil }, job.AtLeast(300*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		l, err := b.Lock(ctx, "short")
		if err != nil {
			t.Fatalf("Lock after a short AtLeast: %v", err)
		}
		l.Release(ctx)
	})
}

// AtMost cancels the job's context, releases the lock and makes Run report
// it.
func TestAtMost(t *testing.T) {
	eachStore(t, func(t *testing.T, url string) {
		ctx := testCtx(t)
		a, b := open(t, url), open(t, url)
		var cause error
		err := job.Run(ctx, a, "report", func(jctx context.Context) error {
			<-jctx.Done()
			cause = context.Cause(jctx)
			return nil
		}, job.AtMost(300*time.Millisecond), job.WithLockOptions(dlock.WithTTL(time.Minute)))
		if !errors.Is(cause, dlock.ErrMaxHold) || !errors.Is(cause, dlock.ErrLost) {
			t.Errorf("the job's context ended with %v; want ErrMaxHold", cause)
		}
		if !errors.Is(err, dlock.ErrMaxHold) || !errors.Is(err, dlock.ErrLost) {
			t.Errorf("Run = %v; want ErrLost and ErrMaxHold", err)
		}
		// Released at once, not left to its minute-long lease.
		if err := job.Run(ctx, b, "report", func(context.Context) error { return nil }); err != nil {
			t.Errorf("Run after AtMost = %v; want nil", err)
		}
	})
}

// A lost lock cancels the job's context, and Run reports the loss.
func TestLoss(t *testing.T) {
	eachStore(t, func(t *testing.T, url string) {
		ctx := testCtx(t)
		a, b := open(t, url), open(t, url)
		var cause error
		err := job.Run(ctx, a, "report", func(jctx context.Context) error {
			if n, err := b.ForceRelease(ctx, "report"); n != 1 || err != nil {
				t.Errorf("ForceRelease = %d, %v", n, err)
			}
			<-jctx.Done()
			cause = context.Cause(jctx)
			return nil
		}, job.AtMost(time.Hour), job.WithLockOptions(dlock.WithTTL(300*time.Millisecond)))
		if !errors.Is(cause, dlock.ErrLost) || errors.Is(cause, dlock.ErrMaxHold) {
			t.Errorf("the job's context ended with %v; want ErrLost, not ErrMaxHold", cause)
		}
		if !errors.Is(err, dlock.ErrLost) {
			t.Errorf("Run = %v; want ErrLost", err)
		}
	})
}

// A job that panics releases its lock (or keeps it for AtLeast), and the
// panic goes on.
func TestPanic(t *testing.T) {
	eachStore(t, func(t *testing.T, url string) {
		ctx := testCtx(t)
		a, b := open(t, url), open(t, url)
		for _, atLeast := range []time.Duration{0, time.Hour} {
			key := fmt.Sprintf("report-%v", atLeast)
			func() {
				defer func() {
					if r := recover(); r != "boom" {
						t.Errorf("recovered %v; want the job's panic", r)
					}
				}()
				job.Run(ctx, a, key, func(context.Context) error { panic("boom") }, job.AtLeast(atLeast))
			}()
			err := job.Run(ctx, b, key, func(context.Context) error { return nil })
			switch {
			case atLeast == 0 && err != nil:
				t.Errorf("Run after a panic = %v; want the lock released", err)
			case atLeast > 0 && !errors.Is(err, job.ErrSkipped):
				t.Errorf("Run after a panic with AtLeast = %v; want ErrSkipped", err)
			}
		}
	})
}

// The job's context carries its lock.
func TestLock(t *testing.T) {
	ctx := testCtx(t)
	c := open(t, "mem://"+testsrv.DatabaseName(t.Name()))
	var l *dlock.Lock
	err := job.Run(ctx, c, "report", func(ctx context.Context) error {
		l = job.Lock(ctx)
		return nil
	})
	if err != nil || l == nil || l.Key() != "report" || l.Token() == 0 {
		t.Errorf("Run = %v, lock %v; want the job's lock", err, l)
	}
	if job.Lock(ctx) != nil {
		t.Error("Lock outside a job is not nil")
	}
}

func TestBadArguments(t *testing.T) {
	ctx := testCtx(t)
	c := open(t, "mem://"+testsrv.DatabaseName(t.Name()))
	fn := func(context.Context) error { return nil }
	for _, tt := range []struct {
		name string
		run  func() error
	}{
		{"ctx", func() error { return job.Run(bounds.NilContext, c, "k", fn) }},
		{"client", func() error { return job.Run(ctx, nil, "k", fn) }},
		{"fn", func() error { return job.Run(ctx, c, "k", nil) }},
		{"key", func() error { return job.Run(ctx, c, "", fn) }},
		{"at least", func() error { return job.Run(ctx, c, "k", fn, job.AtLeast(-time.Second)) }},
		{"at least", func() error { return job.Run(ctx, c, "k", fn, job.AtLeast(2*time.Second), job.AtMost(time.Second)) }},
		{"at most", func() error { return job.Run(ctx, c, "k", fn, job.AtMost(0)) }},
		{"at most", func() error { return job.Run(ctx, c, "k", fn, job.AtMost(-time.Second)) }},
		{"at most", func() error { return job.Run(ctx, c, "k", fn, job.AtMost(time.Nanosecond)) }},
		{"ttl", func() error { return job.Run(ctx, c, "k", fn, job.WithLockOptions(dlock.WithTTL(-time.Second))) }},
	} {
		err := tt.run()
		var ae *dlock.ArgError
		if !errors.As(err, &ae) || ae.Name != tt.name || !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: %v; want an *ArgError named %q", tt.name, err, tt.name)
		}
	}
}

// Acquire and Hold.Release take and give back a job's lock around work that
// a scheduler runs itself.
func TestAcquire(t *testing.T) {
	eachStore(t, func(t *testing.T, url string) {
		ctx := testCtx(t)
		a, b := open(t, url), open(t, url)
		h, err := job.Acquire(ctx, a, "report")
		if err != nil {
			t.Fatal(err)
		}
		if h.Lock().Key() != "report" || h.Lock().Cause() != nil {
			t.Errorf("Lock() = %q, %v; want the held lock", h.Lock().Key(), h.Lock().Cause())
		}
		if _, err := job.Acquire(ctx, b, "report"); !errors.Is(err, job.ErrSkipped) {
			t.Errorf("Acquire while held = %v; want ErrSkipped", err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		h, err = job.Acquire(ctx, b, "report", job.AtLeast(time.Hour))
		if err != nil {
			t.Fatalf("Acquire after Release: %v", err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := job.Acquire(ctx, a, "report"); !errors.Is(err, job.ErrSkipped) {
			t.Errorf("Acquire after a Release with AtLeast = %v; want ErrSkipped", err)
		}
	})
}
