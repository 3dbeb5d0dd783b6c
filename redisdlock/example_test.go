package redisdlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/redisdlock"
)

// A Client from a URL: the driver opens (and the Client closes) its own
// go-redis client. rediss://, redis+sentinel:// and redis+cluster:// URLs
// work alike.
func Example() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, "redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	// Hold a phone number for a buyer for up to 15 minutes: one attempt,
	// no waiting.
	lock, err := client.TryLock(ctx, "number:+4930123456", dlock.WithTTL(15*time.Minute), dlock.WithoutRenewal())
	if errors.Is(err, dlock.ErrNotAcquired) {
		fmt.Println("someone else is buying this number")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)
	fmt.Println("reserved with fencing token", lock.Token())
}

// A driver over a go-redis client the program already has. The Client does
// not close it. MaxRetries -1 keeps go-redis from running a release twice
// after a network error, and ContextTimeoutEnabled applies context deadlines
// to reads (see New).
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()

	d, err := redisdlock.New(rdb, redisdlock.WithPrefix("myapp:locks:"))
	if err != nil {
		log.Fatal(err)
	}
	client, err := dlock.New(d)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	// Wait up to 5 seconds for the lock, then run under it; ctx of the
	// function ends if the lock is lost.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = client.Do(ctx, "cache-fill:user:7", func(ctx context.Context, l *dlock.Lock) error {
		return rdb.Set(ctx, "cache:user:7", "filled", time.Hour).Err()
	})
	if err != nil {
		log.Fatal(err)
	}
}
