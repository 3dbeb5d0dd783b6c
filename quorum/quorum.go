package quorum

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/ctxerr"
	"github.com/dlockhq/dlock/internal/inflight"
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
// New. It implements driver.Driver, driver.Notifier, driver.Lister,
// driver.ForceReleaser and driver.HoldReader; the optional methods return
// driver.ErrUnsupported when the nodes do not implement the interface.
type Driver struct {
	nodes       []driver.Driver
	quorum      int
	driftFactor float64
	driftMargin time.Duration
	log         *slog.Logger
	fence       bool          // take fencing tokens in a second round (nodes that are not TokenRaisers)
	raise       bool          // fencing tokens from the lock round, lagging counters raised (every node a TokenRaiser)
	nodeMinTTL  time.Duration // the largest of the nodes' MinTTL
	caps        driver.Capabilities

	mu      sync.Mutex
	closed  bool
	closing chan struct{}         // closed when Close begins
	stalled []atomic.Bool         // per node: its latest call ran out of time
	calls   sync.WaitGroup        // calls in progress
	pool    inflight.Pool         // workers for node calls and the work they leave
	workers inflight.Tracker      // the pool's workers, and so the work calls leave behind
	turns   inflight.Order[opKey] // the calls of each request on each node (see Ordering on one node)

	contention *contention // keys refused lately, whose acquisitions ask the lead first
}

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.Notifier      = (*Driver)(nil)
	_ driver.Lister        = (*Driver)(nil)
	_ driver.ForceReleaser = (*Driver)(nil)
	_ driver.HoldReader    = (*Driver)(nil)
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

// WithoutFenceRound makes Acquire take the largest of the majority's lock
// tokens as it comes, for callers that ignore the token (see Fencing tokens
// in the package documentation). Over nodes that are TokenRaisers (Redis),
// it skips raising the counters that lag behind that token, a second round
// that Acquire otherwise makes only when the nodes' counters have drifted
// apart; over other nodes, it skips the fence round every Acquire otherwise
// makes, which halves its round trips. Either way the token is then not
// even monotonic while clients compete: a node that granted the lock to the
// loser of a split vote has counted one acquisition more than the others.
// Use it only where nobody reads the token.
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
		fence:       !cfg.noFence && !raisers(nodes),
		raise:       !cfg.noFence && raisers(nodes),
		closing:     make(chan struct{}),
		stalled:     make([]atomic.Bool, len(nodes)),
		contention:  newContention(),
	}
	d.pool = inflight.Pool{Tasks: make(chan inflight.Task), Workers: &d.workers, Closing: d.closing, Idle: workerIdle}
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
		Modes:         driver.Modes(driver.Exclusive),
		ServerClock:   true,
		MaxKeyLen:     math.MaxInt,
		MinTTL:        10 * time.Millisecond,
		PortableHolds: true,
		LockDelay:     true,
		// Every call returns once ctx ends, leaving the node calls it
		// made to finish in the background (see fanout), so package
		// dlock need not run it on a goroutine of its own.
		CancelsPromptly: true,
	}
	for _, n := range d.nodes {
		c := n.Capabilities()
		caps.ServerClock = caps.ServerClock && c.ServerClock
		caps.PortableHolds = caps.PortableHolds && c.PortableHolds
		caps.LockDelay = caps.LockDelay && c.LockDelay && !c.SessionLockDelay // the quorum pads the TTL
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
// (a quorum of shared holds is not implemented yet). CancelsPromptly is
// true: every call returns once its ctx ends, and the node calls it made
// finish in the background. Tokens are not durable
// and there is no consensus (see the package documentation); ServerClock is
// true when every node's leases expire on the node's clock, and
// PortableHolds when every node's holds are portable. MaxKeyLen,
// MaxTTL and MaxLimit are the smallest, MinTTL the largest of the nodes'
// (MaxKeyLen less 13 bytes for the fence key when the nodes are not all
// TokenRaisers, unless WithoutFenceRound was
// given).
func (d *Driver) Capabilities() driver.Capabilities { return d.caps }

var errClosed = errors.New("quorum: driver closed")

// enter registers a call, so that Close waits for it and for the work it
// leaves in the background, after checking it: not after Close, not with
// a done ctx, and (if req is not nil) in a mode the quorum offers. If it
// returns nil, the caller calls d.calls.Done when it returns.
func (d *Driver) enter(ctx context.Context, req *driver.Request) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return errClosed
	}
	d.calls.Add(1)
	d.mu.Unlock()
	var err error
	switch {
	case ctx.Err() != nil:
		err = ctx.Err()
	case req != nil && req.Mode != driver.Exclusive:
		err = fmt.Errorf("quorum: %s mode: %w", req.Mode, driver.ErrUnsupported)
	}
	if err != nil {
		d.calls.Done()
	}
	return err
}

