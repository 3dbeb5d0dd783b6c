package etcddlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/holds"
)

// Defaults of a Driver.
const (
	// DefaultPrefix is the prefix of the driver's etcd keys unless
	// WithPrefix says otherwise.
	DefaultPrefix = "/dlock/"
	// DefaultSessionTTL is the TTL of the driver's session lease unless
	// WithSessionTTL says otherwise.
	DefaultSessionTTL = 15 * time.Second
)

const (
	// maxKeyLen is the longest dlock key.
	maxKeyLen = 1024
	// minTTL is the shortest per-request lease: it is kept on this
	// process's clock, so it can be short.
	minTTL = 10 * time.Millisecond
	// backgroundTimeout bounds each request the driver makes on its own (a
	// session grant, the deletion of an expired hold, the revocation of an
	// ended session) and the transaction that creates an entry, which runs
	// to its reply even if its caller's context ends first.
	backgroundTimeout = 10 * time.Second
	// closeTimeout bounds the revocation of the session leases on Close.
	closeTimeout = 5 * time.Second
	// maxSessionTTL is the longest lease etcd grants.
	maxSessionTTL = 9_000_000_000 * time.Second
	// tombstoneTTL is how long the driver remembers an entry it lost.
	tombstoneTTL = time.Minute
	// maxRetryDelay caps the pause between attempts of background work that
	// failed (deleting an expired hold, finding a predecessor to watch).
	maxRetryDelay = 2 * time.Second
)

var errClosed = fmt.Errorf("etcddlock: driver closed: %w", dlock.ErrClosed)

// Driver is a dlock driver over an etcd v3 client. Create it with New, or with
// dlock.Open and an etcd:// URL. Besides driver.Driver it implements
// driver.Notifier, driver.Lister and driver.ForceReleaser. All methods are
// safe for concurrent use.
type Driver struct {
	cli        *clientv3.Client
	owns       bool
	prefix     string
	sessionTTL int64 // seconds asked of Grant
	caps       driver.Capabilities

	ctx    context.Context // cancelled by Close: ends all background work
	cancel context.CancelFunc
	table  *holds.Table[record] // this driver's entries, by holdID, with their local deadlines
	wg     sync.WaitGroup       // background goroutines

	mu     sync.Mutex
	closed bool
	sess   *session                      // the session new entries join; nil before the first
	leases map[clientv3.LeaseID]*session // the leases of sessions (and their delay leases) granted and not yet revoked
}

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.Notifier      = (*Driver)(nil)
	_ driver.Lister        = (*Driver)(nil)
	_ driver.ForceReleaser = (*Driver)(nil)
)

// record is what the driver remembers of one of its entries. When an entry
// is lost (its deadline passed, its session ended, it was deleted by someone
// else), its record stays for tombstoneTTL as a tombstone: the owner's later
// calls are answered ErrNotOwner, a waiter is never queued again at the back,
// and a late Release never deletes a newer entry of the same name.
type record struct {
	name     string        // the entry's etcd key
	mode     driver.Mode   // the entry's mode (Shared after a downgrade)
	limit    int           // the semaphore's limit, for a permit
	rev      int64         // the entry's CreateRevision: its incarnation, and the token once it holds
	delay    time.Duration // the hold's lock delay: the entry has a shadow (see shadowOf)
	sess     *session      // the session the entry is attached to
	slot     *slot         // the entry's name while in use; nil in a tombstone
	held     bool          // the entry was admitted (see admitted): the owner holds the key
	clear    bool          // nothing is ahead of the waiting entry any more (see follow): its next Acquire admits it
	wait     *blocker      // what kept the waiting entry out at its last Acquire, for Subscribe
	lost     bool          // a tombstone: the entry is no longer the owner's
	released bool          // Release handed the entry back to its deadline after a failed delete
}

// is compares the entry with the incarnation the record describes.
func (r record) is() []clientv3.Cmp { return isEntry(r.name, r.rev) }

// Option configures a Driver.
type Option func(*config)

type config struct {
	prefix     string
	sessionTTL time.Duration
}

// WithPrefix sets the prefix of the driver's etcd keys (default
// DefaultPrefix), to keep applications apart on one cluster. It must not be
// empty. Drivers that share a lock must use the same prefix.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithSessionTTL sets the TTL of the driver's session lease (default
// DefaultSessionTTL): how long after its last contact with etcd a process
// that died, paused or was cut off keeps its locks. etcd leases are whole
// seconds, so d is rounded up to the next second; the server may raise it
// further to its minimum lease TTL (about 1.5 times its election timeout,
// 2s with the defaults). A lock's validity is at most the session TTL the
// server granted, and the lock is renewed every third of that.
func WithSessionTTL(d time.Duration) Option {
	return func(c *config) { c.sessionTTL = d }
}

