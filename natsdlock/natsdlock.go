package natsdlock

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/admit"
)

// Defaults of a Driver.
const (
	// DefaultBucket is the key-value bucket of the driver's records unless
	// WithBucket says otherwise.
	DefaultBucket = "dlock"
	// DefaultReplicas is the number of replicas of a bucket the driver
	// creates unless WithReplicas says otherwise.
	DefaultReplicas = 1
)

const (
	// maxKeyLen is the longest dlock key: its encoding (4/3 as long) and
	// the bucket's subject prefix stay well inside the server's 4 KiB
	// control line.
	maxKeyLen = 1024
	// minTTL is the shortest per-message TTL the server accepts.
	minTTL = time.Second
	// markerTTL is how long the bucket keeps the marker of a released or
	// expired hold: long enough for waiters to see it, and then nothing of
	// the hold is left.
	markerTTL = time.Second
	// casRuns bounds the compare-and-set loops of Acquire, Refresh and
	// Release: each conflict is another write of the key that succeeded.
	casRuns = 32
)

var errClosed = fmt.Errorf("natsdlock: driver closed: %w", dlock.ErrClosed)

// errNoTTL reports a bucket that was not made with per-message TTLs.
var errNoTTL = errors.New("no per-message TTLs: they need nats-server 2.11 or later and a bucket made with LimitMarkerTTL (name another bucket, and the driver makes it)")

// errForeign reports a record in the bucket that dlock did not write.
var errForeign = errors.New("the record is not a dlock hold")

// Driver is a dlock driver over a NATS JetStream key-value bucket. Create
// it with New, or with dlock.Open and a nats:// URL. Besides driver.Driver
// it implements driver.Notifier, driver.Lister, driver.ForceReleaser,
// driver.HoldReader and driver.Classifier. All methods are safe for
// concurrent use.
type Driver struct {
	nc     *nats.Conn
	owns   bool
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	stream string // the bucket's stream, "KV_BUCKET"
	subj   string // the subject prefix of the bucket's keys, "$KV.BUCKET."
	caps   driver.Capabilities
	closed atomic.Bool
}

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.Notifier      = (*Driver)(nil)
	_ driver.Lister        = (*Driver)(nil)
	_ driver.ForceReleaser = (*Driver)(nil)
	_ driver.HoldReader    = (*Driver)(nil)
	_ driver.Classifier    = (*Driver)(nil)
)

// Option configures a Driver.
type Option func(*config)

type config struct {
	bucket   string
	replicas int
}

// WithBucket sets the key-value bucket of the driver's records (default
// DefaultBucket), to keep applications apart on one deployment. Drivers
// that share a lock must use the same bucket.
func WithBucket(name string) Option { return func(c *config) { c.bucket = name } }

// WithReplicas sets the number of replicas (1 to 5) of the bucket when the
// driver creates it (default DefaultReplicas). Use 3 or 5 on a JetStream
// cluster: a bucket of one replica is lost with its server. An existing
// bucket keeps the replicas it has.
func WithReplicas(n int) Option { return func(c *config) { c.replicas = n } }

// New returns a driver over the NATS connection nc, on a key-value bucket
// that it creates if it does not exist. The driver does not own the
// connection: Close leaves it open. Bad options are reported as a
// *dlock.ArgError; a server without JetStream or a bucket without
// per-message TTLs as an error that Permanent reports.
func New(ctx context.Context, nc *nats.Conn, opts ...Option) (*Driver, error) {
	return newDriver(ctx, nc, false, opts)
}

