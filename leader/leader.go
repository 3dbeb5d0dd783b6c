// Package leader elects one leader per key among the processes of a fleet,
// over any dlock backend that can list the holders of a lock.
//
// Leadership of a key is an exclusive lock held with automatic renewal.
// Campaign waits until the caller holds it and returns a Term. The term's
// number is the lock's fencing token: every later term of the same key has a
// greater one, so a resource written by the leader can turn away a leader
// whose term has ended (one that was paused past its lease and woke up).
// Term.Context ends when the term does: on Resign, on Client.Close, or when
// the lease can no longer be trusted (renewal failed until its deadline, the
// store reports another holder). A leader must stop acting as one then.
//
// The value a campaigner passes (an address, a host name) is stored with its
// hold as the lock's info (dlock.WithInfo), so that Current and Observe can
// tell everyone who leads. A value is at most dlock.MaxInfoLen (1024) bytes
// of valid UTF-8 without NUL bytes; any other is refused with a
// *dlock.ArgError named "value". It may be empty.
//
// Observe delivers the leader of a key, and every change of it, including
// "no leader". It is woken by the store's release notifications where the
// backend has them (Redis pub/sub, PostgreSQL LISTEN/NOTIFY, etcd and
// ZooKeeper watches, the in-process store), and polls the list of holders
// otherwise, at most WithPollInterval apart (1s by default). A new leader
// and the end of a lease are never notified: after a change, and while
// there is no leader, it looks again quickly (from 2ms, doubling up to the
// poll interval); and it looks when the current leader's lease would end if
// it were not renewed.
//
// # Backends
//
// Every backend that lists holders (driver.Lister: in-process, SQLite,
// PostgreSQL, MySQL/MariaDB, Redis, etcd, ZooKeeper, and Redlock over nodes
// that can list) supports elections. Campaign, Current and Observe return an
// error wrapping dlock.ErrUnsupported on the others (memcached). Term
// numbers are as durable as the backend's fencing tokens
// (Capabilities.DurableTokens): on Redis without persistence a restart of
// the server may reuse them.
//
// How soon a paused or crashed leader is replaced is the lock's lease
// (WithTTL, or the Client's default TTL); on etcd and ZooKeeper, the
// driver's session timeout, whichever ends first.
package leader

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/errtext"
)

