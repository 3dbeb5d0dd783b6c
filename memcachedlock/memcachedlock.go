package memcachedlock

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// DefaultPrefix is the prefix of the driver's memcached keys unless
// WithPrefix says otherwise.
const DefaultPrefix = "dlock:"

const (
	// memcached's limit on key length.
	maxItemKey = 250
	// MaxPrefixLen is the longest prefix WithPrefix accepts: it leaves room
	// for a hashed key.
	MaxPrefixLen = 128
	// maxKeyLen is the longest dlock key; longer encodings are hashed, so
	// the limit is a sanity bound, not memcached's.
	maxKeyLen = 1024
	// minTTL keeps the reported lease (one second less than the stored
	// expiry) at one second or more.
	minTTL = 2 * time.Second
	// maxTTL is the longest relative expiry memcached accepts; larger
	// values are read as absolute Unix times.
	maxTTL = 30 * 24 * time.Hour
)

// Driver is a dlock driver over a gomemcache client. Create it with New, or
// with dlock.Open and a memcached:// URL. Besides driver.Driver it
// implements driver.ForceReleaser and driver.HoldReader. All methods are
// safe for concurrent use.
type Driver struct {
	mc     *memcache.Client
	owns   bool
	prefix string
	caps   driver.Capabilities

	closed atomic.Bool
}

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.ForceReleaser = (*Driver)(nil)
	_ driver.HoldReader    = (*Driver)(nil)
)

// Option configures a Driver.
type Option func(*config)

type config struct {
	prefix string
}

// WithPrefix sets the prefix of the driver's memcached keys (default
// DefaultPrefix), to keep several applications apart on one server. It may
// be empty; it must be printable ASCII without spaces and at most
// MaxPrefixLen bytes.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// New returns a driver over client. The driver does not own the client:
// Close leaves it open. Bad options are reported as a *dlock.ArgError.
//
// gomemcache keeps only two idle connections per server by default
// (memcache.DefaultMaxIdleConns); with many goroutines taking locks, raise
// client.MaxIdleConns to about their number, or connections are opened and
// closed for every request.
func New(client *memcache.Client, opts ...Option) (*Driver, error) {
	return newDriver(client, false, opts)
}

func newDriver(client *memcache.Client, owns bool, opts []Option) (*Driver, error) {
	cfg := config{prefix: DefaultPrefix}
	for _, o := range opts {
		o(&cfg)
	}
	if client == nil {
		return nil, &dlock.ArgError{Name: "client", Value: nil, Reason: "must not be nil"}
	}
	if len(cfg.prefix) > MaxPrefixLen {
		return nil, &dlock.ArgError{Name: "prefix", Value: cfg.prefix, Reason: fmt.Sprintf("is longer than %d bytes", MaxPrefixLen)}
	}
	for i := 0; i < len(cfg.prefix); i++ {
		if c := cfg.prefix[i]; c <= ' ' || c >= 0x7f {
			return nil, &dlock.ArgError{Name: "prefix", Value: cfg.prefix, Reason: fmt.Sprintf("has byte %#02x at %d; memcached keys are printable ASCII without spaces", c, i)}
		}
	}
	return &Driver{
		mc:     client,
		owns:   owns,
		prefix: cfg.prefix,
		caps: driver.Capabilities{
			Modes:         driver.Modes(driver.Exclusive),
			DurableTokens: false,
			ServerClock:   true,
			Consensus:     false,
			MaxKeyLen:     maxKeyLen,
			MinTTL:        minTTL,
			MaxTTL:        maxTTL,
			TTLResolution: time.Second,
			PortableHolds: true, // an item with its owner and expiry
			LockDelay:     true, // the lease is a TTL on the record
		},
	}, nil
}

// Client returns the gomemcache client the driver uses.
func (d *Driver) Client() *memcache.Client { return d.mc }

// Capabilities implements driver.Driver: exclusive locks only, leases on
// the server's clock, tokens that are not durable, no consensus, keys of up
// to 1024 bytes, TTLs from 2s to 30 days. See the package documentation.
func (d *Driver) Capabilities() driver.Capabilities { return d.caps }

// ---- keys and values ----

