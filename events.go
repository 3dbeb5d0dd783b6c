package dlock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// acquisitionIDs numbers the acquisitions of the process (Event.ID).
var acquisitionIDs atomic.Uint64

func nextAcquisitionID() uint64 { return acquisitionIDs.Add(1) }

// acquisition is one acquisition as observers see it: it was reported with
// EventAcquiring and ends with EventAcquired or EventNotAcquired.
type acquisition struct {
	id    uint64
	ctx   context.Context
	key   string
	mode  Mode
	limit int
	begin time.Time
}

// starting reports the start of an acquisition of key and returns it.
func (c *Client) starting(ctx context.Context, key string, mode Mode, limit int) acquisition {
	a := acquisition{id: nextAcquisitionID(), ctx: ctx, key: key, mode: mode, limit: limit, begin: time.Now()}
	c.observe(a.event(EventAcquiring))
	return a
}

func (a *acquisition) event(kind EventKind) Event {
	return Event{Kind: kind, Key: a.key, ID: a.id, Ctx: a.ctx, Mode: a.mode, Limit: a.limit}
}

// failed reports that the acquisition ended without the lock, and returns
// err. It does nothing but return err for a nil acquisition.
func (a *acquisition) failed(c *Client, err error) error {
	if a != nil {
		e := a.event(EventNotAcquired)
		e.Wait, e.Err = time.Since(a.begin), err
		c.observe(e)
	}
	return err
}

// acquired reports that the acquisition got l.
func (a *acquisition) acquired(c *Client, l *Lock) {
	e := l.event(EventAcquired, nil)
	e.Wait = time.Since(a.begin)
	c.observe(e)
}

// lockEvents is what the events of a hold say about its acquisition.
type lockEvents struct {
	id    uint64
	ctx   context.Context
	mode  Mode
	limit int
}

// event returns an event of kind about the hold of l.
func (l *Lock) event(kind EventKind, err error) Event {
	o := l.events
	return Event{Kind: kind, Key: l.req.Key, ID: o.id, Ctx: o.ctx, Mode: o.mode, Limit: o.limit, Token: l.token, Err: err}
}

// Reason classes an event's error for metrics: a short, fixed word that can
// serve as a label value, where the error itself cannot.
//
// For EventNotAcquired it is one of:
//
//   - "held": the lock was held (TryLock, or a wait that found it held);
//   - "timeout": the wait's context reached its deadline;
//   - "cancelled": the wait's context was cancelled;
//   - "closed": the Client was closed;
//   - "permanent": the store failed for good (ErrPermanent: refused
//     credentials, an untrusted certificate, a missing table), which ended
//     the wait at once;
//   - "unavailable": the store failed (ErrUnavailable), also when the wait
//     then ended for one of the reasons above;
//   - "other": anything else (a place in a fair queue that ended, a mode
//     mismatch, ...).
//
// For EventLost it is one of:
//
//   - "max_hold": the lock reached its WithMaxHold bound;
//   - "not_held": the store no longer had the hold (its lease ended on the
//     store, it was force-released, or another owner has it);
//   - "expired": the lock's validity ran out before a renewal succeeded
//     (the store could not be reached), and any other loss.
//
// For the other kinds it is "".
func (e Event) Reason() string {
	err := e.Err
	switch e.Kind {
	case EventNotAcquired:
		switch {
		case errors.Is(err, ErrPermanent):
			return "permanent"
		case errors.Is(err, ErrUnavailable):
			return "unavailable"
		case errors.Is(err, ErrClosed):
			return "closed"
		case errors.Is(err, context.DeadlineExceeded):
			return "timeout"
		case errors.Is(err, context.Canceled):
			return "cancelled"
		case errors.Is(err, ErrLost), errors.Is(err, ErrModeMismatch):
			return "other"
		case errors.Is(err, ErrNotAcquired):
			return "held"
		}
		return "other"
	case EventLost:
		switch {
		case errors.Is(err, ErrMaxHold):
			return "max_hold"
		case errors.Is(err, driver.ErrNotOwner):
			return "not_held"
		}
		return "expired"
	}
	return ""
}