// Term is one process's leadership of a key, from Campaign until Resign, the
// Client's Close or a loss. Its methods are safe for concurrent use.
type Term struct {
	lock   *dlock.Lock
	value  string
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// CampaignOption configures Campaign.
type CampaignOption func(*campaignConfig)

type campaignConfig struct {
	ttl time.Duration
}

// WithTTL sets the lease of the leadership: a leader that crashes, hangs or
// is cut off from the store is replaced at most this long after its last
// renewal. The default is the Client's default TTL (dlock.WithDefaultTTL).
func WithTTL(d time.Duration) CampaignOption {
	return func(c *campaignConfig) { c.ttl = d }
}

// Campaign waits until the caller leads key, and returns its term. value is
// what Current and Observe report as the leader's value while the term lasts
// (see the package documentation for its limits).
//
// ctx bounds the wait only; the term lasts until Resign, Client.Close or a
// loss (see Term.Context). When ctx ends first, the error wraps
// dlock.ErrNotAcquired and ctx's error, and the campaign leaves nothing on
// the store. Campaigners of one Client for the same key queue locally, so
// that one remote wait per key and process serves them all.
//
// Campaign fails with an error wrapping dlock.ErrUnsupported if the backend
// cannot list holders, an *dlock.ArgError for a bad key, value or TTL, and
// dlock.ErrClosed once the Client is closed.
func Campaign(ctx context.Context, c *dlock.Client, key, value string, opts ...CampaignOption) (*Term, error) {
	if err := check(ctx, c); err != nil {
		return nil, err
	}
	if _, ok := c.Driver().(driver.Lister); !ok {
		return nil, fmt.Errorf("leader: %w: the backend (%T) cannot list holders, so a leader's value could not be read", dlock.ErrUnsupported, c.Driver())
	}
	if err := checkValue(value); err != nil {
		return nil, err
	}
	var cfg campaignConfig
	for _, o := range opts {
		o(&cfg)
	}
	lockOpts := []dlock.LockOption{dlock.WithInfo(value)}
	if cfg.ttl != 0 {
		lockOpts = append(lockOpts, dlock.WithTTL(cfg.ttl))
	}
	l, err := c.Lock(ctx, key, lockOpts...)
	if err != nil {
		return nil, fmt.Errorf("leader: campaign%s: %w", errtext.Keyed(key, err), errtext.Bare(err))
	}
	t := &Term{lock: l, value: value}
	// The term's context is not the lock's: a context derived from the
	// lock's would re-enter the lock (see dlock.Client.Lock), and a
	// Campaign with it would return this term again instead of waiting.
	t.ctx, t.cancel = context.WithCancelCause(context.Background())
	context.AfterFunc(l.Context(), t.end)
	return t, nil
}

// end cancels the term's context with the reason its lock ended.
func (t *Term) end() { t.cancel(context.Cause(t.lock.Context())) }

// Key returns the key the term leads.
func (t *Term) Key() string { return t.lock.Key() }

// Value returns the value the term was campaigned with.
func (t *Term) Value() string { return t.value }

// Number returns the term number: the fencing token of the leadership,
// greater than the number of every earlier term of the key. Observers see
// it as Leader.Term.
func (t *Term) Number() uint64 { return t.lock.Token() }

// Token returns the term number as a fencing token (the same value as
// Number), for the resource the leader writes to: have it reject tokens
// lower than the highest it has seen.
func (t *Term) Token() uint64 { return t.lock.Token() }

// OwnerID returns the public identifier of this term's holder, as
// Leader.OwnerID shows it to observers.
func (t *Term) OwnerID() string { return t.lock.OwnerID() }

// Context returns a context that ends when the term does. context.Cause
// tells why: dlock.ErrNotHeld after Resign, an error wrapping dlock.ErrLost
// when the leadership could no longer be trusted (the process was paused or
// cut off past its lease, the store reports another holder), dlock.ErrClosed
// after Client.Close. It ends before the store can let another campaigner
// lead, except that a process paused past its lease learns of the end only
// when it runs again (the next leader's term number is greater, for
// fencing).
func (t *Term) Context() context.Context { return t.ctx }

// Done is shorthand for Context().Done().
func (t *Term) Done() <-chan struct{} { return t.ctx.Done() }

// Resign ends the term and releases the leadership at once, so that another
// campaigner may lead. The term's Context ends. It returns nil if the term
// was held, and also if it had been resigned already (resigning twice is
// safe); an error wrapping dlock.ErrLost if the term had been lost before
// (the leader's work may have overlapped its successor's); dlock.ErrClosed
// after Client.Close. As with dlock.Lock.Release, the release reaches the
// store even if ctx has already ended.
func (t *Term) Resign(ctx context.Context) error {
	err := t.lock.Release(ctx)
	if t.lock.Context().Err() != nil {
		t.end() // now, not when the lock's context hook runs
	}
	if errors.Is(err, dlock.ErrNotHeld) {
		return nil // resigned already
	}
	if err != nil {
		return fmt.Errorf("leader: resign%s: %w", errtext.Keyed(t.Key(), err), errtext.Bare(err))
	}
	return nil
}

// Leader is the leader of a key as the store lists it. The zero value means
// that nobody leads.
type Leader struct {
	// Value is the value the leader campaigned with.
	Value string
	// Term is the leader's term number (Term.Number): it is greater for
	// every later term of the key.
	Term uint64
	// OwnerID identifies the leader's hold (Term.OwnerID); it is empty when
	// nobody leads.
	OwnerID string
}

// Elected reports whether somebody leads.
func (l Leader) Elected() bool { return l.OwnerID != "" }

// Current returns the leader of key, or a zero Leader if nobody leads. It
// fails with an error wrapping dlock.ErrUnsupported if the backend cannot
// list holders.
func Current(ctx context.Context, c *dlock.Client, key string) (Leader, error) {
	if err := check(ctx, c); err != nil {
		return Leader{}, err
	}
	l, _, err := read(ctx, c, key)
	return l, err
}

// read lists the holders of key and returns its leader and the time left on
// the leader's lease (zero if unknown or nobody leads).
func read(ctx context.Context, c *dlock.Client, key string) (Leader, time.Duration, error) {
	hs, err := c.Holders(ctx, key)
	if err != nil {
		return Leader{}, 0, fmt.Errorf("leader: read the leader of%s: %w", errtext.Keyed(key, err), errtext.Bare(err))
	}
	var best *dlock.Holder
	for i, h := range hs {
		if h.Mode == dlock.ModeExclusive && (best == nil || h.Token > best.Token) {
			best = &hs[i]
		}
	}
	if best == nil {
		return Leader{}, 0, nil
	}
	return Leader{Value: best.Info, Term: best.Token, OwnerID: best.Owner}, best.TTL, nil
}

func check(ctx context.Context, c *dlock.Client) error {
	if ctx == nil {
		return &dlock.ArgError{Name: "ctx", Reason: "must not be nil"}
	}
	if c == nil {
		return &dlock.ArgError{Name: "client", Reason: "must not be nil"}
	}
	return nil
}

func checkValue(v string) error {
	switch {
	case len(v) > dlock.MaxInfoLen:
		return &dlock.ArgError{Name: "value", Value: v, Reason: fmt.Sprintf("is %d bytes, longer than the maximum of %d", len(v), dlock.MaxInfoLen)}
	case !utf8.ValidString(v):
		return &dlock.ArgError{Name: "value", Value: v, Reason: "is not valid UTF-8"}
	case strings.IndexByte(v, 0) >= 0:
		return &dlock.ArgError{Name: "value", Value: v, Reason: "contains a NUL byte"}
	}
	return nil
}