func newDriver(ctx context.Context, nc *nats.Conn, owns bool, opts []Option) (*Driver, error) {
	if nc == nil {
		return nil, &dlock.ArgError{Name: "connection", Value: nil, Reason: "must not be nil"}
	}
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := bucket(ctx, js, cfg)
	if err != nil {
		return nil, fmt.Errorf("natsdlock: bucket %q: %w", cfg.bucket, err)
	}
	return &Driver{
		nc:     nc,
		owns:   owns,
		js:     js,
		kv:     kv,
		stream: "KV_" + cfg.bucket,
		subj:   "$KV." + cfg.bucket + ".",
		caps: driver.Capabilities{
			Modes:         driver.Modes(driver.Exclusive, driver.Shared, driver.Semaphore),
			FIFO:          true,
			DurableTokens: true,
			ServerClock:   true,
			Consensus:     true,
			MaxKeyLen:     maxKeyLen,
			MinTTL:        minTTL,
			TTLResolution: time.Second,
			PortableHolds: true, // an entry of the key's record, with its owner and its lease
			LockDelay:     true, // the lease is a TTL on the entry
		},
	}, nil
}

// configure applies opts to the defaults and checks the result.
func configure(opts []Option) (config, error) {
	cfg := config{bucket: DefaultBucket, replicas: DefaultReplicas}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case !validBucket(cfg.bucket):
		return cfg, &dlock.ArgError{Name: "bucket", Value: cfg.bucket, Reason: "must be letters, digits, '-' and '_' only"}
	case cfg.replicas < 1 || cfg.replicas > 5:
		return cfg, &dlock.ArgError{Name: "replicas", Value: cfg.replicas, Reason: "must be 1 to 5"}
	}
	return cfg, nil
}

func validBucket(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// askTimeout bounds the first try at opening the bucket, and each next try
// has twice as long as the one before. A JetStream cluster leaves a request
// unanswered while the group that should answer it elects a leader (a
// stream it has just created, a meta group whose leader died or hangs), so
// a try that gets no answer is made again until the caller's context ends;
// a cluster that is only slow gets the time it needs.
const askTimeout = time.Second

// errCodeNoLeader is the server's "JetStream system temporarily
// unavailable": the group that should answer has no leader yet.
const errCodeNoLeader jetstream.ErrorCode = 10008

// bucket opens the bucket of cfg, creating it if it is missing, asking
// again as askTimeout says.
func bucket(ctx context.Context, js jetstream.JetStream, cfg config) (jetstream.KeyValue, error) {
	for wait := askTimeout; ; wait *= 2 {
		try, cancel := context.WithTimeout(ctx, wait)
		kv, err := openBucket(try, js, cfg)
		retry := err != nil && unanswered(err)
		if retry {
			<-try.Done() // a quick "no leader" is asked again when the try's time is up
		}
		cancel()
		if !retry || ctx.Err() != nil {
			return kv, err
		}
	}
}

// unanswered reports a request that got no answer, the answer that the
// cluster has no leader to give one yet, or a bucket not found after a try
// to create it: a stream that another client has just created is not yet
// known to every server that answers for it.
func unanswered(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeNoLeader
}

// openBucket makes one try at opening the bucket of cfg, creating it if it
// is missing, and checks that JetStream is enabled (its account information
// says so, and the API level of nats-server 2.11) and that the bucket
// allows per-message TTLs.
func openBucket(ctx context.Context, js jetstream.JetStream, cfg config) (jetstream.KeyValue, error) {
	info, err := js.AccountInfo(ctx)
	if err != nil {
		return nil, err
	}
	if info.API.Level < 1 {
		return nil, errNoTTL
	}
	kv, err := js.KeyValue(ctx, cfg.bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:         cfg.bucket,
			Description:    "dlock locks",
			History:        1,
			Storage:        jetstream.FileStorage,
			Replicas:       cfg.replicas,
			LimitMarkerTTL: markerTTL,
		})
		if errors.Is(err, jetstream.ErrBucketExists) { // another driver made it first
			kv, err = js.KeyValue(ctx, cfg.bucket)
		}
	}
	if err != nil {
		return nil, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, err
	}
	if st.LimitMarkerTTL() <= 0 {
		return nil, errNoTTL
	}
	return kv, nil
}