// New returns a driver over cli. The driver does not own the client: Close
// leaves it open. Bad options are reported as a *dlock.ArgError. The session
// lease is granted by the first acquisition, not by New.
func New(cli *clientv3.Client, opts ...Option) (*Driver, error) {
	return newDriver(cli, false, opts)
}

// configure applies opts to the defaults and checks the result.
func configure(opts []Option) (config, error) {
	cfg := config{prefix: DefaultPrefix, sessionTTL: DefaultSessionTTL}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cfg.prefix == "":
		return cfg, &dlock.ArgError{Name: "prefix", Value: cfg.prefix, Reason: "must not be empty: the driver's keys would mix with every other key of the cluster"}
	case cfg.sessionTTL <= 0:
		return cfg, &dlock.ArgError{Name: "session", Value: cfg.sessionTTL, Reason: "must be positive"}
	case cfg.sessionTTL > maxSessionTTL:
		return cfg, &dlock.ArgError{Name: "session", Value: cfg.sessionTTL, Reason: fmt.Sprintf("is longer than etcd leases can be (%v)", maxSessionTTL)}
	}
	return cfg, nil
}

func newDriver(cli *clientv3.Client, owns bool, opts []Option) (*Driver, error) {
	if cli == nil {
		return nil, &dlock.ArgError{Name: "client", Value: nil, Reason: "must not be nil"}
	}
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	d := &Driver{
		cli:        cli,
		owns:       owns,
		prefix:     cfg.prefix,
		sessionTTL: int64((cfg.sessionTTL + time.Second - 1) / time.Second),
		caps: driver.Capabilities{
			Modes:            driver.Modes(driver.Exclusive, driver.Shared, driver.Semaphore),
			FIFO:             true,
			DurableTokens:    true,
			ServerClock:      true,
			Consensus:        true,
			MaxKeyLen:        maxKeyLen,
			MinTTL:           minTTL,
			LockDelay:        true,
			SessionLockDelay: true,
		},
		leases: map[clientv3.LeaseID]*session{},
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.table = holds.New(d.expire)
	return d, nil
}

// Client returns the etcd client the driver uses.
func (d *Driver) Client() *clientv3.Client { return d.cli }

// Capabilities implements driver.Driver: exclusive locks, read-write locks
// and semaphores on one FIFO queue, durable tokens, expiry on the server's clock (through the session lease)
// and consensus; keys of up to 1024 bytes; TTLs from 10ms. See the package
// documentation.
func (d *Driver) Capabilities() driver.Capabilities { return d.caps }

func (d *Driver) check() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errClosed
	}
	return nil
}

func notHeld(key, why string) error {
	return fmt.Errorf("etcddlock: %q: %s: %w", key, why, driver.ErrNotOwner)
}

func isLeaseNotFound(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) }

// detach returns a context with ctx's values that ends backgroundTimeout
// from now or when the driver closes, whichever comes first, but not with
// ctx.
func (d *Driver) detach(ctx context.Context) (context.Context, context.CancelFunc) {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), backgroundTimeout)
	stop := context.AfterFunc(d.ctx, cancel)
	return tctx, func() {
		stop()
		cancel()
	}
}

// withCtx returns err, wrapping ctx's error too if ctx has ended.
func withCtx(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", cerr, err)
	}
	return err
}

// sleep waits for d or the end of ctx, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Close implements driver.Driver: it stops the driver's background work,
// revokes its session leases (which deletes every entry attached to them)
// and closes the client if the driver opened it. The delay leases of a
// session that had ended before stay until they expire, with the lock
// delay of its holds.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	delaying := map[clientv3.LeaseID]bool{}
	for id, s := range d.leases {
		delaying[id] = id != s.id && s.ended()
	}
	d.mu.Unlock()
	d.cancel()
	d.table.Close()
	d.wg.Wait()

	d.mu.Lock()
	leases := make([]clientv3.LeaseID, 0, len(d.leases))
	for id := range d.leases {
		leases = append(leases, id)
	}
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	var errs []error
	for _, id := range leases {
		if delaying[id] {
			continue
		}
		if _, err := d.cli.Revoke(ctx, id); err != nil && !isLeaseNotFound(err) {
			errs = append(errs, fmt.Errorf("etcddlock: revoking session lease %x: %w", int64(id), err))
		}
	}
	if d.owns {
		if err := d.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