// encodeKey returns the memcached key for a dlock key: kind ("l" for the
// lock item, "t" for the fencing counter) and the encoded key after the
// prefix.
func (d *Driver) encodeKey(kind, key string) string {
	room := maxItemKey - len(d.prefix) - len(kind) - 1
	var b strings.Builder
	b.Grow(len(d.prefix) + len(kind) + 1 + len(key))
	b.WriteString(d.prefix)
	b.WriteString(kind)
	b.WriteByte(':')
	start := b.Len()
	for i := 0; i < len(key); i++ {
		if b.Len()-start > room {
			break
		}
		c := key[i]
		if c > ' ' && c < 0x7f && c != '%' {
			b.WriteByte(c)
		} else {
			const hexdigits = "0123456789ABCDEF"
			b.WriteByte('%')
			b.WriteByte(hexdigits[c>>4])
			b.WriteByte(hexdigits[c&15])
		}
	}
	if b.Len()-start <= room {
		return b.String()
	}
	sum := sha256.Sum256([]byte(key))
	return d.prefix + kind + ":%h" + base64.RawURLEncoding.EncodeToString(sum[:])
}

func (d *Driver) lockKey(key string) string    { return d.encodeKey("l", key) }
func (d *Driver) counterKey(key string) string { return d.encodeKey("t", key) }

// The lock item's value is "TOKEN OWNER".
func encodeValue(token uint64, owner string) []byte {
	return fmt.Appendf(nil, "%d %s", token, owner)
}

func decodeValue(v []byte) (token uint64, owner string, ok bool) {
	t, o, found := strings.Cut(string(v), " ")
	if !found {
		return 0, "", false
	}
	token, err := strconv.ParseUint(t, 10, 64)
	return token, o, err == nil
}

// expiry returns the memcached expiry for a lease of ttl, and the lease to
// report: the item lives more than expiry-1 seconds and at most expiry
// seconds (see "Lease rounding" in the package documentation).
func expiry(ttl time.Duration) (exp int32, granted time.Duration) {
	n := int32(min(ttl, maxTTL) / time.Second)
	return n, time.Duration(n-1) * time.Second
}

// now is the clock that seeds a lost fencing counter; tests replace it.
var now = time.Now

// ---- calls ----

// run runs fn, a sequence of gomemcache requests. gomemcache has no
// contexts: once started, fn runs to the client's network timeout
// (memcache.Client.Timeout) whatever ctx does, and package dlock, which never
// waits on a driver past its caller's context, returns promptly on its own
// (see "Contexts" in package driver). An error of fn after ctx ended wraps
// ctx.Err().
func (d *Driver) run(ctx context.Context, fn func() error) error {
	if d.closed.Load() {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err := fn()
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}

var errClosed = errors.New("memcachedlock: driver closed")

func check(req driver.Request) error {
	if req.Mode != driver.Exclusive {
		return fmt.Errorf("memcachedlock: %s mode: %w", req.Mode, driver.ErrUnsupported)
	}
	return nil
}

// checkTTL guards against callers that bypass package dlock's validation:
// an expiry of 0 would never expire, and one over 30 days is a date.
func checkTTL(req driver.Request) error {
	if req.TTL < minTTL || req.TTL > maxTTL {
		return fmt.Errorf("memcachedlock: TTL %v outside [%v, %v]: %w", req.TTL, minTTL, maxTTL, driver.ErrUnsupported)
	}
	return nil
}

// ---- the driver ----

// Acquire implements driver.Driver: incr on the key's counter for the token,
// then add of the lock item with the lease. See the package documentation.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := errors.Join(check(req), checkTTL(req)); err != nil {
		return driver.Result{}, err
	}
	var res driver.Result
	err := d.run(ctx, func() error {
		var err error
		res, err = d.acquire(ctx, req)
		return err
	})
	if err != nil {
		return driver.Result{}, fmt.Errorf("memcachedlock: acquire %q: %w", req.Key, err)
	}
	return res, nil
}

func (d *Driver) acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	token, err := d.nextToken(req.Key)
	if err != nil {
		return driver.Result{}, err
	}
	return d.take(ctx, req, token)
}

