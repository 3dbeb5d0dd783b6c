// Package dlock provides distributed locks with leases, fencing tokens,
// automatic renewal and a lost-lock signal, over the stores teams already run.
//
// A Client wraps one backend (a driver.Driver): SQLite, PostgreSQL and
// MySQL/MariaDB through package sqldlock, an in-process store through memdlock,
// and the other backends in their own packages. Choose one in code with
// dlock.New(driver) or by URL with dlock.Open(ctx, "postgres://...") after
// importing the backend package, which registers its URL schemes.
//
// Every lock is a lease: the store forgets it after its TTL unless it is
// renewed, so a crashed holder cannot block others forever. A Lock renews
// itself in the background at a third of its TTL until released. Each Lock
// knows a conservative deadline, computed from the local monotonic clock read
// before the acquire request was sent, minus a drift margin; if renewal fails
// until that deadline, or the store reports another owner, the lock's Context
// is cancelled with ErrLost as its cause, before the store can hand the lock
// to anyone else. Work protected by a lock should watch that context.
//
// Every Lock carries a fencing token (Token) that strictly increases per key
// across all holders. A lease cannot stop a holder that was paused (a long GC
// pause, a stopped VM) from waking up after its lease ended; passing the token
// to the protected resource, which rejects tokens older than the newest it has
// seen, can. Package sqldlock's helpers and the backend table of docs/stores.md say
// which stores keep tokens durable.
//
// # Errors
//
// Every error wraps one of the sentinel errors, a context error, or an error
// from the store. The sentinels:
//
//   - ErrNotAcquired: Lock, TryLock or Do did not get the lock (it is held,
//     or the wait ended), with the reason where there is one (a context
//     error, ErrUnavailable, ErrClosed); a waiter whose place in the queue
//     ended with its session or lease (a failover) queues again at the
//     back;
//   - ErrNotHeld: Release, Refresh or ReleaseAfter of a lock that is not
//     held (released already, expired, detached), and Resume of a hold ID
//     whose hold the store no longer has;
//   - ErrLost: a held lock can no longer be trusted (it appears as the cause
//     of Lock.Context), and ErrMaxHold with it when WithMaxHold ended it;
//   - ErrInvalidArgument: bad input, as an *ArgError (below);
//   - ErrClosed: the Client was closed;
//   - ErrUnsupported: the backend cannot do what was asked (a mode, a fair
//     lock, listing holders, a forced release, a hold that outlives its
//     Client);
//   - ErrModeMismatch: the key is held in another mode than asked (a
//     Semaphore with another limit, a lock asked of a semaphore's key);
//   - ErrUpgrade: the holder of a read lock asked for the write lock;
//   - ErrUnavailable: the store could not be reached, or failed the last
//     attempt of a wait;
//   - ErrPermanent: the store failed in a way that asking again cannot mend
//     (refused credentials or permissions, an untrusted TLS certificate, a
//     missing table, a key of a foreign type): a wait ends at once, with
//     ErrUnavailable too. The backend's driver classifies its store's
//     errors (driver.Classifier).
//
// An error names the package once, at its start ("dlock: "), and the
// lock's key once, also where it wraps a driver's error that names the key
// itself; the sentinels' own texts carry no prefix.
//
// Bad input is rejected before anything reaches the store, with an
// *ArgError naming the bad value:
//
//   - a nil context;
//   - an empty key, a key longer than the backend's limit, a key that is not
//     valid UTF-8 or contains a NUL byte;
//   - a TTL that is zero, negative, below the backend's minimum or above its
//     maximum, or so short that the drift margin (DriftMargin) leaves no
//     validity;
//   - backoff bounds that are not positive or out of order;
//   - a lock delay (WithLockDelay) that is negative, that with the TTL passes
//     the backend's maximum lease, or that the backend cannot keep;
//   - a URL that does not parse or names an unknown scheme;
//   - a malformed hold ID (which the error does not show).
//
// Misuse is reported with sentinels and changes nothing on the store:
// Release or Refresh of a released or detached lock gives ErrNotHeld;
// Release or Refresh of a lost lock gives ErrLost; any use of a closed
// Client (and of its locks) gives ErrClosed.
//
// Each acquisition has an owner token, 26 base32 characters from
// crypto/rand (130 random bits), that the Lock handle keeps and the store compares on every refresh and release. It protects
// against mistakes, not against an adversary with access to the store: another
// process, or a stale handle of this one, cannot release or extend a hold it
// does not own, even one it held earlier, because its token no longer
// matches. The token is stored in plain text, though, so anyone who can read
// the store (or who is handed Client.Driver and a token) can act as the
// owner; guard the store as you guard the data the lock protects. Listings
// show only OwnerID, a hash of the token.
//
// # Holds that outlive the process
//
// A hold can outlive the Client and the process that took it, and be acted
// on from another: Lock.HoldID names it (its key and owner token, a secret
// like the token), Lock.Detach lets go of it without releasing it (it then
// lasts until its lease ends), and Client.Resume, given the hold ID in any
// process that uses the same store, checks it against the store and returns
// a Lock that extends (Refresh, or Resume with WithTTL), releases or
// detaches it again. A payment hold is one: taken when the order is placed,
// released on another server when the payment is confirmed. It needs a
// backend whose holds live on the store alone (Capabilities.PortableHolds:
// the SQL stores, Redis, Redlock, memcached and the in-process store);
// etcd's and ZooKeeper's holds end with the session of the client that took
// them, and Detach and Resume return ErrUnsupported there.
package dlock

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/url"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/errclass"
	"github.com/dlockhq/dlock/internal/inflight"
	"github.com/dlockhq/dlock/internal/redact"
)

