package quorum

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/ctxerr"
)

// Defaults of the drift options.
const (
	// DefaultDriftFactor is the share of the lease set aside for clocks
	// that run at different rates (Redlock's CLOCK_DRIFT_FACTOR).
	DefaultDriftFactor = 0.01
	// DefaultDriftMargin is the fixed part of the drift margin, for timer
	// and scheduling delays.
	DefaultDriftMargin = 2 * time.Millisecond
)

// Driver is a Redlock-style driver over N independent nodes. Create it with
// New. It implements driver.Driver, driver.Notifier, driver.Lister and
// driver.ForceReleaser; the optional methods return driver.ErrUnsupported
// when the nodes do not implement the interface.
type Driver struct {
	nodes       []driver.Driver
	quorum      int
	driftFactor float64
	driftMargin time.Duration
	log         *slog.Logger
	fence       bool          // take fencing tokens in a second round
	nodeMinTTL  time.Duration // the largest of the nodes' MinTTL
	caps        driver.Capabilities
	closed      atomic.Bool
}

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.Notifier      = (*Driver)(nil)
	_ driver.Lister        = (*Driver)(nil)
	_ driver.ForceReleaser = (*Driver)(nil)
)

// Option configures a quorum Driver.
type Option func(*config)

type config struct {
	driftFactor float64
	driftMargin time.Duration
	log         *slog.Logger
	noFence     bool
}

// WithDriftFactor sets the share of the lease set aside for clock-rate
// differences between the client and the nodes (default 0.01, Redlock's
// value). It must be in [0, 0.5). Package dlock already sets aside 1% of the
// lease; a larger factor shortens the reported lease by the difference.
func WithDriftFactor(f float64) Option {
	return func(c *config) { c.driftFactor = f }
}

// WithDriftMargin sets the fixed part of the drift margin (default 2ms).
// It must not be negative. Package dlock already sets aside 2ms; a larger
// margin shortens the reported lease by the difference.
func WithDriftMargin(d time.Duration) Option {
	return func(c *config) { c.driftMargin = d }
}

// WithLogger sets the logger for warnings: an even number of nodes, nodes
// that fail while the majority carries on, partial holds that could not be
// rolled back. The default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.log = l }
}

// WithoutFenceRound skips the second round of Acquire that takes the fencing
// token on every node (see Token in the package documentation). Acquire then
// costs one round trip instead of two, and the token is the largest of the
// majority's lock tokens, which is not even monotonic while clients compete:
// a node that granted the lock to the loser of a split vote has counted one
// acquisition more than the others. Use it only where nobody reads the token.
func WithoutFenceRound() Option {
	return func(c *config) { c.noFence = true }
}

// New returns a quorum Driver over nodes, which must be independent stores
// (normally one Redis server each). It rejects an empty list, nil nodes and
// the same driver value given twice with a *dlock.ArgError, and logs a
// warning for an even number of nodes. The Driver owns the nodes: its Close
// closes them. If New fails, the caller keeps them.
func New(nodes []driver.Driver, opts ...Option) (*Driver, error) {
	cfg := config{driftFactor: DefaultDriftFactor, driftMargin: DefaultDriftMargin}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	switch f := cfg.driftFactor; {
	case math.IsNaN(f) || f < 0 || f >= 0.5:
		return nil, &dlock.ArgError{Name: "drift factor", Value: f, Reason: "must be in [0, 0.5)"}
	case cfg.driftMargin < 0:
		return nil, &dlock.ArgError{Name: "drift margin", Value: cfg.driftMargin, Reason: "must not be negative"}
	case len(nodes) == 0:
		return nil, &dlock.ArgError{Name: "nodes", Value: "[]", Reason: "must name at least one node (three or five independent stores are usual)"}
	}
	for i, n := range nodes {
		if n == nil {
			return nil, &dlock.ArgError{Name: fmt.Sprintf("nodes[%d]", i), Value: nil, Reason: "must not be nil"}
		}
		for j := range i {
			if sameDriver(nodes[j], n) {
				return nil, &dlock.ArgError{
					Name:   fmt.Sprintf("nodes[%d]", i),
					Value:  fmt.Sprintf("%T %p", n, n),
					Reason: fmt.Sprintf("is the same driver as nodes[%d]; every node must be a separate store", j),
				}
			}
		}
	}
	d := &Driver{
		nodes:       slices.Clone(nodes),
		quorum:      len(nodes)/2 + 1,
		driftFactor: cfg.driftFactor,
		driftMargin: cfg.driftMargin,
		log:         cfg.log,
		fence:       !cfg.noFence,
	}
	d.caps = d.capabilities()
	if len(nodes)%2 == 0 {
		d.log.Warn("quorum: even number of nodes; an odd number tolerates as many failures with one server fewer",
			"nodes", len(nodes), "majority", d.quorum, "tolerates", len(nodes)-d.quorum)
	}
	return d, nil
}

