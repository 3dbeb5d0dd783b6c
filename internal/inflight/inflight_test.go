package inflight

import (
	"context"
	"errors"
	"testing"
)

// closedNow reports whether c is closed, without waiting.
func closedNow(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestTrackerIdle(t *testing.T) {
	var tr Tracker
	if !closedNow(tr.Idle()) {
		t.Fatal("a new Tracker is not idle")
	}
	tr.Add()
	tr.Add()
	idle := tr.Idle()
	tr.Done()
	if closedNow(idle) {
		t.Fatal("idle with one piece of work in flight")
	}
	tr.Done()
	<-idle
	tr.Add() // work again after a wait
	if closedNow(tr.Idle()) {
		t.Fatal("idle with work in flight after an earlier wait")
	}
	tr.Done()
	<-tr.Idle()
}

func TestPoolCloseWaitsForWorkers(t *testing.T) {
	var workers Tracker
	closing := make(chan struct{})
	p := Pool{Tasks: make(chan Task), Workers: &workers, Closing: closing, Idle: 1 << 62}
	release, ran := make(chan struct{}), make(chan int, 10)
	p.Go(func() { <-release; ran <- 0 })
	for i := 1; i < 10; i++ {
		p.Go(func() { ran <- i })
	}
	for range 9 {
		<-ran
	}
	close(closing)
	if closedNow(workers.Idle()) {
		t.Fatal("the workers left while a task still ran")
	}
	close(release)
	<-ran
	<-workers.Idle() // idle workers leave once Closing is closed
}

func TestCall(t *testing.T) {
	spawn := func(f func()) { go f() }
	run := func(t Task) { go t.Run() }
	var c Call[int]
	c.Start(run, context.Background(), nil, func(context.Context) (int, error) { return 7, nil })
	if v, err, ok := c.Wait(context.Background(), 0); v != 7 || err != nil || !ok {
		t.Fatalf("Wait = %d, %v, %v; want 7, nil, true", v, err, ok)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	release := make(chan struct{})
	var slow Call[int]
	slow.Start(run, ctx, nil, func(context.Context) (int, error) { <-release; return 8, errors.New("late") })
	if v, err, ok := slow.Wait(ctx, 0); v != 0 || !errors.Is(err, context.Canceled) || ok {
		t.Fatalf("Wait on an ended ctx = %d, %v, %v; want 0, context.Canceled, false", v, err, ok)
	}
	after := make(chan int)
	slow.Then(spawn, func(v int, err error) {
		if err == nil {
			t.Error("Then got no error")
		}
		after <- v
	})
	close(release)
	if v := <-after; v != 8 {
		t.Fatalf("Then got %d, want 8", v)
	}

	// The request's own context bounds the wait of a caller whose ctx
	// is live.
	own, cancelOwn := context.WithCancel(context.Background())
	cancelOwn()
	hung := make(chan struct{})
	defer close(hung)
	var bounded Call[int]
	bounded.Start(run, own, nil, func(context.Context) (int, error) { <-hung; return 9, nil })
	if v, err, ok := bounded.Wait(context.Background(), 0); v != 0 || !errors.Is(err, context.Canceled) || ok {
		t.Fatalf("Wait on a live ctx for a call whose context ended = %d, %v, %v; want 0, context.Canceled, false", v, err, ok)
	}
}

func TestOrder(t *testing.T) {
	var o Order[string]
	ctx := context.Background()
	acq := o.Enter("k", Acquire)
	if err := acq.Wait(ctx); err != nil {
		t.Fatalf("the first request waits: %v", err)
	}
	rel := o.Enter("k", Release)
	other := o.Enter("other", Acquire)
	if other.Wait(ctx) != nil {
		t.Fatal("a request of another key waits")
	}

	// Two requests in flight: an acquisition is refused, a release is not.
	busy := o.Enter("k", Acquire)
	if busy != nil || !errors.Is(busy.Wait(ctx), ErrBusy) {
		t.Fatalf("an acquisition behind two requests was not refused")
	}
	busy.End()
	ended, cancel := context.WithCancelCause(ctx)
	cause := errors.New("gave up")
	cancel(cause)
	if err := rel.Wait(ended); !errors.Is(err, cause) {
		t.Fatalf("a release's turn before the acquisition it follows ended: %v, want the ctx's cause", err)
	}
	rel2 := o.Enter("k", Release)
	acq.End()
	if err := rel.Wait(ctx); err != nil {
		t.Fatalf("the release's turn once the acquisition ended: %v", err)
	}
	if err := rel2.Wait(ended); !errors.Is(err, cause) {
		t.Fatalf("a release's turn before the release it follows ended: %v, want the ctx's cause", err)
	}

	// A clean-up right behind another is refused; behind a release it is not.
	c1 := o.Enter("k", Cleanup)
	if o.Enter("k", Cleanup) != nil {
		t.Fatal("a clean-up right behind another was not refused")
	}
	rel3 := o.Enter("k", Release)
	c2 := o.Enter("k", Cleanup)
	if c2 == nil {
		t.Fatal("a clean-up behind a release was refused")
	}
	for _, turn := range []*Turn{rel, rel2, c1, rel3, c2, other} {
		turn.End()
	}
	if len(o.keys) != 0 {
		t.Fatalf("%d keys left after every request ended", len(o.keys))
	}
}

// A release that gave up waiting for the acquisition ahead of it ends first;
// the clean-up entered behind it must still wait for the acquisition, or it
// would run before a late grant lands and leave that grant held.
func TestOrderGaveUpKeepsTheChain(t *testing.T) {
	var o Order[string]
	ctx := context.Background()
	acq := o.Enter("k", Acquire)
	rel := o.Enter("k", Release)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if rel.Wait(ended) == nil {
		t.Fatal("the release's turn came before the acquisition ended")
	}
	rel.End() // gave up
	cleanup := o.Enter("k", Cleanup)
	if closedNow(cleanup.prev) {
		t.Fatal("the clean-up's turn came while the acquisition was still in flight")
	}
	acq.End()
	if err := cleanup.Wait(ctx); err != nil {
		t.Fatalf("the clean-up's turn once the acquisition ended: %v", err)
	}
	cleanup.End()
	if len(o.keys) != 0 {
		t.Fatalf("%d keys left after every request ended", len(o.keys))
	}
}
