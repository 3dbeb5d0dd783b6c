package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/holdid"
)

// holdRef is what a hold ID names (see internal/holdid for the format):
// enough to act on the hold from anywhere.
type holdRef struct {
	key, owner string
	mode       Mode
	limit      int
	token      uint64
	ttl, delay time.Duration
}

func (h holdRef) encode() string {
	return holdid.Ref{Key: h.key, Owner: h.owner, Mode: uint8(h.mode), Limit: uint64(h.limit), Token: h.token, TTL: uint64(h.ttl), Delay: uint64(h.delay)}.Encode()
}

// parseHoldID decodes a hold ID. Its errors are *ArgErrors that never show
// the ID itself.
func parseHoldID(id string) (holdRef, error) {
	bad := func(format string, args ...any) (holdRef, error) {
		return holdRef{}, argError("hold ID", hidden(len(id)), format, args...)
	}
	r, err := holdid.Decode(id)
	switch {
	case err != nil:
		return bad("%v", err)
	case r.Owner == "":
		return bad("is damaged: it has no owner")
	case Mode(r.Mode) > driver.Semaphore:
		return bad("is damaged: it names an unknown mode")
	case (Mode(r.Mode) == driver.Semaphore) != (r.Limit > 0) || r.Limit > 1<<31-1:
		return bad("is damaged: its limit does not fit its mode")
	case r.TTL == 0 || r.TTL > 1<<62 || r.Delay > 1<<62:
		return bad("is damaged: its lease is out of range")
	}
	return holdRef{key: r.Key, owner: r.Owner, mode: Mode(r.Mode), limit: int(r.Limit), token: r.Token, ttl: time.Duration(r.TTL), delay: time.Duration(r.Delay)}, nil
}

// hidden stands for a secret in an *ArgError: it shows the secret's length
// only.
type hidden int

func (h hidden) String() string { return fmt.Sprintf("(not shown, %d bytes)", int(h)) }

// HoldID returns a string that names this hold, for Client.Resume to act on
// it from another Client, in this process or another one: its key, owner
// token, mode, limit, fencing token and lease, in a versioned base64url
// encoding ("dlh1." and then about 4/3 of the key's length plus 60
// characters).
//
// A hold ID is a secret, as the owner token in it is: its bearer can read
// the hold (its key, mode, limit and token), refresh it, extend or shorten
// its lease, and release it. Hand it only to processes that may do so, keep
// it out of logs, URLs and error messages, and store it as you would store
// a password (dlock never shows it, nor the token in it). It is not
// encrypted: anyone who has it can read the key in it. It does not let its
// bearer choose the hold's fencing token, mode or limit (Resume takes them
// from the store, and refuses an ID whose token, mode or limit was
// changed), nor take a new hold.
//
// It records the lease that the lock asked for, which Resume takes by
// default, its lock delay (WithLockDelay), which Resume keeps, and its mode (take it after a Downgrade). The IDs that handles
// of one hold return (the Lock that took it, Locks resumed from it) all
// name that hold. HoldID still answers after the lock has ended, but then
// names a hold that Resume refuses.
func (l *Lock) HoldID() string {
	req := l.request()
	return holdRef{key: req.Key, owner: req.Owner, mode: req.Mode, limit: req.Limit, token: l.token, ttl: req.TTL - l.c.pad(l.delay), delay: l.delay}.encode()
}

// portable returns nil if the backend's holds can outlive their Client and
// move between Clients, and else an error wrapping ErrUnsupported that says
// why not.
func (c *Client) portable(what string) error {
	if c.caps.PortableHolds {
		return nil
	}
	return fmt.Errorf("dlock: %s: %w: this backend's holds live on the session of the client that took them "+
		"(an etcd lease, ZooKeeper ephemeral nodes) and end with it, so they cannot outlive it or move to another client", what, ErrUnsupported)
}