// workerIdle is how long a worker of the pool waits for its next task
// before it ends. A fresh goroutine's stack growth through a node's call
// chain took a tenth of the client's CPU time of an uncontended lock over
// three Redis servers (see inflight.Pool).
const workerIdle = 2 * time.Second

// name names node i in errors and logs: "node i", followed by the node's
// address when the node is a fmt.Stringer (the nodes a redlock:// URL
// opens are).
func (d *Driver) name(i int) string {
	if s, ok := d.nodes[i].(fmt.Stringer); ok {
		return fmt.Sprintf("node %d (%s)", i, s)
	}
	return fmt.Sprintf("node %d", i)
}

// acquireGrace is the least time an acquisition or a refresh waits for the
// nodes still answering once its outcome is decided, so that every node
// that is up holds the lock when Acquire returns, a refresh gives the hold
// back to every node that is up and lost it, and a hold on just a majority
// is not lost to the first node that fails. The grace is as long again as
// the decision took, at least acquireGrace; it is not waited for nodes that
// are known to be hung (see fanout), so that a hung node costs as little
// as one that is down.
const acquireGrace = 5 * time.Millisecond

// Acquire implements driver.Driver: it asks every node in parallel (a
// contended key's lead first, see The lead of a key) and succeeds once a
// majority granted the hold, waiting only briefly for the other nodes (see
// acquireGrace and fanout). The fencing token is the
// largest of the nodes' lock tokens; unless WithoutFenceRound was given,
// Acquire first makes sure that enough nodes count that far, raising the
// counters that lag behind it (nodes that are TokenRaisers, in a second
// round that runs only when the counters have drifted apart), or takes the
// token in a fence round with time limits of its own (other nodes). See
// Fencing tokens in the package documentation. A repeated Acquire by the
// holder returns the same token.
//
// If no majority granted the hold, it is released on every node that
// granted it (before Acquire returns) or did not answer (in the background,
// once the node's call has returned), and the result is "not acquired",
// with RetryAfter estimating when a majority may be free. If fewer than a
// majority of nodes answered at all, Acquire returns their errors, naming
// the nodes. Acquire never retries: package dlock tries again after a
// randomised backoff.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (_ driver.Result, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	if err := d.enter(ctx, &req); err != nil {
		return driver.Result{}, err
	}
	defer d.calls.Done()
	answers := d.acquireRound(ctx, req)
	yesN, noN, _ := count(answers)
	if noN > 0 {
		// Held by another owner, or wanted by one: ask the lead first
		// for a while (see The lead of a key).
		d.contention.refused(req.Key, req.TTL)
	}
	if yesN >= d.quorum {
		return d.granted(ctx, req, answers)
	}
	if err := ctxerr.Err(ctx); err != nil {
		// The caller releases after an error (driver contract).
		return driver.Result{}, fmt.Errorf("quorum: acquire %q: %w", req.Key, err)
	}
	if yesN+noN < d.quorum {
		return driver.Result{}, fmt.Errorf("quorum: acquire %q: only %d of %d nodes answered, %d needed: %w",
			req.Key, yesN+noN, len(d.nodes), d.quorum, d.errs(answers))
	}
	if err := d.rollback(ctx, req, answers); err != nil {
		return driver.Result{}, err
	}
	return driver.Result{RetryAfter: d.retryAfter(answers)}, nil
}

