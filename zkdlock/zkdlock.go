package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/holds"
)

const (
	// DefaultPrefix is the znode under which the driver keeps its locks
	// unless WithPrefix says otherwise.
	DefaultPrefix = "/dlock"
	// DefaultSessionTTL is the session timeout the driver asks for unless
	// WithSessionTTL says otherwise.
	DefaultSessionTTL = 15 * time.Second
	// DefaultParentLinger is how long a key's znode outlives the driver's
	// last node under it unless WithParentLinger says otherwise.
	DefaultParentLinger = time.Second

	// maxNodeData bounds a node's data (the owner and Info, see
	// encodeData): a request larger than the server's jute.maxbuffer (1 MiB
	// less a byte by default) makes it drop the connection. The rest is
	// room for the request's path (the key, escaped, is up to 3 KiB) and
	// header.
	maxNodeData = 1<<20 - 64<<10
	// maxKeyLen is the longest dlock key, in bytes.
	maxKeyLen = 1024
	// minTTL is the shortest lease: leases are kept on this process's
	// clock, so it only has to leave room for a round trip.
	minTTL = 10 * time.Millisecond
	// createAttempts bounds the attempts to create a contender's node when
	// the key's parent znode keeps vanishing.
	createAttempts = 3
	// cleanupTimeout bounds a deletion the driver makes in the background.
	cleanupTimeout = 5 * time.Second
	// closeTimeout bounds the time Close spends deleting the keys' znodes
	// whose linger period has not passed and waiting for the requests in
	// flight, before it closes the connection.
	closeTimeout = 2 * time.Second
	// retryDelay separates the later attempts to delete a node whose deletion
	// failed for want of a connection.
	retryDelay = time.Second
	// gone is how long the driver remembers a queue entry whose lease ran
	// out, so that the owner's next queued Acquire reports the loss instead
	// of queueing again at the back.
	gone = 10 * time.Minute
)

// acl is the ACL of the driver's znodes unless WithACL says otherwise:
// every permission to anyone.
var acl = zk.WorldACL(zk.PermAll)

var errClosed = errors.New("zkdlock: driver closed")

// Driver is a dlock driver over ZooKeeper. Create it with New, or with
// dlock.Open and a zk:// URL. Besides driver.Driver it implements
// driver.Notifier, driver.Lister and driver.ForceReleaser. All methods are
// safe for concurrent use.
type Driver struct {
	conn   *zk.Conn
	root   string        // the znode holding one child per key
	acl    []zk.ACL      // the ACL of the znodes the driver creates
	authed chan struct{} // closed once the session has the credentials of WithAuth
	// authErr is why the credentials could not be added, if they could
	// not; set before authed is closed.
	authErr error
	ttl     time.Duration
	linger  time.Duration
	layout  Layout
	sess    *session
	dialer  *dialer
	caps    driver.Capabilities

	holds *holds.Table[hold]     // this driver's holds and queue entries, by owner
	trash *holds.Table[garbage]  // deletions to try again, by path
	lost  *holds.Table[struct{}] // owners whose queue entry ran out

	parents *lingering // the keys' znodes: Acquire calls in flight, pending removals

	ctx    context.Context // ends when Close starts
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup // goroutines of the driver, and calls in flight

	eventsDone chan struct{} // closed when the client's last goroutine has ended
}

// hold is a node of this driver's session: a hold (the first in its queue)
// or a queue entry.
type hold struct {
	parent  string // the key's znode
	path    string // the node
	czxid   int64  // the node's creation zxid: its fencing token
	session int64  // the session the node belongs to
	crowded bool   // other nodes followed it at the last look

	mode       driver.Mode // the node's kind
	limit      int         // a permit node's limit
	held       bool        // the node held at the last look (it holds until deleted)
	downgraded bool        // a write node marked as a read hold
	version    int32       // the node's data version, for the downgrade's setData
	// wait names the nodes that kept it from holding at the last look (see
	// verdict); first: the first of them must be read, not only watched.
	wait  []string
	first bool
}

