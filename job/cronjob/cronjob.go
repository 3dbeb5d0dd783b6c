// Package cronjob lets robfig/cron (github.com/robfig/cron/v3) schedulers on
// many hosts run each job at most once per firing, with a dlock lock per job,
// through package job.
//
//	c := cron.New()
//	c.AddJob("0 3 * * *", cronjob.Func(client, "nightly-report", buildReport, logger,
//		job.AtLeast(time.Minute), job.AtMost(time.Hour)))
//
//	// or, for a cron.Job you already have:
//	c.AddJob("0 3 * * *", cron.NewChain(cronjob.Wrap(client, "nightly-report", logger,
//		job.AtLeast(time.Minute))).Then(reportJob))
//
// Each firing makes one attempt at the job's lock: the host that gets it runs
// the job, the others skip that firing (logged at Info level as "skipped").
// A job that fails is logged at Error level. See package job for AtLeast,
// AtMost and what a lost lock does.
//
// This package is a module of its own, so that dlock's users do not download
// robfig/cron unless they use it.
package cronjob

import (
	"context"
	"errors"

	"github.com/robfig/cron/v3"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/job"
)

// Func returns a cron.Job that runs fn with job.Run under the lock named
// name each time it fires. fn's context ends when the lock is lost or
// reaches job.AtMost. Skips and errors go to logger (nil discards them).
func Func(client *dlock.Client, name string, fn func(ctx context.Context) error, logger cron.Logger, opts ...job.Option) cron.Job {
	if logger == nil {
		logger = cron.DiscardLogger
	}
	return cron.FuncJob(func() {
		err := job.Run(context.Background(), client, name, fn, opts...)
		switch {
		case errors.Is(err, job.ErrSkipped):
			logger.Info("skipped", "job", name, "reason", err.Error())
		case err != nil:
			logger.Error(err, "job failed", "job", name)
		}
	})
}

// Wrap returns a cron.JobWrapper that runs the job it wraps under the lock
// named name, as Func does. The wrapped job cannot see its lock: a lost lock
// or job.AtMost releases it for the next firing without stopping the job.
// Use Func for a job that must stop then.
func Wrap(client *dlock.Client, name string, logger cron.Logger, opts ...job.Option) cron.JobWrapper {
	return func(j cron.Job) cron.Job {
		return Func(client, name, func(context.Context) error {
			j.Run()
			return nil
		}, logger, opts...)
	}
}
