package etcddlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
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
	leases map[clientv3.LeaseID]*session // sessions granted and not yet revoked
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
// calls are answered ErrNotHeld, a waiter is never queued again at the back,
// and a late Release never deletes a newer entry of the same name.
type record struct {
	name     string      // the entry's etcd key
	mode     driver.Mode // the entry's mode (Shared after a downgrade)
	limit    int         // the semaphore's limit, for a permit
	rev      int64       // the entry's CreateRevision: its incarnation, and the token once it holds
	sess     *session    // the session the entry is attached to
	slot     *slot       // the entry's name while in use; nil in a tombstone
	held     bool        // the entry was admitted (see admitted): the owner holds the key
	lost     bool        // a tombstone: the entry is no longer the owner's
	released bool        // Release handed the entry back to its deadline after a failed delete
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
			Modes:         driver.Modes(driver.Exclusive, driver.Shared, driver.Semaphore),
			FIFO:          true,
			DurableTokens: true,
			ServerClock:   true,
			Consensus:     true,
			MaxKeyLen:     maxKeyLen,
			MinTTL:        minTTL,
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

// ---- names and values ----

// queuePrefix returns the prefix of the entries of key's queue. dlock keys
// contain no NUL byte, so the NUL ends the key: no key's queue overlaps
// another's.
func (d *Driver) queuePrefix(key string) string { return d.prefix + key + "\x00" }

// entryName returns the etcd key of the entry of key's queue that has slot n
// of lease: the queue prefix, the lease ID in 16 hex digits, a dot and the
// slot in 8 hex digits. Only the driver that holds the lease creates names
// with it.
func (d *Driver) entryName(key string, lease clientv3.LeaseID, n uint32) string {
	return fmt.Sprintf("%s%016x.%08x", d.queuePrefix(key), uint64(lease), n)
}

// permitName is entryName for a permit of a semaphore with limit n: the
// queue prefix, "s", the limit in 16 hex digits, a dot, and then the lease
// and slot as in entryName. Permits of one limit share the name prefix
// semPrefix(key, limit), and "s" sorts after every hex digit, so the names of
// exclusive and shared entries, of permits, and of permits of other limits
// are ranges of their own: a transaction can check that a queue has none of
// another kind with one comparison per range (see modeGuard).
func (d *Driver) permitName(key string, limit int, lease clientv3.LeaseID, n uint32) string {
	return fmt.Sprintf("%s%016x.%08x", d.semPrefix(key, limit), uint64(lease), n)
}

// semPrefix returns the prefix of the names of the permits of key's
// semaphore with the given limit.
func (d *Driver) semPrefix(key string, limit int) string {
	return fmt.Sprintf("%ss%016x.", d.queuePrefix(key), uint64(limit))
}

// modeGuard returns the comparisons that hold when key's queue has no entry
// that a new entry of mode m (and limit n) could not share the key with:
// for a lock (Exclusive or Shared) no permit; for a permit no lock entry and
// no permit of another limit. They compare the CreateRevision of name
// ranges (which is 0 for a range without keys), so they hold for an empty
// queue and cost the server a walk of ranges that are empty on a key used
// consistently.
func (d *Driver) modeGuard(key string, m driver.Mode, n int) []clientv3.Cmp {
	qp := d.queuePrefix(key)
	sem := qp + "s"
	if m != driver.Semaphore {
		return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(sem), "=", 0).WithPrefix()}
	}
	mine := d.semPrefix(key, n)
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(qp), "=", 0).WithRange(sem),
		clientv3.Compare(clientv3.CreateRevision(sem), "=", 0).WithRange(mine),
		clientv3.Compare(clientv3.CreateRevision(clientv3.GetPrefixRangeEnd(mine)), "=", 0).WithRange(clientv3.GetPrefixRangeEnd(sem)),
	}
}

// holdID identifies the hold of the owner with dlock.OwnerID ownerID on key in
// the driver's table. Entry names are
// reused by later owners, so the driver keeps its records by owner.
func holdID(key, ownerID string) string { return key + "\x00" + ownerID }

func reqID(req driver.Request) string { return holdID(req.Key, dlock.OwnerID(req.Owner)) }

