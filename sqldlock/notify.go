package sqldlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/notify"
	"github.com/dlockhq/dlock/sqldlock/internal/dialect"
)

// Release notification on PostgreSQL.
//
// Release and ForceRelease call pg_notify(NAME, payload) in the statement
// that deletes the row, NAME being the table name, so a notification is sent
// when, and only when, the deletion commits; the payload names the key, or
// the waiters that can take it next (see waiterTopic). Each Driver keeps one dedicated
// connection (outside the *sql.DB pool) that LISTENs on NAME; it is opened by
// the first Subscribe, which returns only after LISTEN has run, and it fans
// the notifications out to the subscriptions of their key. If the connection
// breaks, the listener reconnects with backoff and then signals every
// subscription, since a release may have been missed meanwhile. Close stops
// it. The connection itself is pgx's, opened by package sqldlock/postgres
// (see dialect.Listener), so that programs without PostgreSQL do not compile
// pgx.

const (
	listenIdle      = 30 * time.Second // ping the listening connection after this much silence
	listenPingLimit = 5 * time.Second
	reconnectMin    = 50 * time.Millisecond
	reconnectMax    = 5 * time.Second
)

type listener struct {
	d   *Driver
	hub notify.Hub
}

// Subscribe implements driver.Notifier. On PostgreSQL, the returned
// subscription is signalled after every release of req.Key (by any client of
// the database) that commits after Subscribe returns; a database that the
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
	l, err := d.listener(ctx)
	if err != nil {
		return nil, fail(ctx, "subscribe", req.Key, err)
	}
	if req.Queue {
		return l.hub.Subscribe(req.Key, waiterTopic(req.Key, req.Owner)), nil
	}
	return l.hub.Subscribe(req.Key, observerTopic(req.Key)), nil
}

// The payloads of release notifications. A release that wakes every
// subscriber of a key sends the key itself (as every release did before
// targeted wake-ups, and as the server-side functions of fair drivers and of
// Shared and Semaphore holds still do). A release of an Exclusive hold by a
// driver that is not fair, when waiters are queued, sends instead
// waiterTopic(key, owner) for each waiter that can take the key next, and
// observerTopic(key) for the subscribers that do not queue (leader.Observe,
// say): the other queued waiters are not woken, so the database's work per
// release does not grow with their number. Control characters set the
// topics apart from keys; a key that happens to look like a topic costs
// spurious wake-ups, never a missed one.
//
// Queued waiters of older clients hear only the key itself: in a fleet
// that mixes versions they poll (a queued waiter renews its entry at
// least every third of its lease) where a newer client released.

// waiterTopic is the topic of the queued waiter owner of key.
func waiterTopic(key, owner string) string { return "\x01" + owner + "\x01" + key }

// observerTopic is the topic of the subscribers of key that do not queue.
func observerTopic(key string) string { return "\x02" + key }

// The topics in PostgreSQL, for a statement whose $1 is the key and whose
// row has the waiter's owner.
const (
	pgWaiterTopic   = `chr(1) || owner || chr(1) || $1`
	pgObserverTopic = `chr(2) || $1`
)

// listener returns the driver's listener, starting it if needed: it connects
// and runs LISTEN before returning.
func (d *Driver) listener(ctx context.Context) (*listener, error) {
	select {
	case d.lisSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-d.lisSem }()
	d.mu.Lock()
	l := d.lis
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
	d.wg.Add(1)
	d.mu.Unlock()
	go l.run(d.ctx, conn)
	return l, nil
}

// connect opens the listening connection and runs LISTEN on it.
func (l *listener) connect(ctx context.Context) (dialect.ListenConn, error) {
	return l.d.listen(ctx, l.d.n.table, l.hub.Notify)
}

// run receives notifications until ctx ends, reconnecting when the
// connection breaks.
func (l *listener) run(ctx context.Context, conn dialect.ListenConn) {
	defer l.d.wg.Done()
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		wctx, cancel := context.WithTimeout(ctx, listenIdle)
		err := conn.Wait(wctx) // the connection passes notifications to the hub
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			continue
		}
		if errors.Is(err, context.DeadlineExceeded) && !conn.Closed() {
			// Silence: make sure the connection is still alive.
			pctx, cancel := context.WithTimeout(ctx, listenPingLimit)
			err = conn.Ping(pctx)
			cancel()
			if err == nil {
				continue
			}
			if ctx.Err() != nil {
				return
			}
		}
		conn.Close()
		if conn = l.reconnect(ctx); conn == nil {
			return
		}
		// Releases may have gone unnoticed while disconnected.
		l.hub.NotifyAll()
	}
}

// reconnect connects again, with jittered exponential backoff, until it
// succeeds or ctx ends (then it returns nil).
func (l *listener) reconnect(ctx context.Context) dialect.ListenConn {
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
