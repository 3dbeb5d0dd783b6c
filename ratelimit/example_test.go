package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memdlock"
	"github.com/dlockhq/dlock/ratelimit"
)

// Cap calls to a partner's API at 3 per minute, across every process that
// shares the store (here an in-process one; use dlock.Open with the URL of a
// shared store in production).
func Example() {
	ctx := context.Background()
	client, _ := dlock.New(memdlock.New())
	defer client.Close()

	limiter, err := ratelimit.New(client, "partner-api", 3, time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := range 5 {
		ok, err := limiter.Allow(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		if !ok {
			fmt.Printf("call %d: over the limit, skipped\n", i+1)
			continue
		}
		fmt.Printf("call %d: sent\n", i+1)
	}

	// Wait blocks until the oldest slot frees, a minute after it was
	// taken; here the caller gives up sooner.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	fmt.Println("wait:", limiter.Wait(wctx) != nil)
	// Output:
	// call 1: sent
	// call 2: sent
	// call 3: sent
	// call 4: over the limit, skipped
	// call 5: over the limit, skipped
	// wait: true
}

func ExampleNew() {
	client, _ := dlock.New(memdlock.New())
	defer client.Close()

	_, err := ratelimit.New(client, "partner-api", 0, time.Minute)
	fmt.Println(err)
	// Output:
	// dlock: invalid argument n=0: must be at least 1
}
