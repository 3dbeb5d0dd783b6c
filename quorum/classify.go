package quorum

import (
	"errors"

	"github.com/dlockhq/dlock/internal/errclass"
)

// Permanent implements driver.Classifier. A quorum's failure is permanent
// when so many nodes failed permanently that no majority can answer, even
// if every other node recovers: more than len(nodes) - majority of them
// (two of three, three of five). Each node's error is classified by that
// node's driver, and by the checks that hold for every store (an untrusted
// TLS certificate); a node that failed permanently is one whose driver, of
// any node, calls its error permanent. A minority of nodes that refuse
// (a password changed on one server) leaves a majority that can still
// grant the lock once the others answer again: not permanent.
//
// It reads the nodes' errors from err, as Acquire, Refresh and Release
// report them (joined, one per failed node); an error that is not such a
// report (a context that ended, a closed driver) is not permanent.
func (d *Driver) Permanent(err error) bool {
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		return false
	}
	n := 0
	for _, e := range joined.Unwrap() {
		if d.nodePermanent(e) {
			n++
		}
	}
	return n > len(d.nodes)-d.quorum
}

// nodePermanent reports whether err, the failure of one node, is
// permanent by any node driver's classification.
func (d *Driver) nodePermanent(err error) bool {
	for _, n := range d.nodes {
		if errclass.Permanent(n, err) {
			return true
		}
	}
	return false
}
