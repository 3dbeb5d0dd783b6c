package redisdlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/ctxerr"
)

// DefaultPrefix is the key prefix unless WithPrefix says otherwise.
const DefaultPrefix = "dlock:"

// Limits reported in the driver's Capabilities.
const (
	// maxKeyLen is the longest user key, in bytes. Redis itself accepts
	// keys of up to 512 MB, so the prefix and the escaping the driver adds
	// do not count against it; 1024 is dlock's portable limit.
	maxKeyLen = 1024
	// minTTL is the shortest lease in script and transaction modes: PX has
	// millisecond resolution.
	minTTL = time.Millisecond
	// legacyMinTTL is the shortest lease in legacy mode with millisecond
	// timestamps: leases there are judged by client clocks, and shorter
	// ones mean nothing across hosts.
	legacyMinTTL = 10 * time.Millisecond
	// maxLimit is the largest semaphore limit (Script mode).
	maxLimit = math.MaxInt32
)

// Protocol selects the commands the driver uses to keep locks in Redis
// (WithProtocol). It is not a lock mode (dlock.ModeShared and the others).
type Protocol int

const (
	// Script (the default) runs acquire, refresh and release as Lua
	// scripts (EVALSHA, falling back to EVAL after NOSCRIPT). Leases expire
	// on the server's clock.
	Script Protocol = iota
	// Transaction uses WATCH/MULTI/EXEC and no scripts, for servers where
	// EVAL is denied. It stores locks exactly as Script does, so drivers in
	// the two modes share locks. Leases expire on the server's clock.
	Transaction
	// Legacy speaks the SETNX/GET/GETSET protocol: the lock key holds the
	// Unix time at which the lock expires, so that dlock shares locks with
	// services that already use that protocol. Leases are judged by client
	// clocks.
	Legacy
)

// String returns the protocol's name as used in URLs (mode=): script, tx or
// legacy.
func (m Protocol) String() string {
	if m >= Script && m <= Legacy {
		return [...]string{"script", "tx", "legacy"}[m]
	}
	return fmt.Sprintf("Protocol(%d)", int(m))
}

// ErrReplicaAck is wrapped by the error Acquire returns when fewer replicas
// than WithReplicaAck asks for confirmed the write in time. The driver has
// released the lock again by then.
var ErrReplicaAck = errors.New("redisdlock: too few replicas acknowledged the lock")

var errClosed = errors.New("redisdlock: driver closed")

// Option configures a Driver.
type Option func(*config)

type config struct {
	prefix         string
	mode           Protocol
	replicas       int
	replicaTimeout time.Duration
	unit           time.Duration
	autoPipeline   bool
}

// WithPrefix sets the prefix of every key the driver writes (default
// DefaultPrefix, "dlock:"). In Script and Transaction modes it must not
// contain '{' or '}', since it goes inside the driver's hash tag. In Legacy
// mode the lock key is exactly prefix+key, so set the prefix the existing
// services use (often the empty string).
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithProtocol selects the protocol (default Script). The URL's mode=
// parameter selects it too.
func WithProtocol(p Protocol) Option {
	return func(c *config) { c.mode = p }
}

// WithReplicaAck makes every successful Acquire wait until n replicas have
// acknowledged the write (Redis WAIT n timeout). If fewer do within timeout,
// the driver releases the lock and Acquire returns an error wrapping
// ErrReplicaAck. This narrows the window in which a failover to a replica
// that never saw the lock lets a second holder in; it does not close it
// (Redis replication stays asynchronous, and a replica that acknowledged can
// still lose the write if it is not the one promoted). n = 0 turns it off;
// timeout must be positive when n > 0.
func WithReplicaAck(n int, timeout time.Duration) Option {
	return func(c *config) { c.replicas, c.replicaTimeout = n, timeout }
}

// WithLegacyUnit sets the unit of the timestamps Legacy mode writes and
// reads: time.Millisecond (the default) or time.Second, whichever the
// existing services use. With seconds, leases are whole seconds (at least
// one), Acquire reports the lease it granted, and Capabilities'
// TTLResolution is a second.
func WithLegacyUnit(unit time.Duration) Option {
	return func(c *config) { c.unit = unit }
}