// Holder describes one holder of a lock, as returned by Client.List.
type Holder = driver.Holder

// Capabilities describe what a backend does natively.
type Capabilities = driver.Capabilities

// Mode is the kind of a lock: ModeExclusive, ModeShared (the read side of a
// read-write lock) or ModeSemaphore. Lock.Mode and Holder.Mode report it.
type Mode = driver.Mode

// The modes of a lock (the same values as package driver's).
const (
	// ModeExclusive: at most one holder per key (Lock, TryLock, Do
	// without Shared or WithLimit).
	ModeExclusive = driver.Exclusive
	// ModeShared: the read side of a read-write lock (the Shared option).
	ModeShared = driver.Shared
	// ModeSemaphore: up to a limit of holders per key (the WithLimit
	// option).
	ModeSemaphore = driver.Semaphore
)

// Client acquires locks from one backend. It is safe for concurrent use.
// Close it to release its locks and the backend's resources.
type Client struct {
	drv      driver.Driver
	caps     driver.Capabilities
	notifier driver.Notifier
	cfg      clientConfig
	gates    gates

	// closing ends when Close begins: idle workers leave (see spawn).
	closing context.Context
	stop    context.CancelCauseFunc
	ops     tracker       // acquisitions in progress
	bg      tracker       // worker goroutines (see spawn)
	pool    inflight.Pool // runs driver requests on bg's workers

	mu        sync.Mutex
	closed    bool
	closeDone chan struct{} // closed when Close has finished
	locks     map[*Lock]struct{}
	bound     map[context.Context]context.CancelCauseFunc // the waits Close ends (see bind)
}

// New returns a Client over d. The Client owns d: Close closes it.
func New(d driver.Driver, opts ...Option) (*Client, error) {
	if d == nil {
		return nil, argError("driver", nil, "must not be nil")
	}
	cfg := clientConfig{defaultTTL: DefaultTTL}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	if cfg.info == "" {
		host, _ := os.Hostname()
		cfg.info = host + ":" + strconv.Itoa(os.Getpid())
	}
	if err := checkInfo(cfg.info); err != nil {
		return nil, err
	}
	c := &Client{drv: d, caps: normalize(d.Capabilities()), cfg: cfg, locks: map[*Lock]struct{}{}, bound: map[context.Context]context.CancelCauseFunc{}, gates: gates{m: map[string]*gate{}}}
	c.closing, c.stop = context.WithCancelCause(context.Background())
	c.pool = inflight.Pool{Tasks: make(chan inflight.Task), Workers: &c.bg.Tracker, Closing: c.closing.Done(), Idle: workerIdle}
	c.notifier, _ = d.(driver.Notifier)
	if err := c.checkLockTTL(cfg.defaultTTL); err != nil {
		return nil, err
	}
	if err := c.checkLockDelay(cfg.defaultTTL, cfg.lockDelay); err != nil {
		return nil, err
	}
	return c, nil
}