// Conn returns the NATS connection the driver uses.
func (d *Driver) Conn() *nats.Conn { return d.nc }

// KeyValue returns the bucket of the driver's records. Its keys with a
// dot are never dlock's: a program may keep records of its own there.
func (d *Driver) KeyValue() jetstream.KeyValue { return d.kv }

// Capabilities implements driver.Driver: exclusive and shared locks and
// semaphores on a FIFO queue, durable tokens,
// leases on the server's clock in whole seconds (from 1s), replication by
// Raft on a JetStream cluster, keys of up to 1024 bytes, holds that
// outlive the driver. See the package documentation.
func (d *Driver) Capabilities() driver.Capabilities { return d.caps }

// ---- records ----

// entryKey returns the bucket key of a dlock key: its base64url encoding
// (key-value keys allow only letters, digits and -/_=.).
func entryKey(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

// dlockKey is the inverse of entryKey; ok is false for a foreign key.
func dlockKey(k string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(k)
	return string(b), err == nil
}

// entry is a holder, a waiter or a lost waiter in a key's record.
type entry struct {
	Owner string      `json:"o"`
	Mode  driver.Mode `json:"m,omitempty"`
	// Token is a holder's token; zero in the record that added the holder,
	// whose revision is the token.
	Token uint64 `json:"t,omitempty"`
	// Exp is the end of the lease, in Unix nanoseconds on the server's
	// clock; zero in the record that set the lease, which ends TTL seconds
	// after that record's timestamp.
	Exp  int64  `json:"e,omitempty"`
	TTL  int64  `json:"ttl,omitempty"`
	Info string `json:"i,omitempty"`
}

func (e entry) end() time.Time { return time.Unix(0, e.Exp) }

// state is the value of a key's record: its holders in token order, its
// wait queue in arrival order, and the owners whose queue entry expired,
// kept for goneFor so that their next Acquire reports the lost place.
type state struct {
	Holders []entry `json:"h,omitempty"`
	Queue   []entry `json:"q,omitempty"`
	Gone    []entry `json:"g,omitempty"`
	Limit   int     `json:"l,omitempty"` // the semaphore's, while it has holders or waiters
}

// goneFor is how long a record remembers a waiter whose entry expired.
const goneFor = time.Minute

func (st *state) empty() bool { return len(st.Holders)+len(st.Queue)+len(st.Gone) == 0 }

// resolve turns the entries the record at rev, stored at ts, wrote
// relative to itself into absolute ones.
func (st *state) resolve(rev uint64, ts time.Time) {
	for _, es := range [][]entry{st.Holders, st.Queue} {
		for i := range es {
			if es[i].Exp == 0 {
				es[i].Exp, es[i].TTL = ts.Add(time.Duration(es[i].TTL)*time.Second).UnixNano(), 0
			}
		}
	}
	for i := range st.Holders {
		if st.Holders[i].Token == 0 {
			st.Holders[i].Token = rev
		}
	}
}

// prune drops the holders and waiters whose lease ended by now, on the
// server's clock, and forgets lost waiters after goneFor. It reports
// whether it changed anything.
func (st *state) prune(now time.Time) bool {
	n := [3]int{len(st.Holders), len(st.Queue), len(st.Gone)}
	ended := func(e entry) bool { return !now.Before(e.end()) }
	st.Holders = slices.DeleteFunc(st.Holders, ended)
	st.Gone = slices.DeleteFunc(st.Gone, ended)
	for _, w := range st.Queue {
		if ended(w) {
			st.Gone = append(st.Gone, entry{Owner: w.Owner, Exp: w.end().Add(goneFor).UnixNano()})
		}
	}
	st.Queue = slices.DeleteFunc(st.Queue, ended)
	return n != [3]int{len(st.Holders), len(st.Queue), len(st.Gone)}
}

// lease sets e's lease to the TTL of req from the record that writes it.
func lease(e *entry, req driver.Request) { e.Exp, e.TTL = 0, seconds(req.TTL) }

// seconds returns the whole seconds of a TTL, as the server counts them.
func seconds(ttl time.Duration) int64 { return max(int64(ttl/time.Second), 1) }

// msgTTL returns the TTL of a message of st written after now: the longest
// lease in it, so that the server removes the record when the last lease
// of it has ended.
func (st *state) msgTTL(now time.Time) time.Duration {
	ttl := time.Second
	for _, es := range [][]entry{st.Holders, st.Queue, st.Gone} {
		for _, e := range es {
			left := time.Duration(e.TTL) * time.Second
			if e.Exp != 0 {
				left = e.end().Sub(now).Truncate(time.Second) + time.Second
			}
			ttl = max(ttl, left)
		}
	}
	return ttl
}

// find returns the index of owner's entry in es, or -1.
func find(es []entry, owner string) int {
	return slices.IndexFunc(es, func(e entry) bool { return e.Owner == owner })
}

// load returns key's record with the leases that ended dropped (and
// dirty true if there were), the revision of the key's latest record (a
// marker included), zero if it has none, and the server's time. The time
// is asked for at once with the record: a lease that had ended by then has
// ended for every write that follows.
func (d *Driver) load(ctx context.Context, key string) (st *state, rev uint64, now time.Time, dirty bool, err error) {
	nowc := make(chan error, 1)
	go func() {
		var err error
		now, err = d.serverTime(ctx)
		nowc <- err
	}()
	m, err := d.last(ctx, d.subj+entryKey(key))
	if nerr := <-nowc; err == nil {
		err = nerr
	}
	st = &state{}
	switch {
	case err != nil:
		return nil, 0, now, false, err
	case m == nil:
		return st, 0, now, false, nil
	case m.Header.Get("KV-Operation") != "" || m.Header.Get(jetstream.MarkerReasonHeader) != "":
		return st, m.Sequence, now, false, nil // a purge or the marker of an expiry
	}
	if err := json.Unmarshal(m.Data, st); err != nil || st.empty() {
		return nil, 0, now, false, fmt.Errorf("%w (%d bytes)", errForeign, len(m.Data))
	}
	st.resolve(m.Sequence, m.Time)
	return st, m.Sequence, now, st.prune(now), nil
}

// serverTime returns the time on the clock of the server that leads the
// bucket's stream, from its stream information.
func (d *Driver) serverTime(ctx context.Context) (time.Time, error) {
	reply, err := d.nc.RequestWithContext(ctx, "$JS.API.STREAM.INFO."+d.stream, nil)
	if err != nil {
		return time.Time{}, err
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
		TS    time.Time           `json:"ts"`
	}
	switch err := json.Unmarshal(reply.Data, &resp); {
	case err != nil:
		return time.Time{}, err
	case resp.Error != nil:
		return time.Time{}, resp.Error
	case resp.TS.IsZero():
		return time.Time{}, fmt.Errorf("no server time in the stream information %.100q", reply.Data)
	}
	return resp.TS, nil
}

// last returns the latest message of subject in the bucket's stream, nil if
// it has none. It asks the stream's leader (STREAM.MSG.GET), which has
// every acknowledged write, never a replica, which may lag: the key-value
// API's direct gets may be answered by one on a cluster.
func (d *Driver) last(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	req, err := json.Marshal(map[string]string{"last_by_subj": subject})
	if err != nil {
		return nil, err
	}
	reply, err := d.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+d.stream, req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
	}
	switch err := json.Unmarshal(reply.Data, &resp); {
	case err != nil:
		return nil, err
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, nil
	case resp.Error != nil:
		return nil, resp.Error
	case resp.Message == nil:
		return nil, fmt.Errorf("no message in the answer %q", reply.Data)
	}
	m := &jetstream.RawStreamMsg{Subject: subject, Sequence: resp.Message.Sequence, Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// store writes st as key's record if the key's latest revision is still
// rev (zero: it has none), with the longest of its leases as the
// message's TTL, and returns the new revision; an empty st purges the
// key instead, leaving a marker that expires after markerTTL.
func (d *Driver) store(ctx context.Context, key string, st *state, rev uint64, now time.Time) (uint64, error) {
	if st.empty() {
		return 0, d.kv.Purge(ctx, entryKey(key), jetstream.LastRevision(rev), jetstream.PurgeTTL(markerTTL))
	}
	data, err := json.Marshal(st)
	if err != nil {
		return 0, err
	}
	ack, err := d.js.PublishMsg(ctx,
		&nats.Msg{Subject: d.subj + entryKey(key), Data: data},
		jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(st.msgTTL(now)))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// conflict reports a compare-and-set that found another revision.
func conflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// update runs the compare-and-set loop of an operation on key: it loads
// the key's record, lets op change it (op reports whether there is
// anything to write) and writes it back if the key's revision is still the
// one read, trying again on a conflict up to casRuns times. It returns the
// revision of the write, zero if op wrote nothing. With fresh set it
// starts from an empty record and the key's first write, saving a read
// where the key is most likely free.
func (d *Driver) update(ctx context.Context, key string, fresh bool, op func(st *state, now time.Time, dirty bool) (bool, error)) (uint64, error) {
	for attempt := 1; ; attempt++ {
		st, rev, now, dirty := &state{}, uint64(0), time.Time{}, false
		if !fresh || attempt > 1 {
			var err error
			if st, rev, now, dirty, err = d.load(ctx, key); err != nil {
				return 0, err
			}
		}
		write, err := op(st, now, dirty)
		if err != nil || !write {
			return 0, err
		}
		seq, err := d.store(ctx, key, st, rev, now)
		if err == nil || !conflict(err) || attempt == casRuns {
			return seq, err
		}
	}
}

// ---- the driver ----

func (d *Driver) check(ctx context.Context, req driver.Request) error {
	switch {
	case d.closed.Load():
		return errClosed
	case !d.caps.Modes.Has(req.Mode):
		return fmt.Errorf("natsdlock: %s mode: %w", req.Mode, driver.ErrUnsupported)
	}
	return ctx.Err()
}

// Acquire implements driver.Driver: a compare-and-set of the key's record
// that adds the owner to its holders if the record's live holders and
// waiters admit it, or else (with Request.Queue) to its wait queue. The
// revision of the record that adds a holder is its token. See the package
// documentation.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := d.check(ctx, req); err != nil {
		return driver.Result{}, err
	}
	var res driver.Result
	seq, err := d.update(ctx, req.Key, true, func(st *state, now time.Time, _ bool) (bool, error) {
		var write bool
		var err error
		res, write, err = st.acquire(req, now)
		return write && (res.Acquired || req.Queue), err
	})
	switch {
	case conflict(err): // casRuns other writes came first
		return driver.Result{RetryAfter: time.Millisecond}, nil
	case err != nil:
		return driver.Result{}, fmt.Errorf("natsdlock: acquire %q: %w", req.Key, withCtx(ctx, err))
	case res.Acquired && res.Token == 0:
		res.Token = seq
	}
	return res, nil
}

// acquire is Acquire's change of st, as of now on the server's clock, and
// whether it is one to write. A waiter's entry is renewed only once half
// its lease has passed: waiters woken by each other's renewals would
// otherwise keep waking each other.
func (st *state) acquire(req driver.Request, now time.Time) (driver.Result, bool, error) {
	granted := time.Duration(seconds(req.TTL)) * time.Second
	if i := find(st.Holders, req.Owner); i >= 0 { // a repeated Acquire renews
		h := &st.Holders[i]
		switch {
		case h.Mode == driver.Exclusive && req.Mode == driver.Shared:
			h.Mode = driver.Shared // a downgrade: readers may join
		case h.Mode == driver.Shared && req.Mode == driver.Exclusive:
			return driver.Result{}, false, fmt.Errorf("an upgrade from shared to exclusive: %w", driver.ErrModeMismatch)
		}
		lease(h, req)
		return driver.Result{Acquired: true, Token: h.Token, TTL: granted}, true, nil
	}
	if mode, ok := st.mode(); ok && ((mode == driver.Semaphore) != (req.Mode == driver.Semaphore) || mode == driver.Semaphore && req.Limit != st.Limit) {
		return driver.Result{}, false, fmt.Errorf("in use as %s (limit %d), asked for %s (limit %d): %w", mode, st.Limit, req.Mode, req.Limit, driver.ErrModeMismatch)
	}
	pos := find(st.Queue, req.Owner)
	if pos < 0 {
		if req.Queue && find(st.Gone, req.Owner) >= 0 {
			return driver.Result{}, false, fmt.Errorf("the queue entry's lease ended, and with it the place in line: %w", driver.ErrNotOwner)
		}
		pos = len(st.Queue)
	}
	var k admit.Key
	k.Holders, k.HolderExclusive = admit.Count(st.Holders, func(e entry) driver.Mode { return e.Mode })
	k.Ahead, k.AheadExclusive = admit.Count(st.Queue[:pos], func(e entry) driver.Mode { return e.Mode })
	st.Limit = req.Limit
	if k.Admits(req.Mode, req.Limit, true) {
		if pos < len(st.Queue) {
			st.Queue = slices.Delete(st.Queue, pos, pos+1)
		}
		st.Holders = append(st.Holders, entry{Owner: req.Owner, Mode: req.Mode, Info: req.Info})
		lease(&st.Holders[len(st.Holders)-1], req)
		return driver.Result{Acquired: true, TTL: granted}, true, nil
	}
	renew := pos == len(st.Queue) || st.Queue[pos].end().Sub(now) < req.TTL/2
	if pos == len(st.Queue) {
		st.Queue = append(st.Queue, entry{Owner: req.Owner, Mode: req.Mode})
	}
	if renew {
		lease(&st.Queue[pos], req) // written only with req.Queue
	}
	var res driver.Result
	for _, e := range slices.Concat(st.Holders, st.Queue[:pos]) {
		if left := e.end().Sub(now); res.RetryAfter == 0 || left < res.RetryAfter {
			res.RetryAfter = max(left, time.Millisecond)
		}
	}
	return res, renew, nil
}

// mode returns the mode the key is in use as, if it has holders or
// waiters.
func (st *state) mode() (driver.Mode, bool) {
	for _, e := range slices.Concat(st.Holders, st.Queue) {
		return e.Mode, true
	}
	return 0, false
}

// Refresh implements driver.Driver: a compare-and-set of the key's record
// that gives the owner's hold, if live, the new TTL.
func (d *Driver) Refresh(ctx context.Context, req driver.Request) error {
	if err := d.check(ctx, req); err != nil {
		return err
	}
	_, err := d.update(ctx, req.Key, false, func(st *state, _ time.Time, _ bool) (bool, error) {
		i := find(st.Holders, req.Owner)
		if i < 0 {
			return false, driver.ErrNotOwner
		}
		lease(&st.Holders[i], req)
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("natsdlock: refresh %q: %w", req.Key, withCtx(ctx, err))
	}
	return nil
}

// Release implements driver.Driver: a compare-and-set of the key's record
// without the owner's hold and queue entry, or a purge of the key if
// nothing else is left in it. The purge's marker expires after a second:
// nothing of the key stays.
func (d *Driver) Release(ctx context.Context, req driver.Request) error {
	if err := d.check(ctx, req); err != nil {
		return err
	}
	live := false
	_, err := d.update(ctx, req.Key, false, func(st *state, _ time.Time, dirty bool) (bool, error) {
		n := len(st.Holders) + len(st.Queue)
		gone := len(st.Gone)
		owned := func(e entry) bool { return e.Owner == req.Owner }
		st.Holders = slices.DeleteFunc(st.Holders, owned)
		st.Queue = slices.DeleteFunc(st.Queue, owned)
		st.Gone = slices.DeleteFunc(st.Gone, owned)
		live = len(st.Holders)+len(st.Queue) < n
		return dirty || live || len(st.Gone) < gone, nil
	})
	if err == nil && !live {
		err = driver.ErrNotOwner
	}
	if err != nil {
		return fmt.Errorf("natsdlock: release %q: %w", req.Key, withCtx(ctx, err))
	}
	return nil
}

// ReadHold implements driver.HoldReader: a read of the key's record.
func (d *Driver) ReadHold(ctx context.Context, key, owner string) (driver.Holder, error) {
	if d.closed.Load() {
		return driver.Holder{}, errClosed
	}
	hs, err := d.holders(ctx, key)
	i := slices.IndexFunc(hs, func(h driver.Holder) bool { return h.Owner == owner })
	if err == nil && i < 0 {
		err = driver.ErrNotOwner
	}
	if err != nil {
		return driver.Holder{}, fmt.Errorf("natsdlock: read hold %q: %w", key, withCtx(ctx, err))
	}
	return hs[i], nil
}

// holders returns the live holders of key, in token order.
func (d *Driver) holders(ctx context.Context, key string) ([]driver.Holder, error) {
	st, _, now, _, err := d.load(ctx, key)
	if err != nil {
		return nil, err
	}
	hs := make([]driver.Holder, 0, len(st.Holders))
	for _, e := range st.Holders {
		h := driver.Holder{Key: key, Owner: e.Owner, Mode: e.Mode, Token: e.Token, Info: e.Info, TTL: e.end().Sub(now)}
		if e.Mode == driver.Semaphore {
			h.Limit = st.Limit
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// List implements driver.Lister: the bucket's keys, and a read of each
// whose dlock key starts with prefix.
func (d *Driver) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	if d.closed.Load() {
		return nil, errClosed
	}
	hs, err := d.list(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("natsdlock: list %q: %w", prefix, withCtx(ctx, err))
	}
	return hs, nil
}

func (d *Driver) list(ctx context.Context, prefix string) ([]driver.Holder, error) {
	kl, err := d.kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	defer kl.Stop()
	var keys []string
	for k := range kl.Keys() {
		if key, ok := dlockKey(k); ok && strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	var hs []driver.Holder
	for _, key := range keys {
		khs, err := d.holders(ctx, key)
		if err != nil && !errors.Is(err, errForeign) {
			return nil, err
		}
		hs = append(hs, khs...)
	}
	return hs, nil
}

// ForceRelease implements driver.ForceReleaser: a purge of the key, its
// holders and waiters, whoever they are.
func (d *Driver) ForceRelease(ctx context.Context, key string) (int, error) {
	if d.closed.Load() {
		return 0, errClosed
	}
	n := 0
	err := func() error {
		st, _, _, _, err := d.load(ctx, key)
		if err != nil || st.empty() {
			return err
		}
		n = len(st.Holders)
		return d.kv.Purge(ctx, entryKey(key), jetstream.PurgeTTL(markerTTL))
	}()
	if err != nil {
		return 0, fmt.Errorf("natsdlock: force release %q: %w", key, withCtx(ctx, err))
	}
	return n, nil
}

// Close implements driver.Driver: for a driver opened from a URL, it
// closes the connection. Holds are left alone.
func (d *Driver) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	if d.owns {
		d.nc.Close()
	}
	return nil
}

// withCtx returns err, wrapping ctx's error too if ctx has ended.
func withCtx(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", cerr, err)
	}
	return err
}