// WithAutoPipeline turns auto-pipelining (on by default) on or off. The URL's
// autopipeline= parameter (true or false) does the same.
//
// On, a script of Script mode that finds another of the driver's scripts
// on its way goes through the go-redis client's AutoPipeliner
// ((*redis.Client).AutoPipeline, (*redis.ClusterClient).AutoPipeline),
// which writes the commands of concurrent callers as one pipeline per round
// trip, on the client's pipeline pool: with many locks taken and released
// at once, one server serves far more of them (see bench/). A script alone
// goes out at once as a command of its own, as with auto-pipelining off
// (the AutoPipeliner would only add a hop to a goroutine of its own). A
// script in a pipeline returns when its pipeline does, within the client's ReadTimeout and WriteTimeout: go-redis
// applies neither the caller's deadline nor its cancellation to it (package
// dlock still returns to its caller on time), and the client's hooks get a
// context of go-redis's own, not the caller's (a tracing hook does not link
// the command to the caller's span). On a server that hangs, nothing stops
// go-redis from opening connections for the pipeline again (a Sentinel
// client asks the Sentinels DialerRetries times, a Cluster client tries
// again up to MaxRedirects times), each for up to a ReadTimeout: such a
// call, and the Close of a driver that owns its client, can then take
// several read timeouts, while package dlock returns to its caller on
// time. go-redis marks the AutoPipeliner API experimental.
//
// Off, every script is a command of its own (Client.Process). Transaction
// and Legacy modes, and the scripts of WithReplicaAck (whose WAIT must run
// on the connection that wrote), never use the AutoPipeliner.
func WithAutoPipeline(on bool) Option {
	return func(c *config) { c.autoPipeline = on }
}

// Driver is a dlock driver over a go-redis client: a standalone server, a
// Sentinel-managed master (redis.NewFailoverClient) or a Cluster
// (redis.NewClusterClient). Create it with New, or with dlock.Open and a
// redis://, rediss://, redis+sentinel:// or redis+cluster:// URL. Besides
// driver.Driver it implements driver.Notifier, driver.Lister,
// driver.ForceReleaser and driver.HoldReader. All methods are safe for
// concurrent use.
type Driver struct {
	client  redis.UniversalClient
	single  *redis.Client        // standalone or Sentinel; nil for Cluster
	cluster *redis.ClusterClient // nil unless Cluster
	owns    bool                 // Close closes client
	cfg     config
	proto   protocol
	caps    driver.Capabilities
	n       *notifier
	closed  atomic.Bool
	queuers queuers                             // Script mode: see scriptProto.acquire
	ev      goredisEval                         // runs the scripts
	ap      atomic.Pointer[redis.AutoPipeliner] // see scripter
	running atomic.Int32                        // scripts on their way (see goredisEval)
}

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.Notifier      = (*Driver)(nil)
	_ driver.Lister        = (*Driver)(nil)
	_ driver.ForceReleaser = (*Driver)(nil)
	_ driver.MultiAcquirer = (*Driver)(nil)
	_ driver.HoldReader    = (*Driver)(nil)
)

// New returns a driver over client, which must be a *redis.Client
// (standalone, or Sentinel through redis.NewFailoverClient) or a
// *redis.ClusterClient. The driver does not own the client: Close leaves it
// open. In Script mode the driver sends the scripts of concurrent callers
// through the client's AutoPipeliner (see WithAutoPipeline), which go-redis
// makes on first use and shares with every other user of the client: its
// goroutines end when the client is closed, and Close leaves it running. Bad options are
// reported as a *dlock.ArgError.
//
// Two client settings matter. dlock retries on its own, so a client that
// retries commands after a network error (go-redis's MaxRetries, default 3)
// can run a release twice and report the second run's "not held" for a lock
// it did release: set MaxRetries to -1 (Script mode's scripts are never
// resent whatever it says; Transaction and Legacy modes need it). And
// go-redis applies context deadlines to network reads only with
// ContextTimeoutEnabled; without it a call waits up to the client's
// ReadTimeout (as an auto-pipelined script does either way). Clients
// opened from a URL get both settings.
//
// go-redis never watches a context's cancellation, only its deadline: a
// call cancelled while the server (or the network) hangs returns when the
// client's ReadTimeout or WriteTimeout ends (5s by default), with an error
// wrapping context.Canceled. Package dlock does not wait for it (it returns
// to its caller at once), but keep both timeouts positive: with a timeout
// turned off, such a call would never return. URLs that turn one off are
// refused.
func New(client redis.UniversalClient, opts ...Option) (*Driver, error) {
	return newDriver(client, false, opts)
}

