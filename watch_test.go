package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/memdlock"
)

// TestWatchEnds ends watches by their context and by closing their Client:
// the channel is closed, and a closed Client refuses to watch.
func TestWatchEnds(t *testing.T) {
	c, err := dlock.New(memdlock.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(dlocktest.Ctx(t))
	released, err := c.Watch(ctx, "k", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Watch(dlocktest.Ctx(t), "k", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	watchEnded(t, released, "the watch whose context ended")
	c.Close()
	watchEnded(t, other, "the watch of a closed Client")
	if _, err := c.Watch(dlocktest.Ctx(t), "k", time.Hour); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Watch on a closed Client = %v; want ErrClosed", err)
	}
}

// watchEnded waits for the watch's channel to close, taking the values before.
func watchEnded(t *testing.T, released <-chan struct{}, what string) {
	t.Helper()
	timeout := time.After(30 * time.Second) // a bound, not a measurement
	for {
		select {
		case _, ok := <-released:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatalf("%s did not end", what)
		}
	}
}

func TestWatchBadInput(t *testing.T) {
	c, err := dlock.New(memdlock.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := dlocktest.Ctx(t)
	for _, tc := range []struct {
		name, arg string
		ctx       context.Context
		key       string
		poll      time.Duration
	}{
		{"nil context", "ctx", nil, "k", time.Second},
		{"empty key", "key", ctx, "", time.Second},
		{"key with NUL", "key", ctx, "a\x00", time.Second},
		{"zero poll", "poll", ctx, "k", 0},
		{"negative poll", "poll", ctx, "k", -time.Second},
	} {
		var ae *dlock.ArgError
		if _, err := c.Watch(tc.ctx, tc.key, tc.poll); !errors.As(err, &ae) || ae.Name != tc.arg {
			t.Errorf("%s: %v; want an *ArgError for %s", tc.name, err, tc.arg)
		}
	}
}

// Wait until another holder of a key releases it, without taking it.
func ExampleClient_Watch() {
	ctx := context.Background()
	client, err := dlock.New(memdlock.New())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	l, err := client.Lock(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	released, err := client.Watch(wctx, "report", time.Second)
	if err != nil {
		log.Fatal(err)
	}
	go l.Release(ctx) // elsewhere, the holder is done
	for range released {
		// Look again: a value may also mean "poll now".
		if hs, err := client.Holders(ctx, "report"); err == nil && len(hs) == 0 {
			fmt.Println("report is free")
			break
		}
	}
	// Output: report is free
}
