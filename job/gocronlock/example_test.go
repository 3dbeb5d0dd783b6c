package gocronlock_test

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/job"
	"github.com/dlockhq/dlock/job/gocronlock"
	"github.com/dlockhq/dlock/memdlock"
)

// Two schedulers, as on two hosts, fire the same job: one runs it and the
// other skips.
func Example() {
	store := memdlock.New() // in production: dlock.Open(ctx, "redis://...") on every host
	outcomes := make(chan string, 2)
	for range 2 {
		client, err := dlock.New(store.Share())
		if err != nil {
			panic(err)
		}
		defer client.Close()
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(
			gocronlock.New(client, job.AtLeast(time.Minute), job.AtMost(time.Hour))))
		if err != nil {
			panic(err)
		}
		defer s.Shutdown()
		_, err = s.NewJob(
			gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
			gocron.NewTask(func() { /* build the report */ }),
			gocron.WithName("nightly-report"),
			gocron.WithEventListeners(
				gocron.AfterJobRuns(func(uuid.UUID, string) { outcomes <- "ran" }),
				gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
					if errors.Is(err, job.ErrSkipped) {
						outcomes <- "skipped"
					}
				}),
			))
		if err != nil {
			panic(err)
		}
		s.Start()
	}
	got := []string{<-outcomes, <-outcomes}
	slices.Sort(got)
	fmt.Println(got)
	// Output: [ran skipped]
}