// Resume returns a Lock for the hold that holdID names (see Lock.HoldID),
// taken by another Client of the same store, in this process or another
// one, or by this one. It reads the hold back from the store by its key
// and owner, and then renews its lease (a driver ReadHold, then a
// Refresh); the new Lock then works as the one Lock returned: it has the
// same key, owner, mode and fencing token, renews itself unless
// WithoutRenewal is given, and can be refreshed, released, detached, and
// resumed again elsewhere with its HoldID.
//
// The fencing token, mode and limit are the store's, never the ID's: an
// ID whose token, mode or limit differ from those of the hold on the store
// (an ID that was edited) is refused with an *ArgError named "hold ID",
// and nothing changes on the store. (An ID taken before a Downgrade names
// an exclusive hold that the store has as shared: Resume returns a shared
// Lock.)
//
// The lease is the one the ID records (the lease that the Lock that gave it
// asked for), unless WithTTL gives another one: Resume sets the hold's
// lease to it from now, which extends or shortens the hold. The lock delay
// is the longest of the one the ID records, the Client's default and
// WithLockDelay: a Resume never shortens the delay the ID records. WithMaxHold
// counts from the call to Resume. The mode, limit, fairness and owner info
// of the hold are those it was taken with: Shared or WithLimit that
// disagree with the hold's mode make Resume fail with ErrModeMismatch, and
// WithInfo and Fair are ignored.
//
// A malformed hold ID is refused with an *ArgError (named "hold ID", not
// showing the ID) before anything reaches the store. If the store has no
// live hold for the ID (it was released, its lease ended, another holder
// took the key, or the ID belongs to another store), the error wraps
// ErrNotHeld, and the store is unchanged. If the store cannot be reached,
// the error wraps ErrUnavailable. On backends whose holds live on their
// client's session (Capabilities().PortableHolds is false: etcd,
// ZooKeeper) it returns an error wrapping ErrUnsupported.
//
// Each call returns a new handle: two handles of one hold (the one that
// took it and one that resumed it, say) each renew it, and a release
// through one of them makes the other lost. Hand a hold over with Detach
// on the giving side.
func (c *Client) Resume(ctx context.Context, holdID string, opts ...LockOption) (*Lock, error) {
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	h, err := parseHoldID(holdID)
	if err != nil {
		return nil, err
	}
	if err := c.portable(fmt.Sprintf("resume %q", h.key)); err != nil {
		return nil, err
	}
	reader, ok := c.drv.(driver.HoldReader)
	if !ok {
		return nil, fmt.Errorf("dlock: resume %q: %w: the driver (%T) cannot read a hold back", h.key, ErrUnsupported, c.drv)
	}
	if err := c.checkKey(h.key); err != nil {
		return nil, err
	}
	// The lease recorded in the ID is the default; WithTTL overrides it.
	// The lock delay is the longest of the ID's, the Client's and
	// WithLockDelay's: a resume never shortens it.
	opts = append(append([]LockOption{WithTTL(h.ttl)}, opts...), func(cfg *lockConfig) { cfg.delay = max(cfg.delay, h.delay) })
	cfg, err := c.lockConfig(opts)
	if err != nil {
		return nil, err
	}
	if !c.enter() {
		return nil, fmt.Errorf("dlock: resume %q: %w", h.key, ErrClosed)
	}
	defer c.ops.done()
	sent := time.Now()
	held, err := c.readHold(ctx, reader, h, len(holdID), cfg)
	if err != nil {
		return nil, err
	}
	req := c.request(driver.Request{Key: h.key, Owner: h.owner, Mode: held.Mode, Limit: held.Limit, Info: c.cfg.info}, cfg)
	_, _, err = do(c, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, c.drv.Refresh(ctx, req) })
	if err != nil {
		return nil, c.resumeFailure(ctx, h.key, err)
	}
	// A store with a coarse clock grants at least a whole number of its
	// units less one (memcached), and at least one unit (Redis's legacy
	// protocol in seconds): the lease may be that much shorter than asked.
	// The lease asked for includes the lock delay's pad, which leaves the
	// store at least the delay after the holder's lease.
	r := c.caps.TTLResolution
	ttl, validUntil := lease(driver.Request{TTL: cfg.ttl}, driver.Result{TTL: max(cfg.ttl.Truncate(r)-r, r)}, sent, 0)
	if !time.Now().Before(validUntil) {
		return nil, fmt.Errorf("dlock: %w: %q: the store answered after the lease of %v had run out", ErrLost, h.key, ttl)
	}
	l := newLock(c, ctx, req, held.Token, ttl, cfg, sent, validUntil, pass{})
	if l == nil {
		return nil, fmt.Errorf("dlock: resume %q: %w", h.key, ErrClosed)
	}
	e := l.event(EventAcquired, nil)
	e.Wait = time.Since(sent)
	c.observe(e)
	return l, nil
}

