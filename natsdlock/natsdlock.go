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
	// casRuns bounds the compare-and-set loops of Refresh and Release: each
	// conflict is another write of the same hold that succeeded.
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
			Modes:         driver.Modes(driver.Exclusive),
			DurableTokens: true,
			ServerClock:   true,
			Consensus:     true,
			MaxKeyLen:     maxKeyLen,
			MinTTL:        minTTL,
			TTLResolution: time.Second,
			PortableHolds: true, // a record with its owner and its TTL
			LockDelay:     true, // the lease is the record's TTL
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

// Capabilities implements driver.Driver: exclusive locks, durable tokens,
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

// record is the value of a hold. Token is zero in the record that created
// the hold, whose revision is the token; a refresh writes it out.
type record struct {
	Owner string `json:"o"`
	Token uint64 `json:"t,omitempty"`
	TTL   int64  `json:"ttl"` // seconds
	Info  string `json:"i,omitempty"`
}

// hold is a live hold read from the bucket.
type hold struct {
	record
	rev     uint64
	created time.Time
}

func (h hold) token() uint64 {
	if h.Token != 0 {
		return h.Token
	}
	return h.rev
}

// left estimates the time left on the hold's lease (from the server's
// timestamp and the local clock).
func (h hold) left() time.Duration {
	return min(max(time.Until(h.created.Add(time.Duration(h.TTL)*time.Second)), 0), time.Duration(h.TTL)*time.Second)
}

// seconds returns the whole seconds of a TTL, as the server counts them.
func seconds(ttl time.Duration) int64 { return max(int64(ttl/time.Second), 1) }

// read returns the live hold on key, or ok false if there is none; rev is
// the revision of the key's latest record (a marker included), zero if it
// has none.
func (d *Driver) read(ctx context.Context, key string) (h hold, ok bool, rev uint64, err error) {
	m, err := d.last(ctx, d.subj+entryKey(key))
	switch {
	case err != nil:
		return hold{}, false, 0, err
	case m == nil:
		return hold{}, false, 0, nil
	case m.Header.Get("KV-Operation") != "" || m.Header.Get(jetstream.MarkerReasonHeader) != "":
		return hold{}, false, m.Sequence, nil // a purge or the marker of an expiry
	}
	h = hold{rev: m.Sequence, created: m.Time}
	if err := json.Unmarshal(m.Data, &h.record); err != nil || h.Owner == "" {
		return hold{}, false, 0, fmt.Errorf("%w (%d bytes)", errForeign, len(m.Data))
	}
	return h, true, h.rev, nil
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

// put writes rec for key if the key's latest revision is rev (zero: it has
// none), with a TTL of rec.TTL seconds, and returns the new revision.
func (d *Driver) put(ctx context.Context, key string, rec record, rev uint64) (uint64, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	ack, err := d.js.PublishMsg(ctx,
		&nats.Msg{Subject: d.subj + entryKey(key), Data: data},
		jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(time.Duration(rec.TTL)*time.Second))
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

// ---- the driver ----

func (d *Driver) check(ctx context.Context, req driver.Request) error {
	switch {
	case d.closed.Load():
		return errClosed
	case req.Mode != driver.Exclusive:
		return fmt.Errorf("natsdlock: %s mode: %w", req.Mode, driver.ErrUnsupported)
	}
	return ctx.Err()
}

// Acquire implements driver.Driver: a create of the key's record, made only
// if the key has none (or only the marker of an ended hold), with the
// lease as its TTL. The record's revision is the token. See the package
// documentation.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := d.check(ctx, req); err != nil {
		return driver.Result{}, err
	}
	res, err := d.acquire(ctx, req)
	if err != nil {
		return driver.Result{}, fmt.Errorf("natsdlock: acquire %q: %w", req.Key, withCtx(ctx, err))
	}
	return res, nil
}

func (d *Driver) acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	rec := record{Owner: req.Owner, TTL: seconds(req.TTL), Info: req.Info}
	granted := time.Duration(rec.TTL) * time.Second
	var rev uint64 // the revision the create expects: none, then a marker's
	for range 2 {
		token, err := d.put(ctx, req.Key, rec, rev)
		if err == nil {
			return driver.Result{Acquired: true, Token: token, TTL: granted}, nil
		}
		if !conflict(err) {
			return driver.Result{}, err
		}
		h, ok, latest, err := d.read(ctx, req.Key)
		switch {
		case err != nil:
			return driver.Result{}, err
		case ok && h.Owner == req.Owner: // a repeated Acquire renews
			if err := d.renew(ctx, req, &h); errors.Is(err, driver.ErrNotOwner) {
				return driver.Result{RetryAfter: time.Millisecond}, nil
			} else if err != nil {
				return driver.Result{}, err
			}
			return driver.Result{Acquired: true, Token: h.token(), TTL: granted}, nil
		case ok:
			return driver.Result{RetryAfter: h.left()}, nil
		}
		rev = latest // ended: expired, released or a marker
	}
	return driver.Result{RetryAfter: time.Millisecond}, nil
}