func newDriver(client redis.UniversalClient, owns bool, opts []Option) (*Driver, error) {
	d := &Driver{client: client, owns: owns}
	switch c := client.(type) {
	case nil:
		return nil, &dlock.ArgError{Name: "client", Value: nil, Reason: "must not be nil"}
	case *redis.Client:
		if c == nil {
			return nil, &dlock.ArgError{Name: "client", Value: nil, Reason: "must not be nil"}
		}
		d.single = c
	case *redis.ClusterClient:
		if c == nil {
			return nil, &dlock.ArgError{Name: "client", Value: nil, Reason: "must not be nil"}
		}
		d.cluster = c
	case *redis.Ring:
		return nil, &dlock.ArgError{Name: "client", Value: fmt.Sprintf("%T", client),
			Reason: "a Ring shards keys over independent servers without failover or a shared pub/sub; use one server, Sentinel or Cluster (or the quorum package over several drivers)"}
	default:
		return nil, &dlock.ArgError{Name: "client", Value: fmt.Sprintf("%T", client),
			Reason: "is not supported: pass a *redis.Client (standalone or Sentinel) or a *redis.ClusterClient"}
	}
	if err := d.configure(opts); err != nil {
		return nil, err
	}
	d.n = newNotifier(dialGoredis(client))
	d.ev = goredisEval{d}
	return d, nil
}

// scripter returns what a script runs on (without WithReplicaAck): the
// client's AutoPipeliner if pipeline is true and auto-pipelining is on,
// else the client. go-redis makes a client's AutoPipeliner when it is first
// asked for (here, when two scripts first meet) and shares it; should
// anyone close it, the client makes a new one.
func (d *Driver) scripter(pipeline bool) (processor, error) {
	if !d.cfg.autoPipeline || !pipeline {
		return d.client, nil
	}
	if ap := d.ap.Load(); ap != nil && !ap.IsClosed() {
		return ap, nil
	}
	var (
		ap  *redis.AutoPipeliner
		err error
	)
	if d.cluster != nil {
		ap, err = d.cluster.AutoPipeline()
	} else {
		ap, err = d.single.AutoPipeline()
	}
	if err != nil {
		return nil, err
	}
	d.ap.Store(ap)
	return ap, nil
}