func normalize(caps driver.Capabilities) driver.Capabilities {
	caps.Modes |= driver.Modes(driver.Exclusive)
	caps.MaxKeyLen = cmp.Or(caps.MaxKeyLen, 1024)
	caps.MinTTL = cmp.Or(caps.MinTTL, 10*time.Millisecond)
	caps.MaxTTL = cmp.Or(caps.MaxTTL, DefaultMaxTTL)
	caps.MaxLimit = cmp.Or(caps.MaxLimit, math.MaxInt32)
	return caps
}

// OpenFunc opens a driver for a URL whose scheme it was registered for.
type OpenFunc func(ctx context.Context, u *url.URL) (driver.Driver, error)

var registry struct {
	sync.RWMutex
	m        map[string]OpenFunc
	classify map[string]driver.Classifier
}

// Register makes a backend available to Open under a URL scheme. Backend
// packages call it from init. classify, if given, tells which of open's
// errors are permanent, as the driver's own driver.Classifier does for its
// methods' (Open marks them ErrPermanent). It panics if open is nil or the
// scheme is already registered, as database/sql.Register does.
func Register(scheme string, open OpenFunc, classify ...driver.Classifier) {
	registry.Lock()
	defer registry.Unlock()
	if open == nil {
		panic("dlock: Register open func is nil")
	}
	if _, dup := registry.m[scheme]; dup {
		panic("dlock: Register called twice for scheme " + scheme)
	}
	if registry.m == nil {
		registry.m = map[string]OpenFunc{}
	}
	registry.m[scheme] = open
	if len(classify) > 0 {
		if registry.classify == nil {
			registry.classify = map[string]driver.Classifier{}
		}
		registry.classify[scheme] = classify[0]
	}
}

// Schemes returns the registered URL schemes, sorted.
func Schemes() []string {
	registry.RLock()
	defer registry.RUnlock()
	s := make([]string, 0, len(registry.m))
	for k := range registry.m {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// Open returns a Client for the backend named by rawURL's scheme, which must
// have been registered (import the backend package, e.g.
// `import _ "github.com/dlockhq/dlock/sqldlock/postgres"`). Every scheme
// takes the parameter lock_delay (lock_delay=5s), the Client's default lock
// delay (see WithDefaultLockDelay and WithLockDelay). Each backend
// bounds the connection by its URL's connect timeout (5s by default), so
// Open returns within it even if ctx has no deadline. A URL that does not
// parse, names an unknown scheme or a bad port, or that its backend
// refuses, is an *ArgError, with a hint at the URL meant where a typo is
// likely; a store that cannot be used is ErrUnavailable, and ErrPermanent
// too where asking again cannot mend it (refused credentials, an untrusted
// certificate).
func Open(ctx context.Context, rawURL string, opts ...Option) (*Client, error) {
	if ctx == nil {
		return nil, argError("ctx", nil, "must not be nil")
	}
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	delay, err := lockDelayParam(u)
	if err != nil {
		return nil, err
	}
	registry.RLock()
	open, classify := registry.m[u.Scheme], registry.classify[u.Scheme]
	registry.RUnlock()
	if open == nil {
		return nil, argError("url", redact.URL(u), "unknown scheme %q%s (known schemes: %s)", u.Scheme, schemeHint(u), strings.Join(Schemes(), ", "))
	}
	d, err := open(ctx, u)
	if err != nil {
		var ae *ArgError
		switch {
		case errors.As(err, &ae) && ae.Name == "url":
			if rest := rawURL[len(u.Scheme)+1:]; !strings.HasPrefix(rest, "//") && u.Scheme != "sqlite" { // sqlite:relative/path is a file
				// scheme:/host: the reason may quote the user
				// information, which the path then holds.
				meant := redact.String(u.Scheme + "://" + strings.TrimLeft(rest, "/"))
				return nil, argError("url", meant, "has no // after %s: (did you mean %s?)", u.Scheme, meant)
			}
			// It names the URL, and says dlock, already.
			return nil, err
		case errors.As(err, &ae):
		case errclass.By(classify, err):
			err = &permanentError{err: err, acquire: true}
		default:
			err = &unavailableError{err}
		}
		return nil, fmt.Errorf("dlock: open %s: %w", redact.URL(u), err)
	}
	c, err := New(d, append([]Option{WithDefaultLockDelay(delay)}, opts...)...)
	if err != nil {
		d.Close()
		return nil, err
	}
	return c, nil
}

// parseURL parses rawURL, a store's URL, which must have a scheme and
// valid ports.
func parseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the whole URL, password included: show only
		// its reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		hint := ""
		if strings.Contains(err.Error(), "first path segment in URL cannot contain colon") {
			hint = fmt.Sprintf(" (a URL begins with its store's scheme: write, say, redis://%s)", redact.String(rawURL))
		}
		return nil, argError("url", redact.String(rawURL), "does not parse: %v%s", err, hint)
	}
	if u.Scheme == "" {
		return nil, argError("url", redact.String(rawURL), "has no scheme (known schemes: %s)", strings.Join(Schemes(), ", "))
	}
	for _, h := range strings.Split(u.Host, ",") {
		if i := strings.LastIndexByte(h, ':'); i >= 0 && i < len(h)-1 && !strings.HasSuffix(h, "]") {
			if n, err := strconv.Atoi(h[i+1:]); err != nil || n < 1 || n > 65535 {
				return nil, argError("url", redact.URL(u), "bad port %q in %q (want a number from 1 to 65535)", h[i+1:], h)
			}
		}
	}
	return u, nil
}

