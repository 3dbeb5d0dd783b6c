package sqldlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/notify"
	"github.com/dlockhq/dlock/internal/sqldialect"
)

// Release notification on PostgreSQL.
//
// Release and ForceRelease call pg_notify(NAME, payload) in the statement
// that deletes the row, NAME being the table name, so a notification is sent
// when, and only when, the deletion commits; the payload names the key, or
// the waiters that can take it next (see parseWaiter). Queued Exclusive and
// Semaphore waiters of a driver that is not fair listen on connections of
// their own, one at a time per key (see gate.go). For the other
// subscriptions, each Driver keeps one
// dedicated connection (outside the *sql.DB pool) that LISTENs on NAME; it is opened by
// the first Subscribe, which returns only after LISTEN has run, and it fans
// the notifications out to the subscriptions of their key. If the connection
// breaks, the listener reconnects with backoff and then signals every
// subscription, since a release may have been missed meanwhile. Once the
// last subscription has closed, the listener stays for listenLinger, for
// the next wait, and then closes its connection: PostgreSQL signals every
// backend that LISTENs in a database at each NOTIFY, whatever the channel
// (each woken backend reads the queue of notifications), so every listening
// connection in a fleet costs every release with waiters; a process that
// stopped waiting stops costing it. Close stops the listener. The connection itself is pgx's, opened by package sqldlock/postgres
// (see sqldialect.Listener), so that programs without PostgreSQL do not compile
// pgx.

const (
	listenIdle      = 30 * time.Second // ping the listening connection after this much silence
	listenPingLimit = 5 * time.Second
	reconnectMin    = 50 * time.Millisecond
	reconnectMax    = 5 * time.Second
)

type listener struct {
	d    *Driver
	hub  notify.Hub
	stop context.CancelFunc // ends run

	// Under d.mu:
	refs int         // open subscriptions
	idle *time.Timer // retires the listener; set while refs == 0
}

// listenLinger is how long a listener stays without subscriptions before it
// closes its connection. (A variable for tests.)
var listenLinger = 10 * time.Second

// Subscribe implements driver.Notifier. On PostgreSQL, the returned
// subscription is signalled after every release of req.Key (by any client of
// the database) that commits after Subscribe returns, except that a queued
// Exclusive or Semaphore waiter of a driver that is not fair hears them only
// while it heads the key's line, and is signalled when it comes to head it
// (see gate.go); a database that the
// application opened must use the database/sql driver of
// github.com/jackc/pgx/v5/stdlib, whose settings the listening connection
// copies. MySQL and SQLite have no notifications: there, and over another
// PostgreSQL driver, Subscribe returns an error wrapping
// driver.ErrUnsupported, and package dlock's waiters poll.
func (d *Driver) Subscribe(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	if err := d.usable(ctx); err != nil {
		return nil, fail(ctx, "subscribe", req.Key, err)
	}
	if d.listen == nil {
		return nil, fail(ctx, "subscribe", req.Key, fmt.Errorf("%s has no release notifications: %w", d.dialect, driver.ErrUnsupported))
	}
	if !d.ops.modes().Has(req.Mode) {
		return nil, fail(ctx, "subscribe", req.Key, fmt.Errorf("%s mode: %w", req.Mode, driver.ErrUnsupported))
	}
	if d.gated(req) {
		s, err := d.subscribeGate(ctx, req)
		if err != nil {
			return nil, fail(ctx, "subscribe", req.Key, err)
		}
		return s, nil
	}
	l, err := d.listener(ctx)
	if err != nil {
		return nil, fail(ctx, "subscribe", req.Key, err)
	}
	topic := observerTopic(req.Key)
	if req.Queue {
		topic = waiterTopic(req.Key, req.Owner)
	}
	return &listenSub{Sub: l.hub.Subscribe(req.Key, topic), l: l}, nil
}

// listenSub is a subscription to a listener, which it holds on to until it
// is closed.
type listenSub struct {
	*notify.Sub
	l    *listener
	once sync.Once
}

// Close implements driver.Subscription.
func (s *listenSub) Close() error {
	s.once.Do(func() {
		s.Sub.Close()
		s.l.release()
	})
	return nil
}

// acquire counts a subscription of l. d.mu is held.
func (l *listener) acquire() {
	l.refs++
	if l.idle != nil {
		l.idle.Stop()
		l.idle = nil
	}
}

// release drops a subscription of l; the last one starts the linger after
// which l retires.
func (l *listener) release() {
	d := l.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if l.refs--; l.refs == 0 && d.lis == l {
		l.idle = time.AfterFunc(listenLinger, l.retire)
	}
}