// configure applies opts to d and sets the protocol and capabilities they
// ask for.
func (d *Driver) configure(opts []Option) error {
	cfg := config{prefix: DefaultPrefix, unit: time.Millisecond, autoPipeline: true}
	for _, o := range opts {
		o(&cfg)
	}
	d.cfg = cfg
	if cfg.mode < Script || cfg.mode > Legacy {
		return &dlock.ArgError{Name: "mode", Value: int(cfg.mode), Reason: "must be Script, Transaction or Legacy"}
	}
	d.proto = [...]protocol{scriptProto{d}, txProto{d}, legacyProto{d}}[cfg.mode]
	if cfg.mode != Legacy && strings.ContainsAny(cfg.prefix, "{}") {
		return &dlock.ArgError{Name: "prefix", Value: cfg.prefix, Reason: "must not contain '{' or '}': the driver puts it inside a Cluster hash tag"}
	}
	if len(cfg.prefix) > maxKeyLen {
		return &dlock.ArgError{Name: "prefix", Value: cfg.prefix, Reason: fmt.Sprintf("is longer than %d bytes", maxKeyLen)}
	}
	switch {
	case cfg.replicas < 0:
		return &dlock.ArgError{Name: "replicas", Value: cfg.replicas, Reason: "must not be negative"}
	case cfg.replicas > 0 && cfg.replicaTimeout <= 0:
		return &dlock.ArgError{Name: "replica timeout", Value: cfg.replicaTimeout, Reason: "must be positive (WAIT with timeout 0 blocks for ever)"}
	case cfg.replicas > 0 && cfg.replicaTimeout < time.Millisecond:
		return &dlock.ArgError{Name: "replica timeout", Value: cfg.replicaTimeout, Reason: "must be at least 1ms"}
	}
	if cfg.unit != time.Millisecond && cfg.unit != time.Second {
		return &dlock.ArgError{Name: "legacy unit", Value: cfg.unit, Reason: "must be time.Millisecond or time.Second"}
	}
	d.caps = capabilities(cfg)
	return nil
}

// capabilities returns the capabilities of a driver configured with cfg.
func capabilities(cfg config) driver.Capabilities {
	caps := driver.Capabilities{
		Modes:       driver.Modes(driver.Exclusive),
		ServerClock: cfg.mode != Legacy,
		MaxKeyLen:   maxKeyLen,
		MinTTL:      minTTL,
		// A hold is a key with its owner and an expiry, in every mode.
		PortableHolds: true,
		LockDelay:     true, // the lease is a TTL on the record
	}
	if cfg.mode == Script {
		// The scripts implement every mode and a FIFO queue natively;
		// Transaction and Legacy modes have exclusive locks only.
		caps.Modes = driver.Modes(driver.Exclusive, driver.Shared, driver.Semaphore)
		caps.FIFO = true
		// The scripts compare limits as Lua numbers (doubles, exact to
		// 2^53) and store them as decimal text: any int32 is safe.
		caps.MaxLimit = maxLimit
	}
	if cfg.mode == Legacy {
		caps.MinTTL = max(legacyMinTTL, cfg.unit)
		if cfg.unit == time.Second {
			// Leases are whole seconds, rounded down (see grant).
			caps.TTLResolution = cfg.unit
		}
	}
	return caps
}

// Protocol returns the driver's protocol.
func (d *Driver) Protocol() Protocol { return d.cfg.mode }

// Client returns the go-redis client the driver uses.
func (d *Driver) Client() redis.UniversalClient { return d.client }

// Capabilities implements driver.Driver. Script mode implements every
// mode (Exclusive, Shared, Semaphore of up to math.MaxInt32 permits) and a
// FIFO queue; Transaction and Legacy modes implement Exclusive only. Tokens
// are not durable (DurableTokens is false): the fencing counter is as
// durable as the server's persistence, which the driver cannot vouch for.
// Leases expire on the server's clock except in Legacy mode. MaxTTL is
// package dlock's default (7 days), which every mode carries.
func (d *Driver) Capabilities() driver.Capabilities { return d.caps }

// Close implements driver.Driver: it stops the pub/sub connection and, for
// a driver opened from a URL, closes the client. Holds are left alone.
func (d *Driver) Close() error {
	if !d.closed.CompareAndSwap(false, true) {
		return nil
	}
	err := d.n.close()
	if d.owns {
		err = errors.Join(err, d.client.Close())
	}
	return err
}

