package holds

import (
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExpire(t *testing.T) {
	got := make(chan string, 1)
	tb := New(func(owner string, v int) { got <- owner })
	defer tb.Close()
	tb.Put("a", 1, time.Millisecond)
	if owner := <-got; owner != "a" {
		t.Fatalf("expired %q; want a", owner)
	}
	if _, ok := tb.Get("a"); ok {
		t.Error("Get after expiry found the record")
	}
	if tb.Touch("a", time.Hour) || tb.Update("a", func(v int) int { return v }) {
		t.Error("Touch or Update of an expired record succeeded")
	}
	if _, ok := tb.Take("a"); ok {
		t.Error("Take after expiry found the record")
	}
}

func TestTakeCancelsDeadline(t *testing.T) {
	var calls atomic.Int32
	tb := New(func(string, int) { calls.Add(1) })
	tb.Put("a", 7, time.Hour)
	if !tb.Update("a", func(v int) int { return v + 1 }) {
		t.Fatal("Update failed")
	}
	if v, ok := tb.Get("a"); !ok || v != 8 {
		t.Fatalf("Get = %v, %v; want 8, true", v, ok)
	}
	if tb.Len() != 1 {
		t.Fatalf("Len = %d; want 1", tb.Len())
	}
	if v, ok := tb.Take("a"); !ok || v != 8 {
		t.Fatalf("Take = %v, %v; want 8, true", v, ok)
	}
	tb.Close()
	if calls.Load() != 0 || tb.Len() != 0 {
		t.Errorf("expire ran %d times, Len %d; want 0, 0", calls.Load(), tb.Len())
	}
}

// TestTouchReplacesDeadline checks that a touched record expires at its new
// deadline only: the old, shorter deadline has passed when the record is
// still there.
func TestTouchReplacesDeadline(t *testing.T) {
	got := make(chan int, 2)
	tb := New(func(_ string, v int) { got <- v })
	defer tb.Close()
	tb.Put("a", 1, time.Hour)
	tb.Put("b", 2, time.Hour)
	if !tb.Touch("a", time.Millisecond) {
		t.Fatal("Touch failed")
	}
	if v := <-got; v != 1 {
		t.Fatalf("expired %d; want 1", v)
	}
	if _, ok := tb.Get("b"); !ok {
		t.Error("untouched record b is gone")
	}
}

func TestCloseWaitsForExpire(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var done atomic.Bool
	tb := New(func(string, int) {
		close(started)
		<-release
		done.Store(true)
	})
	tb.Put("a", 1, time.Millisecond)
	tb.Put("b", 2, time.Hour)
	<-started
	go close(release)
	tb.Close()
	if !done.Load() {
		t.Error("Close returned while expire was running")
	}
	tb.Put("c", 3, time.Millisecond)
	if tb.Len() != 0 {
		t.Errorf("Len after Close = %d; want 0", tb.Len())
	}
}