// take tries to take the lock with a token drawn before.
func (d *Driver) take(ctx context.Context, req driver.Request, token uint64) (driver.Result, error) {
	if err := ctx.Err(); err != nil {
		return driver.Result{}, err
	}
	exp, granted := expiry(req.TTL)
	lk := d.lockKey(req.Key)
	err := d.mc.Add(&memcache.Item{Key: lk, Value: encodeValue(token, req.Owner), Expiration: exp})
	switch {
	case err == nil:
		return d.fresh(req, token, exp, granted)
	case !errors.Is(err, memcache.ErrNotStored):
		return driver.Result{}, err
	}
	// Taken: by this owner (a repeated Acquire renews) or by another.
	it, err := d.mc.Get(lk)
	switch {
	case errors.Is(err, memcache.ErrCacheMiss):
		// Freed in between: worth another attempt soon.
		return driver.Result{RetryAfter: time.Millisecond}, nil
	case err != nil:
		return driver.Result{}, err
	}
	held, owner, ok := decodeValue(it.Value)
	if !ok || owner != req.Owner {
		// memcached cannot say when the holder's item expires.
		return driver.Result{}, nil
	}
	if err := d.renew(it, req.Owner, exp); err != nil {
		if errors.Is(err, driver.ErrNotOwner) {
			return driver.Result{RetryAfter: time.Millisecond}, nil
		}
		return driver.Result{}, err
	}
	return driver.Result{Acquired: true, Token: held, TTL: granted}, nil
}

// fresh makes sure that the token of a hold just taken with add is above the
// token of every earlier holder. The token was drawn before the add, so a
// contender that drew a larger one may have held the key and released it in
// between; the counter then shows a value above the token, and the holder
// draws again, now that it holds the key (every later holder draws after it),
// and writes the new token into its item with cas. Uncontended, this costs
// one read of the counter.
func (d *Driver) fresh(req driver.Request, token uint64, exp int32, granted time.Duration) (driver.Result, error) {
	cur, err := d.mc.Increment(d.counterKey(req.Key), 0)
	if err == nil && cur == token {
		return driver.Result{Acquired: true, Token: token, TTL: granted}, nil
	}
	if err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
		return driver.Result{}, err // unknown outcome: the caller releases
	}
	if token, err = d.nextToken(req.Key); err != nil {
		return driver.Result{}, err
	}
	it, err := d.owned(d.lockKey(req.Key), req.Owner)
	switch {
	case errors.Is(err, driver.ErrNotOwner):
		return driver.Result{RetryAfter: time.Millisecond}, nil // its lease ran out already
	case err != nil:
		return driver.Result{}, err
	}
	it.Value, it.Expiration = encodeValue(token, req.Owner), exp
	switch err := d.mc.CompareAndSwap(it); {
	case err == nil:
		return driver.Result{Acquired: true, Token: token, TTL: granted}, nil
	case errors.Is(err, memcache.ErrCASConflict), errors.Is(err, memcache.ErrNotStored), errors.Is(err, memcache.ErrCacheMiss):
		// The item changed: its lease ran out and the key moved on.
		return driver.Result{RetryAfter: time.Millisecond}, nil
	default:
		return driver.Result{}, err
	}
}

// nextToken increments the key's fencing counter, creating it if it is
// missing (first use, eviction, restart, flush_all), seeded with the
// current time in microseconds.
func (d *Driver) nextToken(key string) (uint64, error) {
	ck := d.counterKey(key)
	v, err := d.mc.Increment(ck, 1)
	if !errors.Is(err, memcache.ErrCacheMiss) {
		return v, err
	}
	seed := strconv.FormatUint(uint64(max(now().UnixMicro(), 0)), 10)
	err = d.mc.Add(&memcache.Item{Key: ck, Value: []byte(seed)}) // no expiry
	if err != nil && !errors.Is(err, memcache.ErrNotStored) {
		return 0, err // ErrNotStored: another client created it first
	}
	return d.mc.Increment(ck, 1)
}