// granted returns the result of an acquisition that a majority granted,
// with answers: the largest lock token, raised on the nodes that lag behind
// it or replaced by a fencing token from a fence round (see Acquire), and
// the lease that is left after the drift margin.
func (d *Driver) granted(ctx context.Context, req driver.Request, answers []answer) (driver.Result, error) {
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
	if d.raise {
		if err := d.settleToken(ctx, req, answers, res.Token); err != nil {
			// The caller releases after an error.
			return driver.Result{}, fmt.Errorf("quorum: acquire %q: %w", req.Key, err)
		}
	}
	if d.fence {
		tok, ok, err := d.takeToken(ctx, req)
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

// rollback releases a failed acquisition on the nodes that granted it or
// answered with an error, and in the background on those whose answer is
// still to come or that timed out (a hung node). It returns an error only if
// a node that granted the hold could not release it: the caller then
// releases again.
func (d *Driver) rollback(ctx context.Context, req driver.Request, answers []answer) error {
	timeout := nodeTimeout(req.TTL)
	var granted []int
	for i, a := range answers {
		switch {
		case a.vote == yes:
			granted = append(granted, i)
		case a.vote == no, errors.Is(a.err, inflight.ErrBusy), errors.Is(a.err, errNotAsked):
			// Refused, or not asked.
		case errors.Is(a.err, errNoAnswer), errors.Is(a.err, context.DeadlineExceeded):
			// The node has not answered, or is hung: it may grant the
			// hold yet. Release it there once its call has returned,
			// in the background.
			d.cleanupOn(i, req)
		default:
			// The node answered with an error: the hold may have been
			// granted and the answer lost.
			granted = append(granted, i)
		}
	}
	turns := make([]*inflight.Turn, len(d.nodes))
	for _, i := range granted {
		turns[i] = d.register(req, i, inflight.Release)
	}
	var errs []error
	for i, err := range d.each(ctx, granted, func(ctx context.Context, i int) error { return d.releaseOn(ctx, turns[i], i, req, timeout) }) {
		if err != nil && !errors.Is(err, driver.ErrNotOwner) && answers[i].vote == yes {
			errs = append(errs, fmt.Errorf("%s: %w", d.name(i), err))
		}
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
// succeeds once a majority renewed it, waiting only briefly for the others
// (see acquireGrace). A node that had lost the hold
// while the majority kept it gets it back (if it is free there). When so
// many nodes report driver.ErrNotOwner that a majority cannot be reached,
// the lock is lost: Refresh releases what is left of it (on the nodes that
// have not answered, in the background) and returns an error wrapping
// driver.ErrNotOwner.
// Otherwise (nodes failed) it returns their errors, and package dlock keeps
// the lock until its validity ends, trying again.
func (d *Driver) Refresh(ctx context.Context, req driver.Request) (err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	if err := d.enter(ctx, &req); err != nil {
		return err
	}
	defer d.calls.Done()
	timeout := nodeTimeout(req.TTL)
	answers := d.fanout(ctx, acquireGrace, false, d.renewed, func(ctx context.Context, i int) answer {
		return voteOf(d.withFence(ctx, req, func(ctx context.Context, r driver.Request) error {
			_, err := timed(ctx, timeout, func(ctx context.Context) (struct{}, error) { return struct{}{}, d.nodes[i].Refresh(ctx, r) })
			return err
		}))
	})
	yesN, noN, _ := count(answers)
	switch {
	case yesN >= d.quorum:
		if noN > 0 {
			d.heal(ctx, req, answers)
		}
		return nil
	case noN > len(d.nodes)-d.quorum:
		// Lost for good: free the minority that still holds it (and the
		// fences), so that it does not stand in the next holder's way.
		d.releaseLeft(ctx, req, answers)
		return fmt.Errorf("quorum: refresh %q: %d of %d nodes no longer hold it, %d needed: %w",
			req.Key, noN, len(d.nodes), d.quorum, driver.ErrNotOwner)
	default:
		return fmt.Errorf("quorum: refresh %q: only %d of %d nodes renewed the lease, %d needed: %w",
			req.Key, yesN, len(d.nodes), d.quorum, d.errs(answers))
	}
}

// heal gives the hold back to the nodes that lost it while a majority kept
// it (a restart, a node that was down when the lock was taken); they have
// just answered, and are waited for (each within its node timeout). The
// majority proves that nobody else holds the lock, so taking a free node
// is safe; a node held by someone else refuses. Failures are logged only.
func (d *Driver) heal(ctx context.Context, req driver.Request, answers []answer) {
	timeout := nodeTimeout(req.TTL)
	turns := make([]*inflight.Turn, len(d.nodes))
	var lost []int
	for i, a := range answers {
		if a.vote == no {
			lost = append(lost, i)
			turns[i] = d.register(req, i, inflight.Acquire)
		}
	}
	errs := d.each(ctx, lost, func(ctx context.Context, i int) error {
		res, err := d.acquireOn(ctx, turns[i], i, req, timeout)
		if err == nil && !res.Acquired {
			err = errors.New("held by another owner")
		}
		return err
	})
	for _, i := range lost {
		if errs[i] != nil {
			d.log.Warn("quorum: a node lost the hold and cannot get it back", "key", req.Key, "node", d.name(i), "err", errs[i])
		}
	}
}

// releaseLeft releases a lost hold (and its fence) on every node: on those
// that answered before it returns (each within its node timeout), on the
// others in the background.
func (d *Driver) releaseLeft(ctx context.Context, req driver.Request, answers []answer) {
	timeout := nodeTimeout(req.TTL)
	reqs := []driver.Request{req}
	if d.fence {
		reqs = append(reqs, d.fenceReq(req))
	}
	var up []int
	for i, a := range answers {
		if a.vote == failed {
			for _, r := range reqs {
				d.cleanupOn(i, r)
			}
			continue
		}
		up = append(up, i)
	}
	turns := make([][]*inflight.Turn, len(d.nodes))
	for _, i := range up {
		for _, r := range reqs {
			turns[i] = append(turns[i], d.register(r, i, inflight.Release))
		}
	}
	d.each(ctx, up, func(ctx context.Context, i int) error {
		var errs []error
		for j, r := range reqs {
			errs = append(errs, d.releaseOn(ctx, turns[i][j], i, r, timeout))
		}
		return errors.Join(errs...)
	})
}

// Release implements driver.Driver: it releases the hold on every node.
// Once a majority has answered, the others get as long again (at least
// 50ms) to answer before Release returns, so that every node that is up is
// rid of the hold by then; a node that does not answer in that time (down,
// hung) gets its release in the background, and keeps the hold until its
// lease ends if the release never reaches it. It returns nil if a majority
// released a live hold, an error wrapping driver.ErrNotOwner if so many
// nodes did not hold it that no majority can have held it, and the nodes'
// errors otherwise.
func (d *Driver) Release(ctx context.Context, req driver.Request) (err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	if err := d.enter(ctx, &req); err != nil {
		return err
	}
	defer d.calls.Done()
	timeout := nodeTimeout(req.TTL)
	turns := d.registerAll(req, inflight.Release)
	var fenceTurns []*inflight.Turn
	if d.fence {
		fenceTurns = d.registerAll(d.fenceReq(req), inflight.Release)
	}
	answers := d.fanout(ctx, releaseGrace, false, d.renewed, func(ctx context.Context, i int) answer {
		return voteOf(d.withFence(ctx, req, func(ctx context.Context, r driver.Request) error {
			if r.Key != req.Key {
				return d.releaseOn(ctx, fenceTurns[i], i, r, timeout)
			}
			return d.releaseOn(ctx, turns[i], i, r, timeout)
		}))
	})
	yesN, noN, _ := count(answers)
	switch {
	case yesN >= d.quorum:
		return nil
	case noN > len(d.nodes)-d.quorum:
		return fmt.Errorf("quorum: release %q: %d of %d nodes did not hold it: %w", req.Key, noN, len(d.nodes), driver.ErrNotOwner)
	default:
		return fmt.Errorf("quorum: release %q: only %d of %d nodes released it, %d needed: %w",
			req.Key, yesN, len(d.nodes), d.quorum, d.errs(answers))
	}
}

// Close implements driver.Driver: it waits for the calls in flight and for
// the work they left in the background (calls on nodes that had not
// answered when their round was decided, and the releases that clean up
// after them), each bounded by its node timeout, then closes every node.
// Clean-ups waiting to try again on a node that does not answer give up,
// and a node whose latest call ran out of time is closed first, which ends
// the calls still waiting for it: holds they leave there expire with their
// leases.
// Holds are not released (package dlock releases its locks before it
// closes the driver).
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.closing)
	d.mu.Unlock()
	// A stalled node gets nothing done before the calls on it time out:
	// close it at once, which ends them (and what they would have done
	// there is left to the leases); wait for the others.
	// Nodes close in parallel: closing one that hangs can take as long
	// as its client's timeouts (a Redis pub/sub connection waits out its
	// reconnection), and those are not added up.
	errs := make([]error, len(d.nodes))
	stalled := make([]bool, len(d.nodes))
	var wg sync.WaitGroup
	closeNodes := func(which bool) {
		for i, n := range d.nodes {
			if stalled[i] == which {
				wg.Go(func() { errs[i] = n.Close() })
			}
		}
	}
	for i := range d.nodes {
		stalled[i] = d.stalled[i].Load()
	}
	closeNodes(true)
	d.calls.Wait()
	<-d.workers.Idle()
	closeNodes(false)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			errs[i] = fmt.Errorf("quorum: closing %s: %w", d.name(i), err)
		}
	}
	return errors.Join(errs...)
}

// voteOf classifies the result of a Refresh or Release on one node.
func voteOf(err error) answer {
	switch {
	case err == nil:
		return answer{vote: yes}
	case errors.Is(err, driver.ErrNotOwner):
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
			errs = append(errs, fmt.Errorf("%s: %w", d.name(i), a.err))
		}
	}
	return errors.Join(errs...)
}