// readHold reads back from the store the hold that h names, and checks
// that it is the hold that h, decoded from a hold ID of idLen bytes, names
// (its token, mode and limit), and that cfg asks for its mode.
func (c *Client) readHold(ctx context.Context, reader driver.HoldReader, h holdRef, idLen int, cfg lockConfig) (driver.Holder, error) {
	held, _, err := do(c, ctx, func(ctx context.Context) (driver.Holder, error) { return reader.ReadHold(ctx, h.key, h.owner) })
	downgraded := h.mode == driver.Exclusive && held.Mode == driver.Shared
	m, n := cfg.mode()
	switch {
	case err != nil:
		return held, c.resumeFailure(ctx, h.key, err)
	case (held.Mode != h.mode && !downgraded) || held.Limit != h.limit || held.Token != h.token:
		return held, argError("hold ID", hidden(idLen), "does not match the hold on the store: its token, mode or limit was changed")
	case m != driver.Exclusive && (m != held.Mode || n != held.Limit):
		return held, fmt.Errorf("dlock: resume %q: %w: the hold is %s, not %s", h.key, ErrModeMismatch, held.Mode, m)
	}
	return held, nil
}

// resumeFailure is the error of Resume for err, the failure of a store
// request for the hold of key.
func (c *Client) resumeFailure(ctx context.Context, key string, err error) error {
	switch {
	case errors.Is(err, driver.ErrNotOwner):
		return fmt.Errorf("dlock: %w%s: the store has no live hold for this hold ID "+
			"(it was released, its lease ended, or it is another store's): %w", ErrNotHeld, keyed(key, err), err)
	case errors.Is(err, driver.ErrUnsupported), ctx.Err() != nil:
		return fmt.Errorf("dlock: resume%s: %w", keyed(key, err), err)
	}
	return fmt.Errorf("dlock: resume%s: %w", keyed(key, err), c.storeFailure(err))
}

// Detach lets go of the lock without releasing it: renewal stops, the
// Client forgets the lock (Client.Close does not release it), and the hold
// stays on the store until its lease ends, at most the lock's TTL (plus its
// lock delay) after its last renewal or refresh, or until a Lock resumed from its HoldID
// releases it. This process may exit meanwhile. To give the hold a known
// length, take it WithoutRenewal, or Refresh it (from a Lock with the TTL
// wanted, see Client.Resume) just before.
//
// The handle is done: its context ends with a cause wrapping ErrNotHeld
// that says the lock was detached, Refresh, Release, ReleaseAfter and
// Downgrade return that error and change nothing on the store, and HoldID
// still names the hold. Observers see EventReleased, as for a release, and
// Resume reports EventAcquired. Detach acts on the hold, which all
// re-entrant acquisitions of the lock share.
//
// It returns nil once the lock is detached, and is idempotent. If the lock
// had already ended otherwise (released, lost, its Client closed), it
// returns the reason, as Cause does: the hold is not on the store then, or
// cannot be trusted. On backends whose holds end with their client's
// session (Capabilities().PortableHolds is false: etcd, ZooKeeper) it
// returns an error wrapping ErrUnsupported and the lock stays as it was.
func (l *Lock) Detach() error {
	if err := l.c.portable(fmt.Sprintf("detach %q", l.req.Key)); err != nil {
		return err
	}
	first, ending := l.claimEnd()
	if !first {
		<-ending // a Release or Close ends the hold; it is bounded by ReleaseTimeout
		return l.detachedOr()
	}
	defer l.endClaim()
	l.stopRenewal()
	l.end(detached, fmt.Errorf("dlock: %w: %q was detached: its hold stays on the store until its lease ends", ErrNotHeld, l.req.Key))
	return l.detachedOr()
}

// detachedOr returns nil if the lock was detached, else the reason it ended
// (nil while held).
func (l *Lock) detachedOr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == detached {
		return nil
	}
	return l.cause
}
