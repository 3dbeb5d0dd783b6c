package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/memdlock"
	"github.com/dlockhq/dlock/quorum"
)

// A quorum lock over three independent stores. In production the nodes are
// separate Redis servers (redisdlock drivers, or the redlock:// URL); here
// they are in-memory stores, so the example runs anywhere.
func Example() {
	ctx := context.Background()
	nodes := []driver.Driver{memdlock.New(), memdlock.New(), memdlock.New()}
	q, err := quorum.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	c, err := dlock.New(q) // the Client owns q, and q owns the nodes
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	l, err := c.Lock(ctx, "report:nightly", dlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("held %s on %d of %d nodes at least\n", l.Key(), q.Quorum(), q.Nodes())

	_, err = c.TryLock(ctx, "report:nightly")
	fmt.Println("second TryLock not acquired:", errors.Is(err, dlock.ErrNotAcquired))

	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}
	caps := c.Capabilities()
	fmt.Println("durable tokens:", caps.DurableTokens, "consensus:", caps.Consensus)
	// Output:
	// held report:nightly on 2 of 3 nodes at least
	// second TryLock not acquired: true
	// durable tokens: false consensus: false
}
