package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memdlock"
)

// TestHolders checks that Holders lists the holders of exactly its key, not
// those of keys that start with it, with their modes and tokens, and nothing
// once they released.
func TestHolders(t *testing.T) {
	store := memdlock.New()
	a, b := newClient(t, store.Share()), newClient(t, store.Share())
	ctx := t.Context()
	r1, err := a.Lock(ctx, "k", dlock.Shared())
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.Lock(ctx, "k", dlock.Shared())
	if err != nil {
		t.Fatal(err)
	}
	longer, err := a.Lock(ctx, "k2") // shares the prefix "k"
	if err != nil {
		t.Fatal(err)
	}
	hs, err := b.Holders(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 {
		t.Fatalf("Holders(k) = %+v; want the two readers of k only", hs)
	}
	want := map[uint64]string{r1.Token(): r1.OwnerID(), r2.Token(): r2.OwnerID()}
	for _, h := range hs {
		if h.Key != "k" || h.Mode != dlock.ModeShared || want[h.Token] != h.Owner || h.TTL <= 0 {
			t.Errorf("holder %+v; want a reader of k with one of the tokens and owners %v and a lease left", h, want)
		}
	}
	for _, l := range []*dlock.Lock{r1, r2, longer} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if hs, err := a.Holders(ctx, "k"); err != nil || len(hs) != 0 {
		t.Errorf("Holders after the releases = %+v, %v; want none", hs, err)
	}
	if _, err := a.Holders(ctx, ""); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Holders of an empty key: %v; want ErrInvalidArgument", err)
	}
}

// TestHoldCount checks that HoldCount counts the acquisition and each
// re-entry not yet released, and is 0 once the lock ended.
func TestHoldCount(t *testing.T) {
	c := newClient(t, memdlock.New())
	ctx := t.Context()
	l, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if n := l.HoldCount(); n != 1 {
		t.Errorf("HoldCount after Lock = %d; want 1", n)
	}
	for want := 2; want <= 3; want++ {
		if _, err := c.Lock(l.Context(), "k"); err != nil {
			t.Fatal(err)
		}
		if n := l.HoldCount(); n != want {
			t.Errorf("HoldCount after re-entry = %d; want %d", n, want)
		}
	}
	for want := 2; want >= 0; want-- {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n := l.HoldCount(); n != want {
			t.Errorf("HoldCount after a Release = %d; want %d", n, want)
		}
	}
}

// Who holds a key, and how often this process has re-entered its own lock.
func ExampleClient_Holders() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, "mem://example-holders")
	if err != nil {
		panic(err)
	}
	defer client.Close()

	l, err := client.Lock(ctx, "invoice:42", dlock.WithInfo("billing-worker-1"))
	if err != nil {
		panic(err)
	}
	defer l.Release(ctx)
	inner, err := client.Lock(l.Context(), "invoice:42") // re-enters l
	if err != nil {
		panic(err)
	}
	fmt.Println("hold count:", l.HoldCount())
	inner.Release(ctx)
	fmt.Println("hold count:", l.HoldCount())

	holders, err := client.Holders(ctx, "invoice:42")
	if err != nil {
		panic(err)
	}
	for _, h := range holders {
		fmt.Println(h.Key, h.Mode, h.Info, h.Owner == l.OwnerID())
	}
	// Output:
	// hold count: 2
	// hold count: 1
	// invoice:42 exclusive billing-worker-1 true
}
