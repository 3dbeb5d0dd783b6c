package sqldlock

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/sqldialect"
)

// Waiting in line on PostgreSQL.
//
// PostgreSQL signals every backend that LISTENs in a database at each
// NOTIFY, whatever the channel, and each of them reads the notification and
// sends it to its client: if every waiting process listened, every release
// would cost the server and the fleet as much as there are waiting
// processes. So an Exclusive or Semaphore waiter of a driver that is not
// fair does not listen while others wait ahead of it. Its subscription
// (Subscribe with Request.Queue) takes a connection of its own, outside the
// *sql.DB pool, which waits in the server's lock manager for the key's gate,
// a session advisory lock (pg_advisory_lock of a hash of the table name and
// the key), and, once it has it, LISTENs on the same connection. The holder
// of the gate is the head of the line: it alone hears the key's releases,
// and its subscription is signalled on taking the gate (a release may have
// come before its LISTEN). Closing the subscription (once the waiter holds
// the key, or gives up) runs UNLISTEN and lets go of the gate, and the lock
// manager grants it to the next waiter in line: one. A head whose process
// dies loses its connection, and with it the gate, to the next waiter; a
// head that hangs keeps it, and the waiters behind it find the key through
// package dlock's fallback polls. A connection that breaks signals its
// subscription, which waits again on a new one. Readers (Shared) and the
// waiters of a fair driver listen on the driver's listener, whose
// notifications name the waiters that can take the key next.
//
// A waiter that stops waiting before it heads the line leaves it, its wait
// cancelled from a connection of the pool, and keeps its connection. Keys whose hashes collide (or
// an application's own advisory lock of the same number) share a line,
// which only slows their waiters to the fallback polls. Session advisory
// locks need a connection of their own: direct, or through a pooler in
// session mode.
//
// Each waiting subscription costs a connection while it waits; the
// connections of closed ones are kept (at most maxIdleGates) for the next
// wait, until listenLinger passes without one.

// maxIdleGates is how many gate connections a driver keeps between waits.
const maxIdleGates = 4

// gated reports whether req's subscription waits in line for the key's gate.
func (d *Driver) gated(req driver.Request) bool {
	return req.Queue && !d.fair && req.Mode != driver.Shared
}

// gateConn is a connection of gate subscriptions, one at a time.
type gateConn struct {
	sqldialect.ListenConn
	to atomic.Pointer[gateSub] // the subscription that the notifications are for
}

// gateSub is a subscription that waits for its key's gate.
type gateSub struct {
	d    *Driver
	key  string
	ch   chan struct{}
	stop context.CancelFunc
	// Under d.mu: Close was called; the goroutine has ended.
	closed, ended bool
}

// subscribeGate returns a subscription that waits in line for req.Key's
// gate, on a connection of its own.
func (d *Driver) subscribeGate(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	c, err := d.gateConn(ctx)
	if err != nil {
		return nil, err
	}
	h := fnv.New64a()
	h.Write([]byte(d.n.Name + "\x00" + req.Key))
	wait := fmt.Sprintf(d.ops.(pgOps).q.Gate, int64(h.Sum64()))
	g := &gateSub{d: d, key: req.Key, ch: make(chan struct{}, 1)}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		c.Close()
		return nil, errClosed
	}
	var gctx context.Context
	gctx, g.stop = context.WithCancel(d.ctx)
	d.wg.Add(1)
	d.mu.Unlock()
	go g.run(gctx, c, wait)
	return g, nil
}

// C implements driver.Subscription.
func (g *gateSub) C() <-chan struct{} { return g.ch }

// Close implements driver.Subscription: the subscription's goroutine lets
// go of the gate, or of its place in line.
func (g *gateSub) Close() error {
	g.d.mu.Lock()
	if !g.closed && !g.ended {
		g.d.gatesBack++ // see gateConn
	}
	g.closed = true
	g.d.mu.Unlock()
	g.stop()
	return nil
}

func (g *gateSub) signal() {
	select {
	case g.ch <- struct{}{}:
	default:
	}
}

// deliver signals g if payload is a release of its key, whoever it wakes.
func (g *gateSub) deliver(payload string) {
	if key, _, ok := parseWaiter(payload); ok {
		payload = key
	}
	if payload == g.key {
		g.signal()
	}
}