// parseEntry returns the dlock key of an entry's etcd key.
func (d *Driver) parseEntry(k string) (key string, ok bool) {
	rest, ok := strings.CutPrefix(k, d.prefix)
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, 0)
	if i <= 0 {
		return "", false
	}
	return rest[:i], true
}

// slot is an entry name of a session, in use by one owner of the driver from
// claim until the driver knows that the entry is gone from the store (it was
// released, or expired and deleted, or found missing, or the Acquire that
// claimed it created nothing). A driver normally has one owner per key at a
// time, so it creates the same name, slot 0 of its session, over and over:
// etcd then keeps one key in its index per session and lock rather than one
// per acquisition (deleted keys stay in the index, and range reads of the
// queue walk them, until the next compaction).
type slot struct {
	name  string
	key   string
	n     uint32
	sess  *session
	freed atomic.Bool
}

// claim returns the lowest slot of key on s that no owner of the driver uses,
// named for an entry of mode m (and limit n, for a semaphore).
func (d *Driver) claim(s *session, key string, m driver.Mode, limit int) *slot {
	s.slotMu.Lock()
	defer s.slotMu.Unlock()
	if s.slots == nil {
		s.slots = map[string][]uint64{}
	}
	used := s.slots[key]
	i := 0
	for i < len(used) && used[i] == ^uint64(0) {
		i++
	}
	if i == len(used) {
		used = append(used, 0)
	}
	b := bits.TrailingZeros64(^used[i])
	used[i] |= 1 << b
	s.slots[key] = used
	n := uint32(i*64 + b)
	name := d.entryName(key, s.id, n)
	if m == driver.Semaphore {
		name = d.permitName(key, limit, s.id, n)
	}
	return &slot{name: name, key: key, n: n, sess: s}
}

// free hands the slot back for reuse; only the first call counts. A nil slot
// (of a tombstone) is ignored.
func (sl *slot) free() {
	if sl == nil || !sl.freed.CompareAndSwap(false, true) {
		return
	}
	s := sl.sess
	s.slotMu.Lock()
	defer s.slotMu.Unlock()
	used := s.slots[sl.key]
	used[sl.n/64] &^= 1 << (sl.n % 64)
	for len(used) > 0 && used[len(used)-1] == 0 {
		used = used[:len(used)-1]
	}
	if len(used) == 0 {
		delete(s.slots, sl.key)
	} else {
		s.slots[sl.key] = used
	}
}