// renew writes h, owned by req.Owner, back with req's TTL (a refresh) by
// compare-and-set on its revision. If another write of the hold came
// first, it reads the hold again and, while it is still the owner's,
// tries again, up to casRuns times.
func (d *Driver) renew(ctx context.Context, req driver.Request, h *hold) error {
	for attempt := 1; ; attempt++ {
		rec := h.record
		rec.Token, rec.TTL = h.token(), seconds(req.TTL)
		_, err := d.put(ctx, req.Key, rec, h.rev)
		if err == nil || !conflict(err) || attempt == casRuns {
			return err
		}
		if *h, err = d.owned(ctx, req.Key, req.Owner); err != nil {
			return err
		}
	}
}

// owned returns owner's live hold on key; otherwise the error wraps
// driver.ErrNotOwner.
func (d *Driver) owned(ctx context.Context, key, owner string) (hold, error) {
	h, ok, _, err := d.read(ctx, key)
	if err != nil {
		return hold{}, err
	}
	if !ok || h.Owner != owner {
		return hold{}, driver.ErrNotOwner
	}
	return h, nil
}

// Refresh implements driver.Driver: a read of the hold, an owner check and
// a compare-and-set of its record with the new TTL.
func (d *Driver) Refresh(ctx context.Context, req driver.Request) error {
	if err := d.check(ctx, req); err != nil {
		return err
	}
	h, err := d.owned(ctx, req.Key, req.Owner)
	if err == nil {
		err = d.renew(ctx, req, &h)
	}
	if err != nil {
		return fmt.Errorf("natsdlock: refresh %q: %w", req.Key, withCtx(ctx, err))
	}
	return nil
}

// Release implements driver.Driver: a read of the hold, an owner check and
// a purge of the key made only if its revision is still the one read. The
// purge's marker expires after a second: nothing of the hold stays.
func (d *Driver) Release(ctx context.Context, req driver.Request) error {
	if err := d.check(ctx, req); err != nil {
		return err
	}
	err := d.release(ctx, req)
	if err != nil {
		return fmt.Errorf("natsdlock: release %q: %w", req.Key, withCtx(ctx, err))
	}
	return nil
}

func (d *Driver) release(ctx context.Context, req driver.Request) error {
	for attempt := 1; ; attempt++ {
		h, err := d.owned(ctx, req.Key, req.Owner)
		if err != nil {
			return err
		}
		err = d.kv.Purge(ctx, entryKey(req.Key), jetstream.LastRevision(h.rev), jetstream.PurgeTTL(markerTTL))
		if err == nil || !conflict(err) || attempt == casRuns {
			return err
		}
	}
}

// ReadHold implements driver.HoldReader: a read of the key's record.
func (d *Driver) ReadHold(ctx context.Context, key, owner string) (driver.Holder, error) {
	if d.closed.Load() {
		return driver.Holder{}, errClosed
	}
	h, err := d.owned(ctx, key, owner)
	if err != nil {
		return driver.Holder{}, fmt.Errorf("natsdlock: read hold %q: %w", key, withCtx(ctx, err))
	}
	return h.holder(key), nil
}

func (h hold) holder(key string) driver.Holder {
	return driver.Holder{Key: key, Owner: h.Owner, Mode: driver.Exclusive, Token: h.token(), Info: h.Info, TTL: h.left()}
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
	var hs []driver.Holder
	for _, key := range keys {
		h, ok, _, err := d.read(ctx, key)
		if err != nil && !errors.Is(err, errForeign) {
			return nil, err
		}
		if ok {
			hs = append(hs, h.holder(key))
		}
	}
	slices.SortFunc(hs, func(a, b driver.Holder) int { return strings.Compare(a.Key, b.Key) })
	return hs, nil
}

// ForceRelease implements driver.ForceReleaser: a purge of the key,
// whoever holds it.
func (d *Driver) ForceRelease(ctx context.Context, key string) (int, error) {
	if d.closed.Load() {
		return 0, errClosed
	}
	n := 0
	err := func() error {
		_, ok, _, err := d.read(ctx, key)
		if err != nil || !ok {
			return err
		}
		n = 1
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