// renew writes it (read with gets, and owned by owner) back with a new
// expiry through cas, or a tombstone (exp < 0) that is expired at once. If
// the item changed since it was read (another cas of the same hold, a
// concurrent refresh), it is read again: if it is still owner's, the cas is
// repeated, up to casRuns times in all; if not (or it is gone), the error
// wraps driver.ErrNotOwner.
func (d *Driver) renew(it *memcache.Item, owner string, exp int32) error {
	for attempt := 1; ; attempt++ {
		it.Expiration = exp
		if exp < 0 {
			it.Value = nil
		}
		err := d.mc.CompareAndSwap(it)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, memcache.ErrCacheMiss), errors.Is(err, memcache.ErrNotStored):
			return driver.ErrNotOwner
		case !errors.Is(err, memcache.ErrCASConflict) || attempt == casRuns:
			return err
		}
		if it, err = d.owned(it.Key, owner); err != nil {
			return err
		}
	}
}

// casRuns bounds renew: each conflict is another client's cas that
// succeeded, so only a hold written by more than casRuns clients at once,
// or again and again, exhausts it.
const casRuns = 32

// owned reads the lock item lk with gets and returns it if owner holds it;
// otherwise the error wraps driver.ErrNotOwner.
func (d *Driver) owned(lk, owner string) (*memcache.Item, error) {
	it, err := d.mc.Get(lk)
	if errors.Is(err, memcache.ErrCacheMiss) {
		return nil, driver.ErrNotOwner
	}
	if err != nil {
		return nil, err
	}
	if _, o, ok := decodeValue(it.Value); !ok || o != owner {
		return nil, driver.ErrNotOwner
	}
	return it, nil
}

// Refresh implements driver.Driver: gets, an owner check and cas with the
// new expiry.
func (d *Driver) Refresh(ctx context.Context, req driver.Request) error {
	if err := errors.Join(check(req), checkTTL(req)); err != nil {
		return err
	}
	exp, _ := expiry(req.TTL)
	return d.renewOwned(ctx, "refresh", req, exp)
}

// renewOwned renews req's hold with expiry exp (removes it, exp < 0) if it
// is the owner's, for the operation op.
func (d *Driver) renewOwned(ctx context.Context, op string, req driver.Request, exp int32) error {
	err := d.run(ctx, func() error {
		it, err := d.owned(d.lockKey(req.Key), req.Owner)
		if err != nil {
			return err
		}
		return d.renew(it, req.Owner, exp)
	})
	if err != nil {
		return fmt.Errorf("memcachedlock: %s %q: %w", op, req.Key, err)
	}
	return nil
}

// ReadHold implements driver.HoldReader: a get of the lock item. memcached
// does not tell an item's expiry, so the Holder's TTL is zero.
func (d *Driver) ReadHold(ctx context.Context, key, owner string) (driver.Holder, error) {
	var h driver.Holder
	err := d.run(ctx, func() error {
		it, err := d.owned(d.lockKey(key), owner)
		if err != nil {
			return err
		}
		token, _, _ := decodeValue(it.Value)
		h = driver.Holder{Key: key, Owner: owner, Mode: driver.Exclusive, Token: token}
		return nil
	})
	if err != nil {
		return driver.Holder{}, fmt.Errorf("memcachedlock: read hold %q: %w", key, err)
	}
	return h, nil
}

// Release implements driver.Driver: gets, an owner check and cas to an
// expired tombstone, which removes the item only if it is still the
// owner's. See the package documentation.
func (d *Driver) Release(ctx context.Context, req driver.Request) error {
	if err := check(req); err != nil {
		return err
	}
	return d.renewOwned(ctx, "release", req, -1)
}

// ForceRelease implements driver.ForceReleaser: it deletes the lock item,
// whoever holds it. The fencing counter stays.
func (d *Driver) ForceRelease(ctx context.Context, key string) (int, error) {
	n := 0
	err := d.run(ctx, func() error {
		err := d.mc.Delete(d.lockKey(key))
		switch {
		case err == nil:
			n = 1
		case errors.Is(err, memcache.ErrCacheMiss):
		default:
			return err
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("memcachedlock: force release %q: %w", key, err)
	}
	return n, nil
}

// Close implements driver.Driver: for a driver opened from a URL, it closes
// the client's connections. Holds are left alone.
func (d *Driver) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	if d.owns {
		return d.mc.Close()
	}
	return nil
}
