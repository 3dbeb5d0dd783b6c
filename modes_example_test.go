package dlock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memdlock"
)

func ExampleShared() {
	ctx := context.Background()
	client, _ := dlock.New(memdlock.New())
	defer client.Close()

	// The write side: readers wait until it is released or downgraded.
	w, _ := client.Lock(ctx, "catalog")
	_, err := client.TryLock(ctx, "catalog", dlock.Shared())
	fmt.Println("reader while writing:", errors.Is(err, dlock.ErrNotAcquired))

	// Publish, then keep reading what was written without letting a
	// writer in between: same lock, same token.
	w.Downgrade(ctx)
	r, err := client.TryLock(ctx, "catalog", dlock.Shared())
	fmt.Println("reader after downgrade:", err == nil, w.Mode(), r.Mode())
	r.Release(ctx)
	w.Release(ctx)
	// Output:
	// reader while writing: true
	// reader after downgrade: true shared shared
}

func ExampleWithLimit() {
	ctx := context.Background()
	client, _ := dlock.New(memdlock.New())
	defer client.Close()

	// Three permits: each is a lease of its own, which returns when its
	// holder releases it or stops renewing it.
	var permits []*dlock.Lock
	for range 3 {
		p, _ := client.TryLock(ctx, "warehouse-export", dlock.WithLimit(3))
		permits = append(permits, p)
	}
	_, err := client.TryLock(ctx, "warehouse-export", dlock.WithLimit(3))
	fmt.Println("fourth permit:", errors.Is(err, dlock.ErrNotAcquired))
	_, err = client.TryLock(ctx, "warehouse-export", dlock.WithLimit(5))
	fmt.Println("another limit:", errors.Is(err, dlock.ErrModeMismatch))
	for _, p := range permits {
		p.Release(ctx)
	}
	// Output:
	// fourth permit: true
	// another limit: true
}

func ExampleClient_LockAll() {
	ctx := context.Background()
	store := memdlock.New()
	alice, _ := dlock.New(store.Share())
	defer alice.Close()
	bob, _ := dlock.New(store.Share())
	defer bob.Close()

	// A transfer locks both accounts, whatever order they are named in.
	m, _ := alice.LockAll(ctx, []string{"account:2", "account:1"})
	for _, l := range m.Locks() {
		fmt.Println("alice holds", l.Key())
	}
	// All or none: bob's set overlaps, so he takes nothing, not even
	// account:3.
	_, err := bob.TryLockAll(ctx, []string{"account:3", "account:1"})
	fmt.Println("bob:", errors.Is(err, dlock.ErrNotAcquired))
	m.Release(ctx)
	fmt.Println("records left:", store.Count(""))
	// Output:
	// alice holds account:1
	// alice holds account:2
	// bob: true
	// records left: 0
}

func ExampleFair() {
	ctx := context.Background()
	client, _ := dlock.New(memdlock.New())
	defer client.Close()

	// Waiters acquire in the order they asked, where the store queues
	// them; elsewhere Fair is refused rather than silently ignored.
	l, err := client.Lock(ctx, "ticket:42", dlock.Fair())
	fmt.Println(err, l.Key())
	l.Release(ctx)
	// Output: <nil> ticket:42
}