// sameDriver reports whether a and b are the same driver value. Values of
// types that cannot be compared are taken to differ.
func sameDriver(a, b driver.Driver) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// Nodes returns the number of nodes.
func (d *Driver) Nodes() int { return len(d.nodes) }

// Quorum returns the number of nodes that must agree: N/2+1.
func (d *Driver) Quorum() int { return d.quorum }

// capabilities combines the nodes' capabilities: what every node can do.
func (d *Driver) capabilities() driver.Capabilities {
	caps := driver.Capabilities{
		Modes:       driver.Modes(driver.Exclusive),
		ServerClock: true,
		MaxKeyLen:   math.MaxInt,
		MinTTL:      10 * time.Millisecond,
	}
	for _, n := range d.nodes {
		c := n.Capabilities()
		caps.ServerClock = caps.ServerClock && c.ServerClock
		if c.MaxKeyLen == 0 {
			c.MaxKeyLen = 1024
		}
		caps.MaxKeyLen = min(caps.MaxKeyLen, c.MaxKeyLen)
		caps.MinTTL = max(caps.MinTTL, c.MinTTL)
		d.nodeMinTTL = max(d.nodeMinTTL, c.MinTTL)
		if c.MaxTTL > 0 && (caps.MaxTTL == 0 || c.MaxTTL < caps.MaxTTL) {
			caps.MaxTTL = c.MaxTTL
		}
		if c.MaxLimit > 0 && (caps.MaxLimit == 0 || c.MaxLimit < caps.MaxLimit) {
			caps.MaxLimit = c.MaxLimit
		}
	}
	if d.fence {
		caps.MaxKeyLen -= len(fenceSuffix) // room for the fence key
	}
	// The lease must leave something after the drift margin.
	caps.MinTTL = max(caps.MinTTL, time.Duration(float64(d.driftMargin+time.Millisecond)/(1-d.driftFactor))+1)
	return caps
}

// Capabilities implements driver.Driver. Only Exclusive holds are offered
// (a quorum of shared holds is not implemented yet). Tokens are not durable
// and there is no consensus (see the package documentation); ServerClock is
// true when every node's leases expire on the node's clock. MaxKeyLen,
// MaxTTL and MaxLimit are the smallest, MinTTL the largest of the nodes'
// (MaxKeyLen less 13 bytes for the fence key, unless WithoutFenceRound was
// given).
func (d *Driver) Capabilities() driver.Capabilities { return d.caps }

var errClosed = errors.New("quorum: driver closed")

func (d *Driver) check(ctx context.Context, req *driver.Request) error {
	if d.closed.Load() {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if req != nil && req.Mode != driver.Exclusive {
		return fmt.Errorf("quorum: %s mode: %w", req.Mode, driver.ErrUnsupported)
	}
	return nil
}

// Acquire implements driver.Driver: it asks every node in parallel and
// succeeds if a majority granted the hold. Then, unless WithoutFenceRound
// was given, a second round takes the fencing token, which is not a safe
// fencing token (see the package documentation); a repeated Acquire by the
// holder returns the same token as long as its fence holds, which are
// renewed with the lock.
//
// If no majority granted the hold, it is released on every node that
// granted it or did not answer, and the result is "not acquired", with
// RetryAfter estimating when a majority may be free. If fewer than a
// majority of nodes answered at all, Acquire returns their errors. Acquire
// never retries: package dlock tries again after a randomised backoff.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (_ driver.Result, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	if err := d.check(ctx, &req); err != nil {
		return driver.Result{}, err
	}
	start := time.Now()
	// A grant that arrives after the lease is worthless: bound the wait.
	actx, cancel := context.WithTimeout(ctx, req.TTL)
	defer cancel()
	answers := d.fanout(actx, graceFor(req.TTL), func(ctx context.Context, n driver.Driver) answer {
		res, err := n.Acquire(ctx, req)
		switch {
		case err != nil:
			return answer{vote: failed, err: err}
		case res.Acquired:
			return answer{vote: yes, res: res}
		default:
			return answer{vote: no, res: res}
		}
	})
	yesN, noN, _ := count(answers)
	if yesN >= d.quorum {
		var res driver.Result
		base := req.TTL
		for _, a := range answers {
			if a.vote == yes {
				res.Token = max(res.Token, a.res.Token)
				if a.res.TTL > 0 && a.res.TTL < base {
					base = a.res.TTL
				}
			}
		}
		if d.fence {
			tok, ok, err := d.takeToken(actx, req)
			switch {
			case err != nil:
				// The caller releases after an error, fence included.
				return driver.Result{}, fmt.Errorf("quorum: acquire %q: taking the fencing token: %w", req.Key, err)
			case ok:
				res.Token = tok
			default:
				d.log.Warn("quorum: every node holds a stale fence; the token is the largest lock token, which may not exceed the previous holder's",
					"key", req.Key)
			}
		}
		res.Acquired = true
		if ttl := d.validTTL(base); ttl != req.TTL {
			res.TTL = ttl
		}
		return res, nil
	}
	if err := ctxerr.Err(ctx); err != nil {
		// The caller releases after an error (driver contract).
		return driver.Result{}, fmt.Errorf("quorum: acquire %q: %w", req.Key, err)
	}
	if yesN+noN < d.quorum {
		return driver.Result{}, fmt.Errorf("quorum: acquire %q: only %d of %d nodes answered, %d needed: %w",
			req.Key, yesN+noN, len(d.nodes), d.quorum, d.errs(answers))
	}
	if err := d.rollback(ctx, start, req, answers); err != nil {
		return driver.Result{}, err
	}
	return driver.Result{RetryAfter: d.retryAfter(answers)}, nil
}