// check rejects calls on a closed driver, with a done context or in a mode
// the driver does not implement.
func (d *Driver) check(ctx context.Context, req *driver.Request) error {
	if d.closed.Load() {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if req != nil && !d.caps.Modes.Has(req.Mode) {
		return fmt.Errorf("%s locks in %s mode: %w", req.Mode, d.cfg.mode, driver.ErrUnsupported)
	}
	return nil
}

// fail wraps err with the operation and key, and with ctx's error when the
// context has ended (see ctxerr.Wrap): go-redis reports a deadline that
// passed as a bare I/O timeout, and does not watch cancellation at all, so
// a cancelled call on a hung server fails with an I/O timeout when the
// client's read timeout ends. Every error a method returns goes through
// fail.
func fail(ctx context.Context, op, key string, err error) error {
	if ctxerr.Err(ctx) != nil {
		return fmt.Errorf("redisdlock: %s %q: %w", op, key, ctxerr.Wrap(ctx, err))
	}
	if strings.HasPrefix(err.Error(), "WRONGTYPE") {
		err = fmt.Errorf("%w (the key is used by something other than a lock of this mode)", err)
	}
	return fmt.Errorf("redisdlock: %s %q: %w", op, key, err)
}

// grant returns the lease the store applies for ttl: whole milliseconds, or
// whole legacy units.
func (d *Driver) grant(ttl time.Duration) time.Duration {
	if d.cfg.mode == Legacy {
		return max(ttl.Truncate(d.cfg.unit), d.cfg.unit)
	}
	return max(ttl.Truncate(time.Millisecond), time.Millisecond)
}

// Acquire implements driver.Driver.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := d.check(ctx, &req); err != nil {
		return driver.Result{}, fail(ctx, "acquire", req.Key, err)
	}
	ttl := d.grant(req.TTL)
	res, err := d.proto.acquire(ctx, d.stepLayout(req.Key, true), req, ttl)
	if err != nil {
		var ack *ackError
		if errors.As(err, &ack) {
			// The lock may be held without the replicas the caller asked
			// for: give it back.
			d.cleanup(req)
			err = ack.err
		}
		return driver.Result{}, fail(ctx, "acquire", req.Key, err)
	}
	if res.Acquired && ttl != req.TTL {
		res.TTL = ttl
	}
	return res, nil
}

// AcquireAll implements driver.MultiAcquirer in Script mode: one script
// takes every lock or none. It returns driver.ErrUnsupported in the other
// modes, and on Redis Cluster for keys that are not all in one hash slot
// (see the package documentation on hash tags).
func (d *Driver) AcquireAll(ctx context.Context, reqs []driver.Request) (driver.MultiResult, error) {
	if len(reqs) == 0 {
		return driver.MultiResult{}, fmt.Errorf("redisdlock: acquire-all: no requests")
	}
	if d.cfg.mode != Script {
		return driver.MultiResult{}, fmt.Errorf("redisdlock: acquire-all in %s mode: %w", d.cfg.mode, driver.ErrUnsupported)
	}
	ks := make([]layout, len(reqs))
	ttls := make([]time.Duration, len(reqs))
	for i := range reqs {
		if err := d.check(ctx, &reqs[i]); err != nil {
			return driver.MultiResult{}, fail(ctx, "acquire", reqs[i].Key, err)
		}
		ks[i], ttls[i] = d.layout(reqs[i].Key), d.grant(reqs[i].TTL)
		if d.cluster != nil && slot(ks[i].lock) != slot(ks[0].lock) {
			return driver.MultiResult{}, fmt.Errorf("redisdlock: acquire-all: %q and %q are in different Cluster slots: %w", reqs[0].Key, reqs[i].Key, driver.ErrUnsupported)
		}
	}
	res, err := scriptProto{d}.acquireAll(ctx, ks, reqs, ttls)
	if err != nil {
		var ack *ackError
		if errors.As(err, &ack) {
			// The locks may be held without the replicas the caller
			// asked for: give them back.
			for _, req := range reqs {
				d.cleanup(req)
			}
			err = ack.err
		}
		return driver.MultiResult{}, fail(ctx, fmt.Sprintf("acquire-all of %d locks from", len(reqs)), reqs[0].Key, err)
	}
	for i := range res.Results {
		if ttls[i] != reqs[i].TTL {
			res.Results[i].TTL = ttls[i]
		}
	}
	return res, nil
}

// cleanup releases req's hold without the caller's context.
func (d *Driver) cleanup(req driver.Request) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = d.proto.release(ctx, d.layout(req.Key), req)
}

const cleanupTimeout = 5 * time.Second