// garbage is a node whose deletion failed for want of a connection.
type garbage struct {
	parent, path string
	session      int64
}

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.Notifier      = (*Driver)(nil)
	_ driver.Lister        = (*Driver)(nil)
	_ driver.ForceReleaser = (*Driver)(nil)
)

// Option configures a Driver.
type Option func(*config)

type config struct {
	prefix   string
	ttl      time.Duration
	linger   time.Duration
	layout   Layout
	logger   *slog.Logger
	dial     zk.Dialer
	connOpts []func(*zk.Conn)
	auth     []credential
	acl      []zk.ACL
}

// defaults is the configuration the options change.
var defaults = config{prefix: DefaultPrefix, ttl: DefaultSessionTTL, linger: DefaultParentLinger, acl: acl}

// credential is an authentication of WithAuth.
type credential struct {
	scheme string
	auth   []byte
}

// WithPrefix sets the znode under which the driver keeps its locks (default
// DefaultPrefix): an absolute path such as "/myapp/locks". The driver
// creates it (and its ancestors) as persistent znodes when needed.
func WithPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithSessionTTL sets the session timeout the driver asks the server for
// (default DefaultSessionTTL). The server clamps it to its
// minSessionTimeout and maxSessionTimeout (by default 2 and 20 times its
// tickTime); the driver uses the timeout the server granted. A process that
// dies or is cut off loses its locks that long after its last contact.
func WithSessionTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithParentLinger sets how long a key's znode stays after the driver's
// last node under it has gone (default DefaultParentLinger), so that
// locking the key again within that time reuses it: an uncontended lock
// then costs two round trips and its release one, instead of four and one.
// An Acquire of the key by the driver starts the period anew. When the
// period has passed the driver deletes the znode if no contender of any
// driver is queued there; Close deletes the lingering znodes at once. Zero
// deletes a key's znode together with the last node, at the cost of
// creating it again on the next lock.
func WithParentLinger(d time.Duration) Option { return func(c *config) { c.linger = d } }

// WithCuratorLayout names the driver's nodes for Curator's recipe l
// (default CuratorMutex), so that Curator clients locking a key's znode
// with that recipe and the driver exclude each other. The driver reads
// nodes of every layout whatever l is: it matters only to Curator. See the
// package documentation (Curator).
func WithCuratorLayout(l Layout) Option { return func(c *config) { c.layout = l } }

// WithLogger sends go-zookeeper's log lines to l at debug level. Without it
// they are dropped.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithDialer makes the connection dial servers with d instead of
// net.DialTimeout: for TLS, a function calling a tls.Dialer's Dial (see the
// package documentation, TLS).
func WithDialer(d zk.Dialer) Option { return func(c *config) { c.dial = d } }

// WithConnectOptions passes options to go-zookeeper's Connect, such as
// zk.WithHostProvider or zk.WithMaxBufferSize. The driver sets the
// connection's logger, log level and dialer itself (see WithLogger and
// WithDialer), after these options.
func WithConnectOptions(opts ...func(*zk.Conn)) Option {
	return func(c *config) { c.connOpts = append(c.connOpts, opts...) }
}

// WithAuth adds credentials of the scheme to the driver's session, as
// zk.Conn.AddAuth does: for ZooKeeper's digest scheme,
// WithAuth("digest", []byte("user:password")). The driver's calls wait
// until the server has taken them, and go-zookeeper sends them again before
// any other request on every new connection, a new session after an expiry
// included. It may be given more than once. The digest scheme sends the
// password as it is: use it over TLS (see WithDialer) or on a trusted
// network. See the package documentation (Authentication).
func WithAuth(scheme string, auth []byte) Option {
	return func(c *config) { c.auth = append(c.auth, credential{scheme, auth}) }
}

