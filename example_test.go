package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memdlock"
)

func Example() {
	ctx := context.Background()
	// In production: dlock.Open(ctx, "postgres://...") or another backend.
	client, err := dlock.New(memdlock.New())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	lock, err := client.Lock(ctx, "order:42", dlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)

	// Pass the fencing token to the resource you write to, and stop
	// working when lock.Context() is done.
	fmt.Println("holding", lock.Key(), "with token", lock.Token())
	// Output: holding order:42 with token 1
}

func ExampleClient_TryLock() {
	ctx := context.Background()
	client, _ := dlock.New(memdlock.New())
	defer client.Close()

	first, _ := client.TryLock(ctx, "report")
	_, err := client.TryLock(ctx, "report")
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))
	first.Release(ctx)
	// Output: true
}

func ExampleClient_Lock_timeout() {
	ctx := context.Background()
	client, _ := dlock.New(memdlock.New())
	defer client.Close()

	held, _ := client.Lock(ctx, "phone:13800000000")
	defer held.Release(ctx)

	wait, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err := client.Lock(wait, "phone:13800000000")
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded))
	// Output: true true
}

func ExampleClient_Do() {
	ctx := context.Background()
	client, _ := dlock.New(memdlock.New())
	defer client.Close()

	err := client.Do(ctx, "nightly-report", func(ctx context.Context, l *dlock.Lock) error {
		// ctx is cancelled if the lock is lost: pass it to every call.
		fmt.Println("running with token", l.Token())
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// running with token 1
	// err: <nil>
}

func ExampleLock_Context() {
	ctx := context.Background()
	client, _ := dlock.New(memdlock.New())
	defer client.Close()

	lock, _ := client.Lock(ctx, "k", dlock.WithTTL(50*time.Millisecond), dlock.WithoutRenewal())
	<-lock.Context().Done() // the lease ran out and nothing renewed it
	fmt.Println(errors.Is(context.Cause(lock.Context()), dlock.ErrLost))
	// Output: true
}

// A payment hold: one server holds a phone number for a buyer for 15
// minutes and returns; the payment confirmation reaches another server,
// which extends the hold or releases it with the hold ID. Here the two
// servers are two Clients of one in-process store; in production they are
// processes that share a store such as PostgreSQL or Redis.
func ExampleClient_Resume() {
	ctx := context.Background()
	store := memdlock.New()

	// Server A, handling the order: hold the number, keep the hold ID
	// with the order (it is a secret: never log it), and let go.
	serverA, _ := dlock.New(store.Share())
	hold, err := serverA.TryLock(ctx, "phone:13800000000", dlock.WithTTL(15*time.Minute), dlock.WithoutRenewal())
	if err != nil {
		log.Fatal(err) // the number is held for another buyer
	}
	holdID := hold.HoldID()
	if err := hold.Detach(); err != nil {
		log.Fatal(err) // etcd, ZooKeeper: holds end with their client
	}
	serverA.Close() // the hold stays: it ends with its lease

	// Server B, on the payment provider's callback.
	serverB, _ := dlock.New(store.Share())
	defer serverB.Close()
	_, err = serverB.TryLock(ctx, "phone:13800000000")
	fmt.Println("held for the buyer:", errors.Is(err, dlock.ErrNotAcquired))

	// Payment pending: 10 more minutes from now.
	l, err := serverB.Resume(ctx, holdID, dlock.WithTTL(10*time.Minute), dlock.WithoutRenewal())
	if err != nil {
		log.Fatal(err) // errors.Is(err, dlock.ErrNotHeld): the hold ended
	}
	if err := l.Detach(); err != nil {
		log.Fatal(err)
	}

	// Payment confirmed: sell the number, then release the hold.
	l, err = serverB.Resume(ctx, holdID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("selling with fencing token", l.Token())
	fmt.Println("released:", l.Release(ctx) == nil)

	// The hold ID is spent.
	_, err = serverB.Resume(ctx, holdID)
	fmt.Println("spent:", errors.Is(err, dlock.ErrNotHeld))
	// Output:
	// held for the buyer: true
	// selling with fencing token 1
	// released: true
	// spent: true
}

// Idempotent consumption: a queue that delivers at least once may hand the
// same message to two consumers. Each consumer takes the message's lock
// with TryLock; the one that gets it processes the message and then keeps
// the lock for the deduplication window with ReleaseAfter, so a redelivery
// within the window is skipped, whichever consumer it reaches.
func ExampleLock_ReleaseAfter_idempotentConsumer() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, "mem://example-consumer") // the fleet's shared store
	if err != nil {
		panic(err)
	}
	defer client.Close()

	consume := func(consumer, messageID string) {
		l, err := client.TryLock(ctx, "msg:"+messageID)
		if errors.Is(err, dlock.ErrNotAcquired) {
			fmt.Printf("%s: %s already taken, skipped\n", consumer, messageID)
			return
		} else if err != nil {
			panic(err)
		}
		fmt.Printf("%s: processing %s\n", consumer, messageID)
		// Keep the key for ten minutes after the work: redeliveries
		// in that window find it taken.
		if err := l.ReleaseAfter(ctx, 10*time.Minute); err != nil {
			panic(err)
		}
	}
	consume("consumer-a", "m-1001")
	consume("consumer-b", "m-1001") // redelivered
	consume("consumer-b", "m-1002")
	// Output:
	// consumer-a: processing m-1001
	// consumer-b: m-1001 already taken, skipped
	// consumer-b: processing m-1002
}