// Refresh implements driver.Driver.
func (d *Driver) Refresh(ctx context.Context, req driver.Request) error {
	if err := d.check(ctx, &req); err != nil {
		return fail(ctx, "refresh", req.Key, err)
	}
	if err := d.proto.refresh(ctx, d.stepLayout(req.Key, false), req, d.grant(req.TTL)); err != nil {
		return fail(ctx, "refresh", req.Key, err)
	}
	return nil
}

// ReadHold implements driver.HoldReader: a script in Script mode, one
// MULTI/EXEC of reads in the others.
func (d *Driver) ReadHold(ctx context.Context, key, owner string) (driver.Holder, error) {
	if err := d.check(ctx, nil); err != nil {
		return driver.Holder{}, fail(ctx, "read hold", key, err)
	}
	h, err := d.proto.readHold(ctx, d.layout(key), key, owner)
	if err != nil {
		return driver.Holder{}, fail(ctx, "read hold", key, err)
	}
	return h, nil
}

// Release implements driver.Driver.
func (d *Driver) Release(ctx context.Context, req driver.Request) error {
	if err := d.check(ctx, &req); err != nil {
		return fail(ctx, "release", req.Key, err)
	}
	if err := d.proto.release(ctx, d.stepLayout(req.Key, false), req); err != nil {
		return fail(ctx, "release", req.Key, err)
	}
	return nil
}

// ForceRelease implements driver.ForceReleaser.
func (d *Driver) ForceRelease(ctx context.Context, key string) (int, error) {
	if err := d.check(ctx, nil); err != nil {
		return 0, fail(ctx, "force release", key, err)
	}
	n, err := d.proto.forceRelease(ctx, d.layout(key))
	if err != nil {
		return 0, fail(ctx, "force release", key, err)
	}
	return n, nil
}

// Subscribe implements driver.Notifier. In Script mode a waiter that queues
// (req.Queue) listens on a channel of its own, and is signalled when a
// change made after Subscribe returns may let it in: when it is at the head
// of the queue (or among the readers, or the waiters for free permits, at
// the head) and a hold or a queue entry ended, or a writer became a reader.
// Other waiters are signalled by every release of req.Key made through a
// driver of this package (any mode, any process) after Subscribe returns,
// of a hold that an Acquire of req.Owner found (an Acquire that finds the
// lock held marks the hold as awaited; package dlock attempts once more
// after Subscribe, and after every signal).
// Either way a subscription is signalled after the pub/sub connection was
// re-established (a release may have been missed meanwhile). All
// subscriptions of a Driver share one pub/sub connection. In Legacy mode,
// releases by services that speak the bare protocol are not signalled;
// waiters poll for those. See the notes in notify.go for drivers of older
// versions of this package.
func (d *Driver) Subscribe(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	if err := d.check(ctx, &req); err != nil {
		return nil, fail(ctx, "subscribe", req.Key, err)
	}
	ch := d.layout(req.Key).channel
	if d.cfg.mode == Script && req.Queue {
		ch = waiterChannel(ch, req.Owner)
	}
	s, err := d.n.subscribe(ctx, ch)
	if err != nil {
		return nil, fail(ctx, "subscribe", req.Key, err)
	}
	if d.cfg.mode == Script && req.Queue {
		s.grant = func(p string) (driver.Result, bool) { return d.granted(req, p) }
	}
	return s, nil
}

// List implements driver.Lister: it scans the keys under the driver's
// prefix (on every master of a Cluster). In Legacy mode it lists the
// holders that are dlock drivers; locks taken by services that speak the
// bare protocol carry no owner and are not listed.
func (d *Driver) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	if err := d.check(ctx, nil); err != nil {
		return nil, fail(ctx, "list", prefix, err)
	}
	var (
		mu  sync.Mutex
		all []driver.Holder
	)
	err := d.forEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		hs, err := d.proto.list(ctx, node, prefix)
		mu.Lock()
		all = append(all, hs...)
		mu.Unlock()
		return err
	})
	if err != nil {
		return nil, fail(ctx, "list", prefix, err)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Key != all[j].Key {
			return all[i].Key < all[j].Key
		}
		return all[i].Token < all[j].Token
	})
	return all, nil
}

