package gocronlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/job"
	"github.com/dlockhq/dlock/job/gocronlock"
	_ "github.com/dlockhq/dlock/redisdlock"
)

func TestMain(m *testing.M) { testsrv.Main(m, testsrv.Redis) }

// outcome is what one scheduler made of a firing: ran, or the lock error.
type outcome struct {
	ran bool
	err error
}

// schedule starts a scheduler with its own Client on url and a one-time job
// named name that fires at once, and reports its outcome on out.
func schedule(t *testing.T, url, name string, out chan<- outcome, opts ...job.Option) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := dlock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(gocronlock.New(client, opts...)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown() }) // before the Client closes
	_, err = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()), gocron.NewTask(func() {}),
		gocron.WithName(name),
		gocron.WithEventListeners(
			gocron.AfterJobRuns(func(uuid.UUID, string) { out <- outcome{ran: true} }),
			gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) { out <- outcome{err: err} }),
		))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
}

// Schedulers on several hosts that fire the same job run it once; the others
// skip with job.ErrSkipped, and AtLeast keeps a later firing out.
func TestOncePerFiring(t *testing.T) {
	const n = 4
	url := testsrv.Get(t, testsrv.Redis).URL + "?prefix=" + testsrv.DatabaseName(t.Name()) + ":"
	out := make(chan outcome, n+1)
	for range n {
		schedule(t, url, "report", out, job.AtLeast(time.Hour))
	}
	ran := 0
	for range n {
		o := <-out
		switch {
		case o.ran:
			ran++
		case !errors.Is(o.err, job.ErrSkipped):
			t.Errorf("lock error %v; want ErrSkipped", o.err)
		}
	}
	if ran != 1 {
		t.Errorf("the job ran %d times; want once", ran)
	}
	// A scheduler that fires after the run has ended skips too.
	schedule(t, url, "report", out)
	if o := <-out; !errors.Is(o.err, job.ErrSkipped) {
		t.Errorf("a later firing: ran %v, lock error %v; want ErrSkipped", o.ran, o.err)
	}
}

// Without AtLeast the lock is released when the job has run, and the next
// firing runs it again.
func TestUnlock(t *testing.T) {
	url := testsrv.Get(t, testsrv.Redis).URL + "?prefix=" + testsrv.DatabaseName(t.Name()) + ":"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := dlock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	locker := gocronlock.New(client)
	for range 2 {
		l, err := locker.Lock(ctx, "report")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := locker.Lock(ctx, "report"); !errors.Is(err, job.ErrSkipped) {
			t.Errorf("Lock while locked = %v; want ErrSkipped", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := gocronlock.New(client, job.AtMost(-time.Second)).Lock(ctx, "report"); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Lock with a bad option = %v; want ErrInvalidArgument", err)
	}
}