// run waits for the gate with the statement wait, and then for the key's
// releases, until ctx ends; a connection that breaks is replaced, after a
// backoff.
func (g *gateSub) run(ctx context.Context, c *gateConn, wait string) {
	defer g.d.wg.Done()
	delay := reconnectMin
	for {
		c.to.Store(g)
		err := g.take(ctx, c, wait)
		if err == nil {
			g.signal() // a release may have come before the LISTEN
			delay = reconnectMin
		}
		for err == nil {
			err = await(ctx, c) // the connection passes notifications to deliver
		}
		c.to.Store(nil)
		g.d.putGate(c, g, ctx.Err() != nil)
		if ctx.Err() != nil {
			return
		}
		g.signal() // releases may have gone unheard
		for c = nil; c == nil; delay = min(delay*2, reconnectMax) {
			t := time.NewTimer(delay/2 + rand.N(delay/2+1))
			select {
			case <-ctx.Done():
				t.Stop()
				g.d.putGate(nil, g, true)
				return
			case <-t.C:
			}
			c, _ = g.d.gateConn(ctx)
		}
	}
}

// take runs wait on c, which returns once it has the gate. If ctx ends
// first, the statement is cancelled by pg_cancel_backend on a connection of
// the pool (a context that ended would close c; a cancel request would cost
// the server a process), or, if that fails, by closing c.
func (g *gateSub) take(ctx context.Context, c *gateConn, wait string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	lctx, abort := context.WithCancel(g.d.ctx)
	defer abort()
	sent := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(sent)
		cctx, cancel := context.WithTimeout(lctx, listenPingLimit)
		defer cancel()
		if _, err := g.d.db.ExecContext(cctx, g.d.ops.(pgOps).q.CancelGate, int64(c.PID())); err != nil {
			abort()
		}
	})
	err := c.Exec(lctx, wait)
	if !stop() {
		<-sent // so that it cancels nothing else
	}
	return err
}

// gateConn returns an idle gate connection, or a new one. While closed
// subscriptions' connections are on their way back (a waiter that took the
// key may wait for it again at once), it waits for them.
func (d *Driver) gateConn(ctx context.Context) (*gateConn, error) {
	d.mu.Lock()
	for len(d.idleGates) == 0 && d.gatesBack > 0 {
		if d.gateBack == nil {
			d.gateBack = make(chan struct{})
		}
		back := d.gateBack
		d.mu.Unlock()
		select {
		case <-back:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		d.mu.Lock()
	}
	if n := len(d.idleGates); n > 0 {
		c := d.idleGates[n-1]
		d.idleGates = d.idleGates[:n-1]
		d.mu.Unlock()
		return c, nil
	}
	d.mu.Unlock()
	c := &gateConn{}
	conn, err := d.listen(ctx, "", func(p string) {
		if g := c.to.Load(); g != nil {
			g.deliver(p)
		}
	})
	if err != nil {
		return nil, err
	}
	c.ListenConn = conn
	return c, nil
}

// putGate stops c listening and lets go of its gate, and keeps it for the
// next wait; it closes a connection that fails, or that is not needed. last
// is set when g's goroutine ends (c may then be nil).
func (d *Driver) putGate(c *gateConn, g *gateSub, last bool) {
	err := errClosed
	if c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), listenPingLimit)
		err = c.Exec(ctx, d.ops.(pgOps).q.LeaveGate)
		cancel()
	}
	d.mu.Lock()
	if last && g.closed && !g.ended {
		d.gatesBack--
	}
	g.ended = g.ended || last
	if d.gateBack != nil {
		close(d.gateBack)
		d.gateBack = nil
	}
	if c == nil {
		d.mu.Unlock()
		return
	}
	if err != nil || d.closed || len(d.idleGates) == maxIdleGates {
		d.mu.Unlock()
		c.Close()
		return
	}
	d.idleGates = append(d.idleGates, c)
	if d.gateLinger == nil {
		d.gateLinger = time.AfterFunc(listenLinger, d.retireGates)
	} else {
		d.gateLinger.Reset(listenLinger)
	}
	d.mu.Unlock()
}

// retireGates closes the idle gate connections.
func (d *Driver) retireGates() {
	d.mu.Lock()
	idle := d.idleGates
	d.idleGates = nil
	d.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
}
