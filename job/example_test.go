package job_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/job"
	"github.com/dlockhq/dlock/memdlock"
)

// Two instances fire the same nightly job: the first runs it, and AtLeast
// keeps the second, which fires a moment later, from running it again.
func ExampleRun() {
	store := memdlock.New() // in production: dlock.Open(ctx, "postgres://...") on every host
	ctx := context.Background()
	for _, instance := range []string{"host-a", "host-b"} {
		client, err := dlock.New(store.Share(), dlock.WithOwnerInfo(instance))
		if err != nil {
			panic(err)
		}
		err = job.Run(ctx, client, "nightly-report", func(ctx context.Context) error {
			fmt.Println(instance, "builds the report")
			return nil
		}, job.AtLeast(10*time.Minute), job.AtMost(time.Hour))
		switch {
		case errors.Is(err, job.ErrSkipped):
			fmt.Println(instance, "skips: another instance has it")
		case err != nil:
			fmt.Println(instance, "failed:", err)
		}
		client.Close()
	}
	// Output:
	// host-a builds the report
	// host-b skips: another instance has it
}

// A job that runs past AtMost has its context cancelled, and the lock is
// released for the next firing.
func ExampleAtMost() {
	client, err := dlock.New(memdlock.New())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	err = job.Run(context.Background(), client, "sync", func(ctx context.Context) error {
		<-ctx.Done() // a job stuck on a hung server
		fmt.Println("stopped:", errors.Is(context.Cause(ctx), dlock.ErrMaxHold))
		return nil
	}, job.AtMost(100*time.Millisecond))
	fmt.Println("lost:", errors.Is(err, dlock.ErrLost))
	// Output:
	// stopped: true
	// lost: true
}
