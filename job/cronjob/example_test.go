package cronjob_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/job"
	"github.com/dlockhq/dlock/job/cronjob"
	"github.com/dlockhq/dlock/memdlock"
)

// Two hosts fire the nightly report: the first runs it, and the second,
// firing a moment later, skips it.
func Example() {
	store := memdlock.New() // in production: dlock.Open(ctx, "postgres://...") on every host
	logger := cron.VerbosePrintfLogger(log.New(os.Stdout, "", 0))
	for _, host := range []string{"host-a", "host-b"} {
		client, err := dlock.New(store.Share())
		if err != nil {
			panic(err)
		}
		defer client.Close()
		report := cronjob.Func(client, "nightly-report", func(ctx context.Context) error {
			fmt.Println(host, "builds the report")
			return nil
		}, logger, job.AtLeast(10*time.Minute))
		// c := cron.New(); c.AddJob("0 3 * * *", report); c.Start()
		report.Run() // what cron does at 03:00
	}
	// Output:
	// host-a builds the report
	// skipped, job=nightly-report, reason=job: skipped: lock not acquired: "nightly-report" is held
}
