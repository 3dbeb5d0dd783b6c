package notify

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func signalled(s *Sub) bool {
	select {
	case <-s.C():
		return true
	default:
		return false
	}
}

func TestHub(t *testing.T) {
	var h Hub
	a1, a2, b := h.Subscribe("a"), h.Subscribe("a"), h.Subscribe("b")
	h.Notify("a")
	h.Notify("a") // coalesces with the pending signal
	if !signalled(a1) || !signalled(a2) || signalled(b) {
		t.Fatal("Notify(a) must signal exactly the subscriptions of a")
	}
	if signalled(a1) {
		t.Fatal("two notifications before a receive must coalesce into one signal")
	}
	h.NotifyAll()
	if !signalled(a1) || !signalled(a2) || !signalled(b) {
		t.Fatal("NotifyAll must signal every subscription")
	}
	a1.Close()
	a1.Close()
	h.Notify("a")
	if signalled(a1) || !signalled(a2) {
		t.Fatal("a closed subscription must not be signalled")
	}
	a2.Close()
	b.Close()
	if n := h.Len(); n != 0 || len(h.subs) != 0 {
		t.Fatalf("%d subscriptions (%d keys) left after closing all; want none", n, len(h.subs))
	}
}

// TestHubKeys checks a subscription to several keys: any of them signals
// it, it counts once, and Close removes it from every key.
func TestHubKeys(t *testing.T) {
	var h Hub
	ab, b := h.Subscribe("a", "b"), h.Subscribe("b")
	if n := h.Len(); n != 2 {
		t.Fatalf("Len = %d; want 2", n)
	}
	h.Notify("a")
	if !signalled(ab) || signalled(b) {
		t.Fatal("Notify(a) must signal exactly the subscription of a and b")
	}
	h.Notify("b")
	if !signalled(ab) || !signalled(b) {
		t.Fatal("Notify(b) must signal both subscriptions")
	}
	ab.Close()
	h.Notify("a")
	h.Notify("b")
	if signalled(ab) || !signalled(b) {
		t.Fatal("a closed subscription must not be signalled")
	}
	b.Close()
	if n := h.Len(); n != 0 || len(h.subs) != 0 {
		t.Fatalf("%d subscriptions (%d keys) left after closing all; want none", n, len(h.subs))
	}
}
