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