// lockDelayParam takes the parameter lock_delay, which every scheme takes,
// out of u's query and returns its value (zero without it).
func lockDelayParam(u *url.URL) (time.Duration, error) {
	q := u.Query()
	vs, ok := q["lock_delay"]
	if !ok {
		return 0, nil
	}
	d, err := time.ParseDuration(vs[len(vs)-1])
	if err != nil || d < 0 {
		return 0, argError("url", redact.URL(u), "lock_delay=%q is not a duration of zero or more (write lock_delay=5s)", vs[len(vs)-1])
	}
	q.Del("lock_delay")
	u.RawQuery = q.Encode()
	return d, nil
}

// schemeHint returns a hint at the scheme meant by u, whose scheme is
// unknown, or "".
func schemeHint(u *url.URL) string {
	if u.Opaque != "" && strings.Trim(u.Opaque, "0123456789") == "" {
		// host:port, which parses as scheme "host" and opaque "port".
		return fmt.Sprintf(": a URL begins with its store's scheme: write, say, redis://%s:%s", u.Scheme, u.Opaque)
	}
	meant, ok := map[string]string{
		"http": "etcd", "https": "etcd", "etcds": "etcd", "zookeeper": "zk", "mariadb": "mysql",
		"memcache": "memcached", "sqlite3": "sqlite", "file": "sqlite", "redis-sentinel": "redis+sentinel",
		"redis-cluster": "redis+cluster", "pg": "postgres", "postgre": "postgres",
	}[u.Scheme]
	if !ok {
		return ""
	}
	v := *u
	v.Scheme = meant
	if u.Scheme == "https" || u.Scheme == "etcds" {
		q := v.Query()
		q.Set("cacert", "CA.pem")
		v.RawQuery = q.Encode()
	}
	return fmt.Sprintf(" (did you mean %s?)", redact.URL(&v))
}

// Capabilities reports what the backend does natively.
func (c *Client) Capabilities() Capabilities { return c.caps }

// MaxReleaseAfter returns the longest hold Lock.ReleaseAfter accepts on this
// Client's backend: its longest lease (Capabilities.MaxTTL) less the two
// units of its lease clock (Capabilities.TTLResolution) that ReleaseAfter
// adds, so that the hold lasts at least as long as asked. Check a hold
// against it before the work it follows, as package job does for AtLeast.
func (c *Client) MaxReleaseAfter() time.Duration {
	return c.caps.MaxTTL - 2*c.caps.TTLResolution
}