// Count returns the number of lock records the store keeps for keys that
// start with prefix: live holds and, in Legacy mode, expired timestamps not
// yet removed. Fencing counters, which outlive locks by design, are not
// counted. Tests use it to check that nothing is left behind.
func (d *Driver) Count(ctx context.Context, prefix string) (int, error) {
	if err := d.check(ctx, nil); err != nil {
		return 0, fail(ctx, "count", prefix, err)
	}
	var (
		mu    sync.Mutex
		total int
	)
	err := d.forEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		n, err := d.proto.count(ctx, node, prefix)
		mu.Lock()
		total += n
		mu.Unlock()
		return err
	})
	if err != nil {
		return 0, fail(ctx, "count", prefix, err)
	}
	return total, nil
}

// forEachMaster calls fn for the server (standalone, Sentinel) or for every
// master of the Cluster, concurrently.
func (d *Driver) forEachMaster(ctx context.Context, fn func(ctx context.Context, node *redis.Client) error) error {
	if d.cluster != nil {
		return d.cluster.ForEachMaster(ctx, fn)
	}
	return fn(ctx, d.single)
}

// master returns the client of the master that holds key.
func (d *Driver) master(ctx context.Context, key string) (*redis.Client, error) {
	if d.cluster != nil {
		return d.cluster.MasterForKey(ctx, key)
	}
	return d.single, nil
}

// protocol is one mode's implementation of the atomic steps.
type protocol interface {
	acquire(ctx context.Context, k layout, req driver.Request, ttl time.Duration) (driver.Result, error)
	refresh(ctx context.Context, k layout, req driver.Request, ttl time.Duration) error
	release(ctx context.Context, k layout, req driver.Request) error
	// readHold returns owner's live hold on key, whose keys are k, and
	// driver.ErrNotOwner if it has none.
	readHold(ctx context.Context, k layout, key, owner string) (driver.Holder, error)
	forceRelease(ctx context.Context, k layout) (int, error)
	list(ctx context.Context, node *redis.Client, prefix string) ([]driver.Holder, error)
	count(ctx context.Context, node *redis.Client, prefix string) (int, error)
}

// ackError marks an error that happened after the lock was written: the
// replica acknowledgement failed, so Acquire must release the lock.
type ackError struct{ err error }

func (e *ackError) Error() string { return e.err.Error() }
func (e *ackError) Unwrap() error { return e.err }

// waiter is a connection WAIT can run on: the one that made the write.
type waiter interface {
	Wait(ctx context.Context, numSlaves int, timeout time.Duration) *redis.IntCmd
}

// awaitReplicas runs WAIT on the connection that wrote the lock, when
// WithReplicaAck asks for it.
func (d *Driver) awaitReplicas(ctx context.Context, w waiter) error {
	if d.cfg.replicas == 0 {
		return nil
	}
	n, err := w.Wait(ctx, d.cfg.replicas, d.cfg.replicaTimeout).Result()
	if err != nil {
		return &ackError{fmt.Errorf("WAIT %d %d: %w", d.cfg.replicas, d.cfg.replicaTimeout.Milliseconds(), err)}
	}
	if int(n) < d.cfg.replicas {
		return &ackError{fmt.Errorf("%w: %d of %d within %v", ErrReplicaAck, n, d.cfg.replicas, d.cfg.replicaTimeout)}
	}
	return nil
}

// scanKeys calls fn with batches of the keys on node that match pattern.
func scanKeys(ctx context.Context, node *redis.Client, pattern string, fn func(keys []string) error) error {
	var cursor uint64
	for {
		keys, next, err := node.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := fn(keys); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// retryAfter turns a PTTL reply into Result.RetryAfter (zero: unknown).
func retryAfter(pttl int64) time.Duration {
	if pttl <= 0 {
		return 0
	}
	return time.Duration(pttl) * time.Millisecond
}
