package redisdlock

import (
	"fmt"
	"testing"
	"time"
)

// TestQueuers checks the driver's record of the owners asked to queue: an
// owner is first once, until it is forgotten, and the record does not keep
// owners that neither were admitted nor released past the time the server
// forgets their entries.
func TestQueuers(t *testing.T) {
	var q queuers
	if !q.ask("a", time.Minute) {
		t.Error("first ask: not first")
	}
	if q.ask("a", time.Minute) {
		t.Error("second ask: first")
	}
	q.forget("a")
	if !q.ask("a", time.Minute) {
		t.Error("ask after forget: not first")
	}
	// Owners whose entries the server has forgotten for certain (a lease
	// ending before now less queueMemory) go in the next sweep.
	for i := range 100 {
		q.ask(fmt.Sprint("gone", i), -queueMemory-time.Second)
	}
	q.ask("b", time.Minute)
	if n := len(q.until); n > 64 {
		t.Errorf("%d owners kept; want those whose entries may live (a, b) and the ones asked since the sweep", n)
	}
	if _, ok := q.until["a"]; !ok {
		t.Error("a was dropped, its entry may live")
	}
}

// TestQueuersGranted checks that a hold handed to an owner counts only if
// its token is above the fencing counter that the owner's latest refused
// Acquire read (a smaller one was handed over before that Acquire ran, and
// has ended), and only once.
func TestQueuersGranted(t *testing.T) {
	var q queuers
	q.ask("a", time.Minute)
	q.refused("a", 5)
	if q.granted("a", 5) {
		t.Error("token 5 after counter 5: granted")
	}
	q.ask("a", time.Minute)
	q.refused("a", 7)
	if q.granted("a", 6) {
		t.Error("token 6 after counter 7: granted")
	}
	if !q.granted("a", 8) {
		t.Error("token 8 after counter 7: not granted")
	}
	if q.granted("a", 9) {
		t.Error("a second hand-over of one wait: granted")
	}
	if q.granted("b", 1) {
		t.Error("an owner never asked to queue: granted")
	}
}