// Driver returns the backend driver, for backend-specific operations.
func (c *Client) Driver() driver.Driver { return c.drv }

// Lock acquires the lock named key, waiting until it is free. The context
// bounds the wait only: the lock itself lives until it is released or lost,
// see Lock.Context. When ctx ends first, the error wraps both ErrNotAcquired
// and ctx.Err(), and nothing is left behind on the store.
//
// If the store fails the first attempt, Lock returns that error at once (the
// store is down or misconfigured), and so it does whenever the failure is
// permanent (ErrPermanent: refused credentials, a missing table). Once the
// store has answered, other failures while waiting are logged and retried
// with backoff until ctx ends.
//
// Goroutines of one Client waiting for the same key queue locally, so that
// only one of them at a time waits on the store.
//
// A lock is not reentrant by default: a second Lock of a held key on the
// same Client waits for the first to be released (and TryLock fails), even
// from the same goroutine. To re-enter, pass a context derived from the held
// lock's Context (or the context Do gives its function): Lock then returns
// the held lock itself at once, with the same fencing token, and counts the
// acquisition; the lock is released when Release has been called once per
// acquisition. Options of a re-entering call are ignored, and re-entering a
// lock that has ended fails with ErrNotAcquired wrapping the reason.
func (c *Client) Lock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, key, true, opts, nil)
}

// TryLock makes one attempt to acquire the lock named key. If the lock is
// held, it returns an error wrapping ErrNotAcquired at once.
func (c *Client) TryLock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, key, false, opts, nil)
}

// Do acquires the lock named key (waiting as Lock does), runs fn while holding
// it, and releases it. The context fn receives is cancelled when ctx is or
// when the lock is lost; fn should stop its work then. Do returns fn's error;
// if fn succeeded but the lock was lost while it ran, Do returns an error
// wrapping ErrLost, because the work may have overlapped another holder's.
//
// The lock is released however fn ends: by returning, by panicking (the
// panic goes on after the release, to be recovered or not by the caller) or
// by runtime.Goexit; and even if ctx has ended by then (see Lock.Release).
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) (err error) {
	if fn == nil {
		return argError("fn", nil, "must not be nil")
	}
	l, err := c.Lock(ctx, key, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(withHeld(ctx, l))
	lctx := l.Context()
	stop := context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) })
	defer func() {
		// Runs on return, panic and Goexit alike.
		stop()
		cancel(nil)
		if rerr := l.Release(ctx); err == nil {
			err = rerr
		}
	}()
	return fn(fctx, l)
}

// List returns the live holders of keys that start with prefix. Each
// Holder's Owner is the owner's public OwnerID, not its secret token. It
// returns an error wrapping ErrUnsupported if the backend cannot list.
func (c *Client) List(ctx context.Context, prefix string) ([]Holder, error) {
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	l, ok := c.drv.(driver.Lister)
	if !ok {
		return nil, fmt.Errorf("dlock: listing holders: %w", ErrUnsupported)
	}
	hs, _, err := do(c, ctx, func(ctx context.Context) ([]Holder, error) { return l.List(ctx, prefix) })
	for i := range hs {
		hs[i].Owner = OwnerID(hs[i].Owner)
	}
	return hs, err
}

// OwnerID returns the public identifier of an owner token: 32 hex digits of
// its SHA-256 hash, which tell holders apart in listings without revealing
// the token (whose bearer could refresh or release the lock). At 128 bits it
// is also unique enough for drivers to name a holder's record by it, as the
// etcd and ZooKeeper drivers do. Client.List reports owners this way, and
// Lock.OwnerID gives the same value for a held lock.
func OwnerID(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:16])
}

