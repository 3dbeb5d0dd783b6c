package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// authFormat is the message go-zookeeper logs each time the server accepts
// a session (a new one, or the same one again after a reconnection), with
// the session ID and the negotiated timeout in milliseconds. The client
// keeps the negotiated timeout to itself; this message is the only place it
// shows.
const authFormat = "authenticated: id=%d, timeout=%d"

// session records what the server granted the driver's connection.
type session struct {
	mu      sync.Mutex
	id      int64
	timeout time.Duration
	next    chan struct{}  // closed at the next set
	granted map[int64]bool // every session ID granted
}

func newSession() *session {
	return &session{next: make(chan struct{}), granted: map[int64]bool{}}
}

func (s *session) set(id int64, timeout time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.id, s.timeout = id, timeout
	s.granted[id] = true
	close(s.next)
	s.next = make(chan struct{})
}

// current returns the latest session's ID and a channel closed when the
// server next grants a session (the same one again after a reconnection,
// or a new one).
func (s *session) current() (int64, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, s.next
}

// timeoutOf returns the negotiated timeout of session id, which bounds the
// leases of its nodes, or an error if id is not the latest session the
// server granted or its timeout is unknown.
func (s *session) timeoutOf(id int64) (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == 0 || id != s.id || s.timeout <= 0 {
		return 0, fmt.Errorf("zkdlock: the session timeout the server granted to session %#x is unknown", id)
	}
	return s.timeout, nil
}

// ours reports whether the server ever granted session id to the driver.
func (s *session) ours(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.granted[id]
}

// latest returns the latest session's negotiated timeout, or 0.
func (s *session) latest() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.timeout
}

// zkLogger receives go-zookeeper's log lines: it learns the negotiated
// session timeout from them and passes them on to an slog logger at debug
// level, or drops them.
type zkLogger struct {
	s   *session
	log *slog.Logger // nil: drop
}

// Printf implements zk.Logger.
func (l zkLogger) Printf(format string, args ...any) {
	if format == authFormat && len(args) == 2 {
		id, ok1 := args[0].(int64)
		ms, ok2 := args[1].(int32)
		if ok1 && ok2 {
			l.s.set(id, time.Duration(ms)*time.Millisecond)
		}
	}
	if l.log != nil {
		l.log.Debug(fmt.Sprintf(format, args...), "client", "go-zookeeper")
	}
}

// dialer dials the driver's connections (through another dialer, if one was
// given) and keeps track of them, so that Close can end a connection the
// client is stuck on: go-zookeeper waits for a silent server for up to ten
// times its receive timeout while it sets up a session. Each connection
// closes itself when its server leaves it without an answer for
// silenceTimeout.
type dialer struct {
	dial zk.Dialer

	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

func newDialer(d zk.Dialer) *dialer {
	if d == nil {
		d = net.DialTimeout
	}
	return &dialer{dial: d, conns: map[*trackedConn]struct{}{}}
}

// Dial implements zk.Dialer.
func (d *dialer) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := d.dial(network, address, timeout)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, d: d}
	tc.silence.close = c.Close
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	d.conns[tc] = struct{}{}
	return tc, nil
}

// closeAll closes every connection and refuses new ones.
func (d *dialer) closeAll() {
	d.mu.Lock()
	d.closed = true
	conns := d.conns
	d.conns = map[*trackedConn]struct{}{}
	d.mu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
}

type trackedConn struct {
	net.Conn
	d       *dialer
	once    sync.Once
	silence silence
}

// Write writes one frame, a request (go-zookeeper writes each in one call).
func (c *trackedConn) Write(b []byte) (int, error) {
	c.silence.wrote()
	return c.Conn.Write(b)
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.silence.read(b[:n])
	return n, err
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.silence.stop()
		c.d.mu.Lock()
		delete(c.d.conns, c)
		c.d.mu.Unlock()
	})
	return c.Conn.Close()
}

// call runs fn, a sequence of go-zookeeper requests, on the caller's
// goroutine, once the connection has a session. go-zookeeper's requests
// take no context: a request sent on a connection that goes silent ends
// when the connection is dropped (after silenceTimeout without an answer,
// or at the client's receive timeout if that comes first), and one made
// while the client reconnects would wait in the client's queue until a
// session is set up or the connection is closed for good. call therefore
// waits for the session
// itself, until ctx ends. Package dlock, which never waits on a driver past
// its caller's context, returns promptly on its own (see "Contexts" in
// package driver). An error of fn after ctx ended wraps ctx.Err(). Close
// lets the calls in flight finish before it closes the connection.
func call(ctx context.Context, d *Driver, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := d.waitSession(ctx); err != nil {
		return err
	}
	select {
	case <-d.authed:
		if d.authErr != nil {
			return d.authErr
		}
	case <-ctx.Done():
		return fmt.Errorf("waiting for the session's credentials: %w", ctx.Err())
	case <-d.ctx.Done():
		return errClosed
	}
	if !d.spawned() {
		return errClosed
	}
	defer d.wg.Done()
	err := fn()
	if errors.Is(err, zk.ErrNoAuth) {
		err = fmt.Errorf("%w: the znode's ACL does not admit this client's credentials (user:password in the URL, WithAuth)", err)
	}
	if cerr := ctx.Err(); err != nil && cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w: %w", cerr, err)
	}
	return err
}

// callFor is call for an fn that returns a value too.
func callFor[T any](ctx context.Context, d *Driver, fn func() (T, error)) (v T, err error) {
	err = call(ctx, d, func() (err error) { v, err = fn(); return err })
	return v, err
}

// waitSession waits until the connection has a session, ctx ends or the
// driver closes. A connection closed for good (see Conn) does not wait: its
// requests fail at once.
func (d *Driver) waitSession(ctx context.Context) error {
	for {
		_, next := d.sess.current()
		if d.conn.State() == zk.StateHasSession {
			return nil
		}
		select {
		case <-next:
		case <-d.eventsDone:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("waiting for a session: %w", ctx.Err())
		case <-d.ctx.Done():
			return errClosed
		}
	}
}

// spawned counts a goroutine of the driver (or a call) in d.wg, which Close
// waits for, and reports true, unless the driver is closed.
func (d *Driver) spawned() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.wg.Add(1)
	return true
}

// spawn runs fn on a goroutine that Close waits for. It reports false
// after Close.
func (d *Driver) spawn(fn func()) bool {
	if !d.spawned() {
		return false
	}
	go func() {
		defer d.wg.Done()
		fn()
	}()
	return true
}