// validTTL returns the lease to report for a hold whose shortest node lease
// is base.
//
// Redlock gives the client validity = TTL - elapsed - drift, with drift =
// TTL × factor + margin. Package dlock computes validity = T - elapsed -
// (T/100 + 2ms) from the T it is given, measuring elapsed from before the
// request was sent. So T is the largest value with
//
//	T - (T/100 + 2ms) <= base - (base × factor + margin)
//
// capped at base: T = (base - drift + 2ms) × 100/99. With the default drift
// (1% + 2ms) T is base itself; only a larger configured drift shortens it.
func (d *Driver) validTTL(base time.Duration) time.Duration {
	want := base - (time.Duration(float64(base)*d.driftFactor) + d.driftMargin) // Redlock's validity without elapsed
	x := want + 2*time.Millisecond
	t := min(base, x+x/99) // x × 100/99 without overflow
	for t > 0 && t-dlock.DriftMargin(t) > want {
		t-- // integer rounding: at most a few steps
	}
	if t <= 0 {
		// No validity at all: report the smallest lease, which package
		// dlock rejects as expired (and releases).
		return time.Nanosecond
	}
	return t
}

// rollback releases a failed acquisition on the nodes that granted it and on
// those whose answer was lost. It returns an error only if a node that
// granted the hold could not release it: the caller then releases again.
func (d *Driver) rollback(ctx context.Context, start time.Time, req driver.Request, answers []answer) error {
	var errs []error
	results := d.each(ctx, start, func(i int) bool { return answers[i].vote != no }, func(ctx context.Context, n driver.Driver) error {
		return n.Release(ctx, req)
	})
	for i, err := range results {
		if err == nil || errors.Is(err, driver.ErrNotHeld) {
			continue
		}
		if answers[i].vote == yes {
			errs = append(errs, fmt.Errorf("node %d: %w", i, err))
			continue
		}
		// The node failed the acquire too: probably down. Whatever it may
		// hold expires with its lease and is a minority.
		d.log.Warn("quorum: cannot roll back a failed acquire on a node that did not answer; its lease will expire",
			"key", req.Key, "node", i, "err", err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("quorum: acquire %q: no majority, and the partial hold could not be released: %w", req.Key, errors.Join(errs...))
	}
	return nil
}

// retryAfter estimates when a majority of nodes may be free: the majority-th
// smallest of the nodes' estimates, where a node that granted the hold (and
// was rolled back) is free now and a node that failed or gave no estimate is
// unknown. Zero means unknown.
func (d *Driver) retryAfter(answers []answer) time.Duration {
	const unknown = time.Duration(math.MaxInt64)
	free := make([]time.Duration, len(answers))
	for i, a := range answers {
		switch {
		case a.vote == yes:
			free[i] = 0
		case a.vote == no && a.res.RetryAfter > 0:
			free[i] = a.res.RetryAfter
		default:
			free[i] = unknown
		}
	}
	slices.Sort(free)
	if r := free[d.quorum-1]; r != unknown {
		return r
	}
	return 0
}

// Refresh implements driver.Driver: it renews the lease on every node and
// succeeds if a majority renewed it. A node that had lost the hold while the
// majority kept it gets it back (if it is free there). When so many nodes
// report driver.ErrNotHeld that a majority cannot be reached, the lock is
// lost: Refresh releases what is left of it and returns an error wrapping
// driver.ErrNotHeld. Otherwise (nodes failed) it returns their errors, and
// package dlock keeps the lock until its validity ends, trying again.
func (d *Driver) Refresh(ctx context.Context, req driver.Request) (err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	if err := d.check(ctx, &req); err != nil {
		return err
	}
	start := time.Now()
	answers := d.fanout(ctx, graceFor(req.TTL), func(ctx context.Context, n driver.Driver) answer {
		return voteOf(d.withFence(ctx, req, n.Refresh))
	})
	yesN, noN, _ := count(answers)
	switch {
	case yesN >= d.quorum:
		if noN > 0 {
			d.heal(ctx, start, req, answers)
		}
		return nil
	case noN > len(d.nodes)-d.quorum:
		// Lost for good: free the minority that still holds it (and the
		// fences), so that it does not stand in the next holder's way.
		d.each(ctx, start, func(int) bool { return true }, func(ctx context.Context, n driver.Driver) error {
			return d.withFence(ctx, req, n.Release)
		})
		return fmt.Errorf("quorum: refresh %q: %d of %d nodes no longer hold it, %d needed: %w",
			req.Key, noN, len(d.nodes), d.quorum, driver.ErrNotHeld)
	default:
		return fmt.Errorf("quorum: refresh %q: only %d of %d nodes renewed the lease, %d needed: %w",
			req.Key, yesN, len(d.nodes), d.quorum, d.errs(answers))
	}
}

// heal gives the hold back to nodes that lost it while a majority kept it
// (a restart, a node that was down when the lock was taken). The majority
// proves that nobody else holds the lock, so taking a free node is safe;
// a node held by someone else refuses. Failures are logged only.
func (d *Driver) heal(ctx context.Context, start time.Time, req driver.Request, answers []answer) {
	results := d.each(ctx, start, func(i int) bool { return answers[i].vote == no }, func(ctx context.Context, n driver.Driver) error {
		res, err := n.Acquire(ctx, req)
		if err == nil && !res.Acquired {
			err = errors.New("held by another owner")
		}
		return err
	})
	for i, err := range results {
		if err != nil && answers[i].vote == no {
			d.log.Warn("quorum: a node lost the hold and cannot get it back", "key", req.Key, "node", i, "err", err)
		}
	}
}

// Release implements driver.Driver: it releases the hold on every node. Once
// a majority has answered, the others get as long again (at least 50ms)
// before their calls are cancelled; a node cut short keeps its hold until
// its lease ends. It returns nil if a majority released a live hold,
// an error wrapping driver.ErrNotHeld if so many nodes did not hold it that
// no majority can have held it, and the nodes' errors otherwise.
func (d *Driver) Release(ctx context.Context, req driver.Request) (err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	if err := d.check(ctx, &req); err != nil {
		return err
	}
	answers := d.fanout(ctx, releaseGrace, func(ctx context.Context, n driver.Driver) answer {
		return voteOf(d.withFence(ctx, req, n.Release))
	})
	yesN, noN, _ := count(answers)
	switch {
	case yesN >= d.quorum:
		return nil
	case noN > len(d.nodes)-d.quorum:
		return fmt.Errorf("quorum: release %q: %d of %d nodes did not hold it: %w", req.Key, noN, len(d.nodes), driver.ErrNotHeld)
	default:
		return fmt.Errorf("quorum: release %q: only %d of %d nodes released it, %d needed: %w",
			req.Key, yesN, len(d.nodes), d.quorum, d.errs(answers))
	}
}

// Close implements driver.Driver: it closes every node. Holds are not
// released (package dlock releases its locks before it closes the driver).
func (d *Driver) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	var errs []error
	for i, n := range d.nodes {
		if err := n.Close(); err != nil {
			errs = append(errs, fmt.Errorf("quorum: closing node %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// voteOf classifies the result of a Refresh or Release on one node.
func voteOf(err error) answer {
	switch {
	case err == nil:
		return answer{vote: yes}
	case errors.Is(err, driver.ErrNotHeld):
		return answer{vote: no, err: err}
	default:
		return answer{vote: failed, err: err}
	}
}

// errs joins the errors of the nodes that failed, naming them.
func (d *Driver) errs(answers []answer) error {
	var errs []error
	for i, a := range answers {
		if a.vote == failed {
			errs = append(errs, fmt.Errorf("node %d: %w", i, a.err))
		}
	}
	return errors.Join(errs...)
}