// value is an entry's value: the raw owner (Lister reports it), the
// holder's Info, and the mode of the entry: "shared" or "semaphore" (with its
// limit), or nothing for an exclusive entry. A downgrade rewrites it.
type value struct {
	Owner string `json:"owner"`
	Info  string `json:"info,omitempty"`
	Mode  string `json:"mode,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

func encodeValue(owner, info string, m driver.Mode, limit int) string {
	v := value{Owner: owner, Info: info}
	if m != driver.Exclusive {
		v.Mode = m.String()
	}
	if m == driver.Semaphore {
		v.Limit = limit
	}
	b, _ := json.Marshal(v) // strings always marshal
	return string(b)
}

// decode returns an entry's value. A foreign value decodes as an exclusive
// entry of nobody: it keeps readers out rather than letting them in.
func decode(kv *mvccpb.KeyValue) value {
	var v value
	if kv != nil {
		_ = json.Unmarshal(kv.Value, &v)
	}
	return v
}

// mode returns the mode the value records.
func (v value) mode() driver.Mode {
	switch v.Mode {
	case driver.Shared.String():
		return driver.Shared
	case driver.Semaphore.String():
		return driver.Semaphore
	}
	return driver.Exclusive
}

// admitted reports whether the entry at index i of kvs, entries of one queue
// in CreateRevision order starting with its first, may hold the key: an
// exclusive entry if it is first, a shared one if no exclusive entry is
// ahead of it, a permit if fewer than its limit are.
func admitted(kvs []*mvccpb.KeyValue, i int) bool {
	v := decode(kvs[i])
	switch v.mode() {
	case driver.Shared:
		for _, kv := range kvs[:i] {
			if decode(kv).mode() == driver.Exclusive {
				return false
			}
		}
		return true
	case driver.Semaphore:
		return i < v.Limit
	}
	return i == 0
}

// holding returns the entries of a queue (all of it, in CreateRevision
// order) that hold the key: the first if it is exclusive, otherwise every
// one that admitted allows (they come first in the queue).
func holding(kvs []*mvccpb.KeyValue) []*mvccpb.KeyValue {
	n := 0
	for n < len(kvs) && admitted(kvs, n) {
		n++
	}
	return kvs[:n]
}

// compatible reports whether an entry allows a request of mode m and limit
// n on its key (see modeGuard); a nil entry (an empty queue) allows all.
func compatible(kv *mvccpb.KeyValue, m driver.Mode, n int) bool {
	if kv == nil {
		return true
	}
	v := decode(kv)
	if (v.mode() == driver.Semaphore) != (m == driver.Semaphore) {
		return false
	}
	return m != driver.Semaphore || v.Limit == n
}

func mismatch(key string, kv *mvccpb.KeyValue, m driver.Mode, n int) error {
	v := decode(kv)
	return fmt.Errorf("etcddlock: %q is in use as %s (limit %d), asked for %s (limit %d): %w",
		key, v.mode(), v.Limit, m, n, driver.ErrModeMismatch)
}

// ownerOf returns the raw owner in an entry's value ("" for a foreign value
// or a nil entry).
func ownerOf(kv *mvccpb.KeyValue) string { return decode(kv).Owner }

// isEntry compares an entry with one incarnation of it: the entry name exists
// and was created at revision rev.
//
// Names are reused, so a name alone does not say whose entry it is: after an
// owner's entry is gone, a later owner of the same driver and key may create
// the same name again. Every transaction that checks, refreshes or deletes an
// entry on behalf of an owner therefore compares its CreateRevision, the
// incarnation: etcd gives each creation of a key the revision of its
// transaction, so no two incarnations of a name share one, and a late
// Release, Refresh or expiry of an earlier owner finds the newer entry
// different and leaves it alone. (The value, which names the owner, is not
// compared: a downgrade rewrites it within one incarnation.)
func isEntry(name string, rev int64) []clientv3.Cmp {
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(name), "=", rev)}
}

// ---- the driver contract ----

func (d *Driver) check() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errClosed
	}
	return nil
}

func notHeld(key, why string) error {
	return fmt.Errorf("etcddlock: %q: %s: %w", key, why, driver.ErrNotHeld)
}

func isLeaseNotFound(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) }

// firstOp reads the first entry of key's queue, with its value: the holder
// of an exclusive lock, and on any key the entry that shows which mode the
// key is in use as.
func (d *Driver) firstOp(key string) clientv3.Op {
	return clientv3.OpGet(d.queuePrefix(key), clientv3.WithFirstCreate()...)
}

// aheadOp reads, oldest first, the entries of key's queue that decide
// whether an entry of mode m (and limit n) created at revision rev is
// admitted: for an exclusive entry the first of the queue, for a permit the
// first n, and for a shared entry every entry up to its own, with their
// values (the reader is admitted if none of them is exclusive). A rev of 0
// reads the queue as a transaction that creates the entry sees it: the
// entry is then the last. keysOnly leaves out the values where admission
// does not need them.
func (d *Driver) aheadOp(key string, m driver.Mode, n int, rev int64, keysOnly bool) clientv3.Op {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}
	switch m {
	case driver.Exclusive:
		opts = append(opts, clientv3.WithLimit(1))
	case driver.Semaphore:
		opts = append(opts, clientv3.WithLimit(int64(n)))
	default:
		keysOnly = false
		if rev > 0 {
			opts = append(opts, clientv3.WithMaxCreateRev(rev))
		}
	}
	if keysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	return clientv3.OpGet(d.queuePrefix(key), opts...)
}

// rangeKVs returns the entries a range response read.
func rangeKVs(r *pb.ResponseOp) []*mvccpb.KeyValue { return r.GetResponseRange().GetKvs() }

// firstKV returns the entry a firstOp read, or nil if the queue was empty.
func firstKV(r *pb.ResponseOp) *mvccpb.KeyValue {
	if kvs := rangeKVs(r); len(kvs) > 0 {
		return kvs[0]
	}
	return nil
}

// admits reports whether the entries an aheadOp read for an entry of mode m
// admit the entry name.
func admits(kvs []*mvccpb.KeyValue, name string, m driver.Mode) bool {
	i := slices.IndexFunc(kvs, func(kv *mvccpb.KeyValue) bool { return string(kv.Key) == name })
	switch {
	case i < 0:
		return false // not among the first (exclusive) or the first n (permit)
	case m == driver.Shared:
		return !slices.ContainsFunc(kvs[:i], func(kv *mvccpb.KeyValue) bool { return decode(kv).mode() == driver.Exclusive })
	case m == driver.Exclusive:
		return i == 0
	}
	return true
}

// elsewhere returns an entry among kvs (read by an aheadOp, with values)
// other than name that belongs to owner and holds the key, or nil.
func elsewhere(kvs []*mvccpb.KeyValue, name, owner string) *mvccpb.KeyValue {
	for i, kv := range kvs {
		if string(kv.Key) != name && ownerOf(kv) == owner && admitted(kvs, i) {
			return kv
		}
	}
	return nil
}

// validity returns the lease to report for a hold acquired by a call that
// started at start: the request's TTL, but no more than the session's TTL and
// than the session lease is known to last from then.
func validity(req driver.Request, s *session, start time.Time) time.Duration {
	return min(req.TTL, s.ttl, s.left(start))
}

// renewal starts a KeepAliveOnce of s's lease for an acquisition that starts
// at t, to run alongside its transaction, unless an earlier renewal leaves
// enough of the lease (see session.needsProof); it returns nil then.
func (d *Driver) renewal(ctx context.Context, s *session, t time.Time, req driver.Request) *proof {
	if !s.needsProof(t, min(req.TTL, s.ttl)) {
		return nil
	}
	return d.keepAlive(ctx, s.id, s, s.ttl)
}

// Acquire implements driver.Driver. A new owner's entry is created in one
// transaction; an owner the driver already knows (a waiter asking again, a
// holder acquiring again or downgrading) is checked by its entry's
// CreateRevision. A KeepAliveOnce of the session lease runs alongside when
// the latest renewal does not cover the lease to report. See the package
// documentation.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := d.check(); err != nil {
		return driver.Result{}, err
	}
	switch {
	case !d.caps.Modes.Has(req.Mode):
		return driver.Result{}, fmt.Errorf("etcddlock: %v mode: %w", req.Mode, driver.ErrUnsupported)
	case req.Mode == driver.Semaphore && req.Limit < 1:
		return driver.Result{}, &dlock.ArgError{Name: "limit", Value: req.Limit, Reason: "must be at least 1"}
	}
	id := reqID(req)
	if rec, ok := d.table.Get(id); ok {
		if rec.lost {
			return driver.Result{}, notHeld(req.Key, "its entry was lost")
		}
		return d.reacquire(ctx, req, id, rec)
	}
	res, retry, err := d.create(ctx, req, id)
	if retry {
		// Nothing was created: the session had ended on the server
		// before this process noticed (start a new one), or the name
		// was taken (take the next).
		res, _, err = d.create(ctx, req, id)
	}
	return res, err
}

// reacquire is Acquire for an owner whose entry the driver knows: a waiter
// asking again, a holder acquiring again, or an exclusive holder asking for
// a shared hold (a downgrade, which rewrites the entry's value: the Put keeps
// its CreateRevision, hence its token, and wakes the readers that wait for
// it).
func (d *Driver) reacquire(ctx context.Context, req driver.Request, id string, rec record) (driver.Result, error) {
	if rec.sess.ended() {
		d.lose(id, rec)
		return driver.Result{}, notHeld(req.Key, "the session of its entry ended")
	}
	downgrade := false
	switch {
	case (rec.mode == driver.Semaphore) != (req.Mode == driver.Semaphore) || rec.mode == driver.Semaphore && rec.limit != req.Limit:
		return driver.Result{}, fmt.Errorf("etcddlock: %q: the owner's entry is %s (limit %d), asked for %s (limit %d): %w",
			req.Key, rec.mode, rec.limit, req.Mode, req.Limit, driver.ErrModeMismatch)
	case rec.mode == driver.Shared && req.Mode == driver.Exclusive:
		return driver.Result{}, fmt.Errorf("etcddlock: %q: an upgrade from shared to exclusive: %w", req.Key, driver.ErrModeMismatch)
	case rec.mode == driver.Exclusive && req.Mode == driver.Shared:
		if !rec.held {
			return driver.Result{}, fmt.Errorf("etcddlock: %q: the owner waits for an exclusive hold, asked for a shared one: %w", req.Key, driver.ErrModeMismatch)
		}
		downgrade = true
	}
	var then []clientv3.Op
	switch {
	case downgrade:
		then = append(then, clientv3.OpPut(rec.name, encodeValue(req.Owner, req.Info, driver.Shared, 0), clientv3.WithIgnoreLease()))
	case !rec.held:
		then = append(then, d.aheadOp(req.Key, rec.mode, rec.limit, rec.rev, true))
	}
	start := time.Now()
	p := d.renewal(ctx, rec.sess, start, req)
	resp, err := d.cli.Txn(ctx).If(rec.is()...).Then(then...).Commit()
	if err != nil {
		p.stop()
		return driver.Result{}, fmt.Errorf("etcddlock: acquire %q: %w", req.Key, err)
	}
	_, kerr := p.wait()
	if !resp.Succeeded {
		d.lose(id, rec)
		return driver.Result{}, notHeld(req.Key, "its entry is gone")
	}
	if downgrade {
		// The entry is shared now, whatever the renewal's outcome.
		d.table.Update(id, func(r record) record {
			if r.rev == rec.rev {
				r.mode = driver.Shared
			}
			return r
		})
	}
	if kerr != nil {
		if isLeaseNotFound(kerr) {
			rec.sess.kill()
			d.lose(id, rec)
			return driver.Result{}, notHeld(req.Key, "the session of its entry ended")
		}
		return driver.Result{}, fmt.Errorf("etcddlock: acquire %q: renewing the session: %w", req.Key, kerr)
	}
	held := rec.held || admits(rangeKVs(resp.Responses[0]), rec.name, rec.mode)
	if held && !rec.held {
		d.table.Update(id, func(r record) record {
			if r.rev == rec.rev {
				r.held = true
			}
			return r
		})
	}
	if !d.table.Touch(id, req.TTL) {
		return driver.Result{}, notHeld(req.Key, "its lease ran out")
	}
	if !held {
		return driver.Result{}, nil
	}
	return driver.Result{Acquired: true, Token: uint64(rec.rev), TTL: validity(req, rec.sess, start)}, nil
}

// create is Acquire for an owner the driver does not know: one transaction
// that creates its entry, in a slot of the session it claims, when it may,
// and reads what decides whether it holds the key.
//
// An exclusive request without Queue (TryLock) creates its entry only if the
// queue is empty: it never waits in line. Every other request creates its
// entry if the slot's name is free and the queue has no entry of a mode it
// cannot share the key with (modeGuard), and reads the entries ahead of it
// (aheadOp). A shared entry or a permit that is not admitted at once and
// whose request has no Queue is deleted again by a second transaction. A
// transaction that creates nothing reads the first entry: it shows a mode
// mismatch, or the holder.
//
// retry reports that nothing was created and another attempt may succeed:
// the session had ended unnoticed, or the slot's name was taken.
func (d *Driver) create(ctx context.Context, req driver.Request, id string) (_ driver.Result, retry bool, _ error) {
	s, err := d.session(ctx)
	if err != nil {
		return driver.Result{}, false, err
	}
	sl := d.claim(s, req.Key, req.Mode, req.Limit)
	qp := d.queuePrefix(req.Key)
	val := encodeValue(req.Owner, req.Info, req.Mode, req.Limit)
	first := d.firstOp(req.Key)
	guarded := req.Queue || req.Mode != driver.Exclusive
	cond := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(qp), "=", 0).WithPrefix()}
	then := []clientv3.Op{clientv3.OpPut(sl.name, val, clientv3.WithLease(s.id))}
	if guarded {
		// Never overwrite: a Put on an existing key keeps its
		// CreateRevision, which would hand out an old token.
		cond = append(d.modeGuard(req.Key, req.Mode, req.Limit), clientv3.Compare(clientv3.CreateRevision(sl.name), "=", 0))
		then = append(then, d.aheadOp(req.Key, req.Mode, req.Limit, 0, false))
	}
	created := func(resp *clientv3.TxnResponse) (record, bool) {
		if !resp.Succeeded {
			return record{}, false
		}
		rec := record{name: sl.name, rev: resp.Header.Revision, sess: s, slot: sl, mode: req.Mode, limit: req.Limit, held: true}
		if guarded {
			rec.held = admits(rangeKVs(resp.Responses[1]), sl.name, req.Mode)
		}
		return rec, true
	}
	start := time.Now()
	p := d.renewal(ctx, s, start, req)
	// The transaction runs to its reply even if ctx ends first: a
	// creation cancelled on the wire may still be applied by the server,
	// after the Release that follows has looked for it. With the outcome
	// known, the entry is recorded and that Release removes it.
	tctx, cancel := d.detach(ctx)
	resp, err := d.cli.Txn(tctx).If(cond...).Then(then...).Else(first).Commit()
	cancel()
	if err != nil {
		p.stop()
		err = fmt.Errorf("etcddlock: acquire %q: %w", req.Key, withCtx(ctx, err))
		if isLeaseNotFound(err) {
			s.kill()
			sl.free()
			return driver.Result{}, true, err
		}
		// The entry may have been created (the request outlived
		// backgroundTimeout or Close): its slot stays in use for the
		// rest of the session, and the Release that follows an error
		// finds the entry by its owner.
		return driver.Result{}, false, err
	}
	rec, ok := created(resp)
	if ok {
		d.table.Put(id, rec, req.TTL)
	}
	if _, kerr := p.wait(); kerr != nil {
		// A created entry stays recorded: the Release that follows an
		// error removes it.
		if isLeaseNotFound(kerr) {
			s.kill()
		}
		return driver.Result{}, false, fmt.Errorf("etcddlock: acquire %q: renewing the session: %w", req.Key, kerr)
	}
	if ok {
		if rec.held {
			return driver.Result{Acquired: true, Token: uint64(rec.rev), TTL: validity(req, s, start)}, false, nil
		}
		kv := elsewhere(rangeKVs(resp.Responses[1]), sl.name, req.Owner)
		if kv == nil && req.Queue {
			return driver.Result{}, false, nil // queued
		}
		// Without Queue the entry goes again; and an owner that holds
		// the key through an entry this driver does not record needs
		// no place in the queue.
		d.table.Take(id)
		if _, err := d.remove(ctx, id, rec); err != nil {
			return driver.Result{}, false, fmt.Errorf("etcddlock: acquire %q: %w", req.Key, err)
		}
		if kv == nil {
			return driver.Result{}, false, nil
		}
		res, err := d.heldElsewhere(ctx, req, kv)
		return res, false, err
	}
	kv := firstKV(resp.Responses[0])
	switch {
	case !compatible(kv, req.Mode, req.Limit):
		sl.free()
		return driver.Result{}, false, mismatch(req.Key, kv, req.Mode, req.Limit)
	case guarded:
		// The name is taken by an entry this driver did not know of
		// (created by a request whose outcome it never learnt): its
		// slot stays in use for the rest of the session.
		return driver.Result{}, true, fmt.Errorf("etcddlock: acquire %q: entry name %q in use", req.Key, sl.name)
	}
	// Nothing was created: the key is held.
	sl.free()
	if ownerOf(kv) != req.Owner {
		return driver.Result{}, false, nil
	}
	res, err := d.heldElsewhere(ctx, req, kv)
	return res, false, err
}

// heldElsewhere is Acquire for an owner whose entry kv holds the key but is
// not recorded by the driver. A shared request for an exclusive entry
// downgrades it; other requests of another mode are refused.
func (d *Driver) heldElsewhere(ctx context.Context, req driver.Request, kv *mvccpb.KeyValue) (driver.Result, error) {
	if ls := d.sessionOf(clientv3.LeaseID(kv.Lease)); ls != nil {
		if ls.ended() {
			return driver.Result{}, nil // it goes with its session
		}
		// An entry of this driver that it no longer records: its lease
		// ran out and it is being removed.
		return driver.Result{}, notHeld(req.Key, "its lease ran out")
	}
	// The owner's entry was made by another driver (another process
	// acquiring for the same owner).
	v := decode(kv)
	downgrade := v.mode() == driver.Exclusive && req.Mode == driver.Shared
	if v.mode() != req.Mode && !downgrade {
		return driver.Result{}, fmt.Errorf("etcddlock: %q: the owner holds it as %s, asked for %s: %w", req.Key, v.mode(), req.Mode, driver.ErrModeMismatch)
	}
	session, err := d.prove(ctx, clientv3.LeaseID(kv.Lease))
	if err != nil {
		if isLeaseNotFound(err) {
			return driver.Result{}, nil
		}
		return driver.Result{}, fmt.Errorf("etcddlock: acquire %q: renewing the session: %w", req.Key, err)
	}
	if downgrade {
		name := string(kv.Key)
		resp, err := d.cli.Txn(ctx).If(isEntry(name, kv.CreateRevision)...).
			Then(clientv3.OpPut(name, encodeValue(v.Owner, v.Info, driver.Shared, 0), clientv3.WithIgnoreLease())).
			Commit()
		switch {
		case err != nil:
			return driver.Result{}, fmt.Errorf("etcddlock: downgrade %q: %w", req.Key, err)
		case !resp.Succeeded:
			return driver.Result{}, notHeld(req.Key, "its entry is gone")
		}
	}
	return driver.Result{Acquired: true, Token: uint64(kv.CreateRevision), TTL: min(req.TTL, session)}, nil
}

// Refresh implements driver.Driver: it checks that the owner's entry is the
// same incarnation and still holds the key, proves the session alive with a
// KeepAliveOnce sent alongside, and moves the entry's local deadline to
// req.TTL from now.
func (d *Driver) Refresh(ctx context.Context, req driver.Request) error {
	if err := d.check(); err != nil {
		return err
	}
	id := reqID(req)
	rec, ok := d.table.Get(id)
	switch {
	case !ok:
		return d.refreshUnknown(ctx, req)
	case rec.lost:
		return notHeld(req.Key, "its entry was lost")
	case !rec.held:
		return notHeld(req.Key, "the owner waits in the queue")
	case rec.sess.ended():
		d.lose(id, rec)
		return notHeld(req.Key, "the session of its entry ended")
	}
	p := d.keepAlive(ctx, rec.sess.id, rec.sess, rec.sess.ttl)
	resp, err := d.cli.Txn(ctx).If(rec.is()...).Commit()
	if err != nil {
		p.stop()
		return fmt.Errorf("etcddlock: refresh %q: %w", req.Key, err)
	}
	_, kerr := p.wait()
	if !resp.Succeeded {
		d.lose(id, rec)
		return notHeld(req.Key, "its entry is gone")
	}
	if kerr != nil {
		if isLeaseNotFound(kerr) {
			rec.sess.kill()
			d.lose(id, rec)
			return notHeld(req.Key, "the session of its entry ended")
		}
		return fmt.Errorf("etcddlock: refresh %q: renewing the session: %w", req.Key, kerr)
	}
	if !d.table.Touch(id, req.TTL) {
		return notHeld(req.Key, "its lease ran out")
	}
	return nil
}

// refreshUnknown is Refresh of an owner whose entry the driver does not
// record: it succeeds only for a hold made by another driver.
func (d *Driver) refreshUnknown(ctx context.Context, req driver.Request) error {
	resp, err := d.cli.Get(ctx, d.queuePrefix(req.Key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return fmt.Errorf("etcddlock: refresh %q: %w", req.Key, err)
	}
	var kv *mvccpb.KeyValue
	for _, h := range holding(resp.Kvs) {
		if ownerOf(h) == req.Owner {
			kv = h
		}
	}
	switch {
	case kv == nil:
		return notHeld(req.Key, "the owner does not hold the key")
	case d.sessionOf(clientv3.LeaseID(kv.Lease)) != nil:
		return notHeld(req.Key, "its lease ran out")
	}
	if _, err := d.prove(ctx, clientv3.LeaseID(kv.Lease)); err != nil {
		if isLeaseNotFound(err) {
			return notHeld(req.Key, "the session of its entry ended")
		}
		return fmt.Errorf("etcddlock: refresh %q: renewing the session: %w", req.Key, err)
	}
	return nil
}

// Release implements driver.Driver: it deletes the owner's entry (hold or
// queue entry) if it is still the incarnation the driver recorded. Without a
// record (a reply that was lost, an entry of another driver) it finds the
// owner's entries by their value among those of the key's queue.
func (d *Driver) Release(ctx context.Context, req driver.Request) error {
	if err := d.check(); err != nil {
		return err
	}
	id := reqID(req)
	if rec, ok := d.table.Take(id); ok {
		if rec.lost {
			// Whatever has this name now is a newer entry.
			return notHeld(req.Key, "its entry was lost")
		}
		deleted, err := d.remove(ctx, id, rec)
		switch {
		case err != nil:
			return fmt.Errorf("etcddlock: release %q: %w", req.Key, err)
		case !deleted || rec.sess.ended():
			return notHeld(req.Key, "its entry was gone")
		}
		return nil
	}
	return d.releaseUnknown(ctx, req)
}

// remove deletes the entry of rec, which the caller took from the table, if
// it is still that incarnation, and reports whether it was. If the request
// fails, the record goes back to the table with its deadline passed, so that
// expire deletes the entry, retrying.
func (d *Driver) remove(ctx context.Context, id string, rec record) (deleted bool, _ error) {
	resp, err := d.cli.Txn(ctx).If(rec.is()...).Then(clientv3.OpDelete(rec.name)).Commit()
	if err != nil {
		rec.released = true
		d.table.Put(id, rec, 0)
		return false, err
	}
	rec.slot.free()
	return resp.Succeeded, nil
}

// releaseUnknown is Release of an owner the driver has no record of. The
// owner's entries are found by the owner in their values: the driver reads
// the whole queue, so that entries of any session of this driver (the current
// one, one that just ended) or of another driver are found. Each is deleted
// only if it is still the incarnation read, so a live entry of another owner
// is never deleted. The slots of entries of this driver found here stay in use
// for the rest of their session.
func (d *Driver) releaseUnknown(ctx context.Context, req driver.Request) error {
	resp, err := d.cli.Get(ctx, d.queuePrefix(req.Key), clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("etcddlock: release %q: %w", req.Key, err)
	}
	var deleted, mine bool
	for _, kv := range resp.Kvs {
		if ownerOf(kv) != req.Owner {
			continue
		}
		name := string(kv.Key)
		r, err := d.cli.Txn(ctx).If(isEntry(name, kv.CreateRevision)...).Then(clientv3.OpDelete(name)).Commit()
		if err != nil {
			return fmt.Errorf("etcddlock: release %q: %w", req.Key, err)
		}
		if r.Succeeded {
			deleted = true
			mine = mine || d.sessionOf(clientv3.LeaseID(kv.Lease)) != nil
		}
	}
	switch {
	case !deleted:
		return notHeld(req.Key, "the owner has no entry")
	case mine:
		// An entry of this driver that it no longer recorded: its
		// lease had run out, or the Acquire that made it failed.
		return notHeld(req.Key, "its lease had run out")
	}
	return nil
}

// lose replaces the record of an entry that is no longer the owner's (it is
// gone, or its session ended) with a tombstone, and frees its slot.
func (d *Driver) lose(id string, rec record) {
	if cur, ok := d.table.Get(id); ok && cur.rev == rec.rev && !cur.lost {
		d.bury(id, rec)
		rec.slot.free()
	}
}

func (d *Driver) bury(id string, rec record) {
	d.table.Put(id, record{name: rec.name, rev: rec.rev, sess: rec.sess, lost: true}, tombstoneTTL)
}

// expire runs when an entry's local deadline passed: the owner stopped
// refreshing (or re-asking, for a queue entry). It deletes the entry, if it is
// still the same incarnation, retrying until that succeeds, the session ends
// (which removes the entry) or the driver is closed.
func (d *Driver) expire(id string, rec record) {
	if rec.lost {
		return // a tombstone's time is up
	}
	if !rec.released {
		d.bury(id, rec)
	}
	delay := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(d.ctx, backgroundTimeout)
		_, err := d.cli.Txn(ctx).If(rec.is()...).Then(clientv3.OpDelete(rec.name)).Commit()
		cancel()
		if err == nil {
			rec.slot.free()
			return
		}
		if rec.sess.ended() || !sleep(d.ctx, delay) {
			return
		}
		delay = min(2*delay, maxRetryDelay)
	}
}

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
// and closes the client if the driver opened it.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
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
