package cronjob_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/job"
	"github.com/dlockhq/dlock/job/cronjob"
	_ "github.com/dlockhq/dlock/redisdlock"
)

func TestMain(m *testing.M) { testsrv.Main(m, testsrv.Redis) }

// logged records what a job reported to its cron.Logger.
type logged struct {
	mu      sync.Mutex
	skipped int
	errs    []error
}

func (l *logged) Info(msg string, kv ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if msg == "skipped" {
		l.skipped++
	}
}

func (l *logged) Error(err error, msg string, kv ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func open(t *testing.T, url string) *dlock.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dlock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// once is a cron.Schedule that fires once, at once.
type once struct{ fired bool }

func (o *once) Next(now time.Time) time.Time {
	if o.fired {
		return time.Time{} // never again
	}
	o.fired = true
	return now
}

// Hosts whose crons fire the same job run it once; the others log a skip.
func TestOncePerFiring(t *testing.T) {
	const n = 4
	url := testsrv.Get(t, testsrv.Redis).URL + "?prefix=" + testsrv.DatabaseName(t.Name()) + ":"
	var log logged
	var wg sync.WaitGroup
	wg.Add(n)
	var mu sync.Mutex
	ran := 0
	for i := range n {
		client := open(t, url)
		var j cron.Job
		if i%2 == 0 {
			j = cronjob.Func(client, "report", func(context.Context) error {
				mu.Lock()
				ran++
				mu.Unlock()
				return nil
			}, &log, job.AtLeast(time.Hour))
		} else {
			j = cron.NewChain(cronjob.Wrap(client, "report", &log, job.AtLeast(time.Hour))).Then(cron.FuncJob(func() {
				mu.Lock()
				ran++
				mu.Unlock()
			}))
		}
		c := cron.New()
		c.Schedule(&once{}, cron.FuncJob(func() {
			defer wg.Done()
			j.Run()
		}))
		c.Start()
		t.Cleanup(func() { <-c.Stop().Done() })
	}
	wg.Wait()
	if ran != 1 || log.skipped != n-1 || len(log.errs) != 0 {
		t.Errorf("ran %d times, skipped %d times, errors %v; want 1, %d and none", ran, log.skipped, log.errs, n-1)
	}
}

// A job that fails is logged as an error, and its lock is released.
func TestError(t *testing.T) {
	url := testsrv.Get(t, testsrv.Redis).URL + "?prefix=" + testsrv.DatabaseName(t.Name()) + ":"
	client := open(t, url)
	var log logged
	boom := errors.New("boom")
	j := cronjob.Func(client, "report", func(context.Context) error { return boom }, &log)
	j.Run()
	j.Run()
	if len(log.errs) != 2 || !errors.Is(log.errs[0], boom) || log.skipped != 0 {
		t.Errorf("errors %v, skipped %d; want boom twice", log.errs, log.skipped)
	}
}
