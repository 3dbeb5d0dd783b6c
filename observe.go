package dlock

import (
	"context"
	"sync/atomic"
	"time"
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
func (c *Client) starting(ctx context.Context, key string, mode Mode, limit int) *acquisition {
	a := &acquisition{id: nextAcquisitionID(), ctx: ctx, key: key, mode: mode, limit: limit, begin: time.Now()}
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