// WithACL sets the ACL of the znodes the driver creates (default: every
// permission to anyone, zk.WorldACL(zk.PermAll)), the lock prefix and its
// ancestors included. zk.AuthACL(zk.PermAll) gives every permission to the
// identities the session authenticated as (WithAuth) and to no one else:
// drivers with other credentials, or none, then get zk.ErrNoAuth. The ACL
// must give the driver itself every permission but ADMIN.
func WithACL(acl []zk.ACL) Option { return func(c *config) { c.acl = acl } }

// New connects to the ZooKeeper servers (host:port, port 2181 if missing)
// and returns a driver with a session of its own. It returns at once; the
// connection and session are set up in the background and the first calls
// wait for them. Bad options are reported as a *dlock.ArgError. Close ends
// the session.
func New(servers []string, opts ...Option) (*Driver, error) {
	cfg := defaults
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.check(servers); err != nil {
		return nil, err
	}
	d := &Driver{
		root:   cfg.prefix,
		acl:    cfg.acl,
		authed: make(chan struct{}),
		ttl:    cfg.ttl,
		linger: cfg.linger,
		layout: cfg.layout,
		sess:   newSession(),
		dialer: newDialer(cfg.dial),
		caps: driver.Capabilities{
			Modes:         driver.Modes(driver.Exclusive, driver.Shared, driver.Semaphore),
			FIFO:          true,
			DurableTokens: true,
			ServerClock:   true,
			Consensus:     true,
			MaxKeyLen:     maxKeyLen,
			MinTTL:        minTTL,
		},
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.holds = holds.New(d.expire)
	d.trash = holds.New(d.retryDelete)
	d.lost = holds.New(func(string, struct{}) {})
	d.parents = newLingering(cfg.linger, d.deleteParent)
	userOpts := func(c *zk.Conn) {
		for _, o := range cfg.connOpts {
			o(c)
		}
	}
	conn, events, err := zk.Connect(servers, cfg.ttl, userOpts,
		zk.WithLogger(zkLogger{s: d.sess, log: cfg.logger}),
		zk.WithLogInfo(true), // the negotiated timeout is logged as information
		zk.WithDialer(d.dialer.Dial))
	if err != nil {
		d.cancel()
		return nil, fmt.Errorf("zkdlock: connecting to %s: %w", strings.Join(servers, ","), err)
	}
	d.conn = conn
	// The client closes its event channel when its last goroutine ends.
	d.eventsDone = make(chan struct{})
	go func() {
		defer close(d.eventsDone)
		for range events {
		}
	}()
	if len(cfg.auth) == 0 {
		close(d.authed)
	} else {
		d.wg.Add(1)
		go d.authenticate(cfg.auth)
	}
	return d, nil
}

// check returns an *dlock.ArgError for the first bad setting of c, or for
// servers, if any.
func (c config) check(servers []string) error {
	switch why := checkPath(c.prefix); {
	case len(servers) == 0:
		return &dlock.ArgError{Name: "servers", Value: servers, Reason: "names no server"}
	case slices.Contains(servers, ""):
		return &dlock.ArgError{Name: "servers", Value: servers, Reason: "has an empty address"}
	case why != "":
		return &dlock.ArgError{Name: "prefix", Value: c.prefix, Reason: why}
	case c.ttl < time.Millisecond || c.ttl > math.MaxInt32*time.Millisecond:
		return &dlock.ArgError{Name: "session", Value: c.ttl, Reason: "must be between 1ms and about 24 days"}
	case c.layout != CuratorMutex && c.layout != CuratorReadWriteLock:
		return &dlock.ArgError{Name: "curator", Value: c.layout, Reason: "is not a Layout"}
	case c.linger < 0:
		return &dlock.ArgError{Name: "linger", Value: c.linger, Reason: "is negative"}
	case len(c.acl) == 0:
		return &dlock.ArgError{Name: "acl", Value: c.acl, Reason: "is empty: ZooKeeper refuses to create a znode without an ACL"}
	case slices.ContainsFunc(c.auth, func(c credential) bool { return c.scheme == "" }):
		return &dlock.ArgError{Name: "auth", Value: "", Reason: "has no scheme (write digest)"}
	}
	return nil
}

// authenticate adds the credentials to the session, and closes d.authed
// when it is done. A credential whose request the connection dropped before
// the server answered is sent again: the client queues it until it has a
// connection. The client sends the credentials it has added again on every
// connection after that, before any other request.
func (d *Driver) authenticate(creds []credential) {
	defer d.wg.Done()
	defer close(d.authed)
	for _, c := range creds {
		for {
			err := d.conn.AddAuth(c.scheme, c.auth)
			if err == nil {
				break
			}
			if !errors.Is(err, zk.ErrConnectionClosed) || d.ctx.Err() != nil {
				d.authErr = fmt.Errorf("zkdlock: adding %s credentials to the session: %w", c.scheme, err)
				return
			}
		}
	}
}

// Conn returns the driver's ZooKeeper connection, for requests of the
// program's own. Closing it ends the session, and with it every hold of the
// driver; the driver is unusable afterwards.
func (d *Driver) Conn() *zk.Conn { return d.conn }

// SessionTimeout returns the session timeout the server granted the
// driver's current session, or zero before the first session is set up.
func (d *Driver) SessionTimeout() time.Duration { return d.sess.latest() }

// Capabilities implements driver.Driver: exclusive locks, read-write locks
// and semaphores, FIFO queues,
// durable fencing tokens, server-side session expiry over a consensus
// protocol, keys of up to 1024 bytes, leases from 10ms. See the package
// documentation.
func (d *Driver) Capabilities() driver.Capabilities { return d.caps }

func (d *Driver) parentPath(key string) string { return d.root + "/" + escape(key) }

func check(req driver.Request) error {
	if err := checkMode(req); err != nil {
		return err
	}
	if req.TTL <= 0 {
		return fmt.Errorf("zkdlock: TTL %v is not positive: %w", req.TTL, driver.ErrUnsupported)
	}
	return nil
}

// checkMode refuses the modes the driver does not implement.
func checkMode(req driver.Request) error {
	switch req.Mode {
	case driver.Exclusive, driver.Shared:
		return nil
	case driver.Semaphore:
		if req.Limit < 1 {
			return fmt.Errorf("zkdlock: a semaphore of %d permits: %w", req.Limit, driver.ErrUnsupported)
		}
		return nil
	}
	return fmt.Errorf("zkdlock: %s mode: %w", req.Mode, driver.ErrUnsupported)
}

// notHeld returns an error wrapping driver.ErrNotOwner.
func notHeld(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{driver.ErrNotOwner}, args...)...)
}

// Close implements driver.Driver: it stops the leases' timers, deletes the
// keys' znodes whose linger period has not passed and lets the requests in
// flight finish (for up to two seconds in all), closes the connection,
// which ends the session (the server deletes its nodes at once), and waits
// for the driver's goroutines and the client's to end. Holds are not
// released one by one: package dlock does that first.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.cancel()
	d.holds.Close()
	d.trash.Close()
	d.lost.Close()
	// A request the connection's closing abandons leaves the key's znode
	// behind, and go-zookeeper may still be decoding its reply into memory
	// the caller reads: give the requests in flight a chance to finish.
	removed := d.parents.drain(listParallel)
	calls := make(chan struct{})
	go func() {
		d.wg.Wait()
		close(calls)
	}()
	wait, stop := context.WithTimeout(context.Background(), closeTimeout)
	for _, done := range []<-chan struct{}{removed, calls} {
		select {
		case <-done:
		case <-wait.Done():
		}
	}
	stop()
	d.conn.Close()
	d.dialer.closeAll()
	<-removed
	<-calls
	<-d.eventsDone
	return nil
}