// retire stops l unless a subscription came meanwhile: its connection
// closes, and the next Subscribe starts a new listener.
func (l *listener) retire() {
	d := l.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lis == l && l.refs == 0 {
		d.lis = nil
		l.idle = nil
		l.stop()
	}
}

// The payloads of release notifications. A release that wakes every
// subscriber of a key sends the key itself (as every release did before
// targeted wake-ups, and as the server-side functions of fair drivers and of
// Shared and Semaphore holds still do). A release of an Exclusive hold by a
// driver that is not fair, when waiters are queued, sends instead a waiter
// payload (see parseWaiter, and Release in sql/postgres_stmts.sql) for
// each waiter that can take the key next, which wakes that waiter and the
// key's subscribers that do not queue (leader.Observe, say), and no others:
// the other queued waiters sleep on, so that they do not all retry at every
// release. A key that happens to
// look like a waiter payload (it would start with a control character)
// costs wake-ups that go astray, and the waiters' fallback polls then find
// the release.

// parseWaiter returns the key and the owner of a waiter payload:
// "\x01", the length of the owner in bytes, ":", the owner, the key.
func parseWaiter(payload string) (key, owner string, ok bool) {
	rest, ok := strings.CutPrefix(payload, "\x01")
	if !ok {
		return "", "", false
	}
	n, rest, ok := strings.Cut(rest, ":")
	if !ok {
		return "", "", false
	}
	size, err := strconv.Atoi(n)
	if err != nil || size < 0 || size > len(rest) {
		return "", "", false
	}
	return rest[size:], rest[:size], true
}

// waiterTopic is the hub key of the queued waiter owner of key.
func waiterTopic(key, owner string) string { return "\x01" + owner + "\x01" + key }

// observerTopic is the hub key of the subscribers of key that do not queue.
func observerTopic(key string) string { return "\x02" + key }

// deliver passes a notification's payload to the subscriptions it is for.
func (l *listener) deliver(payload string) {
	key, owner, ok := parseWaiter(payload)
	if !ok {
		l.hub.Notify(payload) // the key: every subscriber
		return
	}
	l.hub.Notify(waiterTopic(key, owner))
	l.hub.Notify(observerTopic(key))
}

// listener returns the driver's listener with a subscription counted,
// starting it if needed: it connects and runs LISTEN before returning. The
// caller releases the count (see listenSub).
func (d *Driver) listener(ctx context.Context) (*listener, error) {
	select {
	case d.lisSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-d.lisSem }()
	d.mu.Lock()
	l := d.lis
	if l != nil {
		l.acquire()
	}
	d.mu.Unlock()
	if l != nil {
		return l, nil
	}
	l = &listener{d: d}
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		conn.Close()
		return nil, errClosed
	}
	d.lis = l
	l.acquire()
	var lctx context.Context
	lctx, l.stop = context.WithCancel(d.ctx)
	d.wg.Add(1)
	d.mu.Unlock()
	go l.run(lctx, conn)
	return l, nil
}

// connect opens the listening connection and runs LISTEN on it.
func (l *listener) connect(ctx context.Context) (sqldialect.ListenConn, error) {
	return l.d.listen(ctx, l.d.n.Table, l.deliver)
}

// run receives notifications until ctx ends, reconnecting when the
// connection breaks.
func (l *listener) run(ctx context.Context, conn sqldialect.ListenConn) {
	defer l.d.wg.Done()
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		if await(ctx, conn) == nil {
			continue // the connection passed notifications to the hub
		}
		if ctx.Err() != nil {
			return
		}
		conn.Close()
		if conn = l.reconnect(ctx); conn == nil {
			return
		}
		// Releases may have gone unnoticed while disconnected.
		l.hub.NotifyAll()
	}
}

// await waits for notifications on conn, pinging it after listenIdle of
// silence: it returns nil once some were received, an error once ctx ended
// or the connection failed.
func await(ctx context.Context, conn sqldialect.ListenConn) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, listenIdle)
		err := conn.Wait(wctx)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !errors.Is(err, context.DeadlineExceeded) || conn.Closed():
			return err
		}
		// Silence: make sure the connection is still alive.
		pctx, cancel := context.WithTimeout(ctx, listenPingLimit)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return err
		}
	}
}

// reconnect connects again, with jittered exponential backoff, until it
// succeeds or ctx ends (then it returns nil).
func (l *listener) reconnect(ctx context.Context) sqldialect.ListenConn {
	delay := reconnectMin
	for {
		if conn, err := l.connect(ctx); err == nil {
			return conn
		}
		t := time.NewTimer(delay/2 + rand.N(delay/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		delay = min(delay*2, reconnectMax)
	}
}