// ForceRelease removes every holder of key, whoever owns it, and reports how
// many holds it removed. It is meant for operators clearing a stuck lock; the
// holders see their locks as lost at their next renewal. It returns an error
// wrapping ErrUnsupported if the backend cannot do it.
func (c *Client) ForceRelease(ctx context.Context, key string) (int, error) {
	if err := c.check(ctx); err != nil {
		return 0, err
	}
	if err := c.checkKey(key); err != nil {
		return 0, err
	}
	f, ok := c.drv.(driver.ForceReleaser)
	if !ok {
		return 0, fmt.Errorf("dlock: forced release of %q: %w", key, ErrUnsupported)
	}
	n, _, err := do(c, ctx, func(ctx context.Context) (int, error) { return f.ForceRelease(ctx, key) })
	return n, err
}

// Close shuts the Client down. It ends every acquisition in progress at once
// (Lock, TryLock and Do return errors wrapping ErrClosed), waits until their
// attempts are cleaned up on the store, releases every lock the Client holds
// but detached ones (their contexts end with cause ErrClosed), waits for requests still in
// flight (each bounded by its own timeout), and then closes the backend. Later
// calls on the Client or its locks return ErrClosed. Close is idempotent, and
// a concurrent second call returns once the first has finished.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		done := c.closeDone
		c.mu.Unlock()
		<-done
		return nil
	}
	c.closed = true
	c.closeDone = make(chan struct{})
	for _, cancel := range c.bound {
		cancel(ErrClosed)
	}
	c.mu.Unlock()
	defer close(c.closeDone)

	c.stop(ErrClosed)
	c.ops.wait(cleanupTimeout)
	c.mu.Lock()
	locks := slices.Collect(maps.Keys(c.locks))
	c.mu.Unlock()
	errs := make([]error, len(locks)+1)
	var wg sync.WaitGroup
	for i, l := range locks {
		wg.Go(func() { errs[i] = l.closeLock() })
	}
	wg.Wait()
	c.bg.wait(cleanupTimeout)
	errs[len(locks)] = c.drv.Close()
	return errors.Join(errs...)
}

// enter registers an acquisition, unless the Client is closed.
func (c *Client) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.ops.add()
	return true
}

// bind returns a context that ends when ctx does or when Close begins, and
// its cancel function, which the caller passes to unbind when done.
func (c *Client) bind(ctx context.Context) (context.Context, context.CancelCauseFunc) {
	bctx, cancel := context.WithCancelCause(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cancel(ErrClosed)
	}
	c.bound[bctx] = cancel
	return bctx, cancel
}

// unbind ends a context that bind returned.
func (c *Client) unbind(bctx context.Context, cancel context.CancelCauseFunc) {
	c.mu.Lock()
	delete(c.bound, bctx)
	c.mu.Unlock()
	cancel(nil)
}

// why returns the reason a bound context (see bind) of the caller's ctx
// ended: ctx's error, or ErrClosed.
func why(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return ErrClosed
}

