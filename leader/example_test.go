package leader_test

import (
	"context"
	"fmt"
	"log"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/leader"
	_ "github.com/dlockhq/dlock/memdlock"
)

// A scheduler process campaigns for the lead, works while its term lasts and
// resigns when it shuts down. Every write it makes carries the term number,
// so that the store it writes to can turn away a leader whose term has
// ended.
func ExampleCampaign() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, "mem://example-campaign") // or postgres://, redis://, etcd://, ...
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	term, err := leader.Campaign(ctx, client, "scheduler", "10.0.0.7:8080")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("leading as %s\n", term.Value())

	work := func(ctx context.Context, fence uint64) error { return nil } // stops when ctx ends
	if err := work(term.Context(), term.Token()); err != nil {
		log.Print(err)
	}
	if err := term.Resign(ctx); err != nil {
		log.Print(err)
	}
	fmt.Println("resigned:", term.Context().Err() != nil)
	// Output:
	// leading as 10.0.0.7:8080
	// resigned: true
}

// Followers watch who leads, to send it their requests.
func ExampleObserve() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := dlock.Open(ctx, "mem://example-observe")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	leaders, err := leader.Observe(ctx, client, "scheduler")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("elected:", (<-leaders).Elected())

	term, err := leader.Campaign(ctx, client, "scheduler", "10.0.0.7:8080")
	if err != nil {
		log.Fatal(err)
	}
	l := <-leaders
	fmt.Println("leader:", l.Value, l.Term == term.Number())

	term.Resign(ctx)
	fmt.Println("elected:", (<-leaders).Elected())
	// Output:
	// elected: false
	// leader: 10.0.0.7:8080 true
	// elected: false
}
