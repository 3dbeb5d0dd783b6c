package redisdlock

import (
	"strconv"
	"strings"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// Handoff without confirmation.
//
// A release that leaves no holder hands the lock to the writer at the head
// of the queue (grant in scripts/release.lua) and signals it with the
// message "TOKEN LEASE": the hold's fencing token and its lease in ms, which
// started when the release ran. A queued waiter's refused Acquire returns
// the lock's fencing counter, which the driver keeps (queuers.refused). A
// message whose token is above it reports a hold handed over after that
// Acquire ran, and so after it was sent: the hold lasts at least LEASE from
// the moment that Acquire was sent, which package dlock knows. The waiter
// then holds the lock without another round trip (driver.Granter), and its
// first renewal, at once, extends the hold to the waiter's own lease. A
// message with a smaller token is an older hand-over that has ended since
// (the refused Acquire came after it), and is ignored; so is every message
// after a refused Acquire whose answer was lost, since package dlock then
// does not ask.

// granted returns the hold that payload, a message on the channel of the
// waiter req, handed to it, if it came after the waiter's latest refused
// Acquire.
func (d *Driver) granted(req driver.Request, payload string) (driver.Result, bool) {
	t, l, ok := strings.Cut(payload, " ")
	token, err1 := strconv.ParseInt(t, 10, 64)
	lease, err2 := strconv.ParseInt(l, 10, 64)
	if !ok || err1 != nil || err2 != nil || token < 1 || lease < 1 || !d.queuers.granted(req.Owner, token) {
		return driver.Result{}, false
	}
	return driver.Result{Acquired: true, Token: uint64(token), TTL: min(time.Duration(lease)*time.Millisecond, req.TTL)}, true
}