func (c *Client) check(ctx context.Context) error {
	if ctx == nil {
		return argError("ctx", nil, "must not be nil")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}

func (c *Client) checkKey(key string) error {
	switch {
	case key == "":
		return argError("key", key, "must not be empty")
	case len(key) > c.caps.MaxKeyLen:
		return argError("key", key, "is %d bytes, longer than this backend's limit of %d", len(key), c.caps.MaxKeyLen)
	case !utf8.ValidString(key):
		return argError("key", key, "is not valid UTF-8")
	case strings.IndexByte(key, 0) >= 0:
		return argError("key", key, "contains a NUL byte")
	}
	return nil
}

func (c *Client) checkTTL(ttl time.Duration) error {
	switch {
	case ttl <= 0:
		return argError("ttl", ttl, "must be positive")
	case ttl < c.caps.MinTTL:
		return argError("ttl", ttl, "is below this backend's minimum of %v", c.caps.MinTTL)
	case ttl > c.caps.MaxTTL:
		return argError("ttl", ttl, "is above this backend's maximum of %v", c.caps.MaxTTL)
	}
	return nil
}

// checkLockTTL checks the TTL of a lock to be held: besides being a lease the
// backend accepts, it must leave some validity after the drift margin.
func (c *Client) checkLockTTL(ttl time.Duration) error {
	if err := c.checkTTL(ttl); err != nil {
		return err
	}
	if ttl <= DriftMargin(ttl) {
		return argError("ttl", ttl, "leaves no validity after the drift margin of %v", DriftMargin(ttl))
	}
	return nil
}

func (c *Client) lockConfig(opts []LockOption) (lockConfig, error) {
	cfg := lockConfig{ttl: c.cfg.defaultTTL, delay: c.cfg.lockDelay, renew: true, minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff}
	for _, o := range opts {
		o(&cfg)
	}
	if err := c.checkLockTTL(cfg.ttl); err != nil {
		return cfg, err
	}
	if err := c.checkLockDelay(cfg.ttl, cfg.delay); err != nil {
		return cfg, err
	}
	if cfg.info != nil {
		if err := checkInfo(*cfg.info); err != nil {
			return cfg, err
		}
	}
	if cfg.minBackoff <= 0 {
		return cfg, argError("backoff min", cfg.minBackoff, "must be positive")
	}
	if cfg.maxBackoff < cfg.minBackoff {
		return cfg, argError("backoff max", cfg.maxBackoff, "is below the minimum %v", cfg.minBackoff)
	}
	if cfg.limit != nil {
		if cfg.shared {
			return cfg, argError("limit", *cfg.limit, "cannot be combined with Shared: a key is a semaphore or a read-write lock")
		}
		if *cfg.limit < 1 {
			return cfg, argError("limit", *cfg.limit, "must be at least 1")
		}
		if *cfg.limit > c.caps.MaxLimit {
			return cfg, argError("limit", *cfg.limit, "is above this backend's maximum of %d", c.caps.MaxLimit)
		}
	}
	if err := c.checkMaxHold(cfg.maxHold); err != nil {
		return cfg, err
	}
	if m, _ := cfg.mode(); !c.caps.Modes.Has(m) {
		return cfg, fmt.Errorf("dlock: %s locks: %w", m, ErrUnsupported)
	}
	return cfg, nil
}

func (c *Client) track(l *Lock) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.locks[l] = struct{}{}
	return true
}

func (c *Client) forget(l *Lock) {
	c.mu.Lock()
	delete(c.locks, l)
	c.mu.Unlock()
}

// observe reports e to the observer. A panic in the observer is logged, not
// passed on: raised in the middle of an acquisition, a renewal or a release,
// it would leave a lock held, or end the process from a timer's goroutine.
func (c *Client) observe(e Event) {
	if c.cfg.observer == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			c.cfg.logger.Error("dlock: observer panicked", "event", e.Kind, "key", e.Key, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	c.cfg.observer.Observe(e)
}

// newOwner returns a fresh owner token: 26 base32 characters of crypto/rand
// (130 bits).
func newOwner() string { return rand.Text() }

// DriftMargin is what dlock subtracts from a lease to get the holder's own
// validity: 1% of the lease for clock-rate differences plus 2ms for timer and
// scheduling delays (the Redlock margin). A lock is valid until the time
// before its acquire or refresh request was sent, plus the lease, minus
// DriftMargin(lease).
func DriftMargin(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

// DefaultMaxTTL is the longest lease dlock accepts on a backend that declares
// no maximum of its own (Capabilities.MaxTTL). A lock is a lease, renewed while
// its holder lives; a lease of days is already a hold that outlives its
// holder, and longer ones are almost always a unit mistake (100000h).
const DefaultMaxTTL = 7 * 24 * time.Hour

// MaxInfoLen is the longest owner info (WithOwnerInfo, WithInfo) in bytes.
// Info is stored with every hold and shown by listings; longer text is
// refused with an *ArgError on every backend, so that no store is asked to
// keep a record it may reject or choke on.
const MaxInfoLen = 1024

func checkInfo(info string) error {
	switch {
	case len(info) > MaxInfoLen:
		return argError("info", info, "is %d bytes, longer than the maximum of %d", len(info), MaxInfoLen)
	case !utf8.ValidString(info):
		return argError("info", info, "is not valid UTF-8")
	case strings.IndexByte(info, 0) >= 0:
		return argError("info", info, "contains a NUL byte")
	}
	return nil
}

// cleanupTimeout bounds the best-effort releases dlock makes on its own
// (after a failed acquire, on Close).
const cleanupTimeout = 5 * time.Second
