package zkdlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/errtext"
)

// Acquire implements driver.Driver with the ZooKeeper lock recipe: it
// creates an ephemeral sequential node under the key's znode, then lists the
// key's nodes and reads its own node's stat (two requests in flight
// together). The first node in sequence order holds the lock. See the
// package documentation.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := check(req); err != nil {
		return driver.Result{}, err
	}
	if n := len(encodeData(req.Owner, req.Info, true)); n > maxNodeData {
		return driver.Result{}, fmt.Errorf("zkdlock: acquire %q: node data of %d bytes (owner and Info), over the %d that fit in a ZooKeeper request: %w",
			req.Key, n, maxNodeData, driver.ErrUnsupported)
	}
	// The key's znode stays while the call runs.
	parent := d.parentPath(req.Key)
	d.parents.begin(parent)
	res, err := callFor(ctx, d, func() (driver.Result, error) { return d.acquire(ctx, req) })
	// Whoever removes a node the call left schedules the removal of the
	// key's znode then; without one, the call does it now.
	h, left := d.holds.Get(req.Owner)
	d.parents.end(parent, left && h.parent == parent)
	if err != nil {
		return driver.Result{}, fmt.Errorf("zkdlock: acquire%s: %w", errtext.Keyed(req.Key, err), err)
	}
	return res, nil
}

// acquire does the work of Acquire. It records in d.holds the node of this
// driver's session it leaves for the owner, except when it returns an error
// before it knows the node's stat (its caller's context ended after the
// create, or the look failed): the Release that follows an error finds that
// node by its owner's name.
func (d *Driver) acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	if h, ok := d.holds.Get(req.Owner); ok {
		return d.reacquire(req, h)
	}
	if req.Queue {
		if _, ok := d.lost.Take(req.Owner); ok {
			return driver.Result{}, notHeld("the lease of the queue entry ran out")
		}
	}
	p, err := d.place(ctx, req)
	if err != nil {
		return driver.Result{}, err
	}
	if err := d.refuse(req, p); err != nil {
		return driver.Result{}, err
	}
	h := hold{parent: p.parent, path: p.path, czxid: p.st.Czxid, session: p.st.EphemeralOwner, crowded: p.crowded,
		mode: req.Mode, limit: req.Limit, version: p.st.Version}
	s, err := d.validity(p)
	if err == nil {
		err = d.admit(&h, p.q, p.i)
	}
	if p.own && (err != nil || h.held || req.Queue) {
		d.holds.Put(req.Owner, h, req.TTL) // after an error, Release finds it
	}
	switch {
	case err != nil:
		return driver.Result{}, err
	case h.held || req.Queue:
		return d.answer(req, h, s)
	case p.own:
		// A single attempt leaves nothing behind.
		return driver.Result{}, d.drop(p.parent, p.path, p.sid)
	}
	return driver.Result{}, nil
}

// placement is where an Acquire finds the owner's node in the key's queue.
type placement struct {
	parent, path string   // the key's znode and the node
	children     []string // the key's children at the look
	q            []node   // the key's queue at the look
	i            int      // the node's place in q
	st           *zk.Stat // the node's stat
	sid          int64    // the driver's session when the node was made
	fresh        bool     // the node was made by this call
	own          bool     // the node is of sid, the driver's session still
	crowded      bool     // nodes of other owners followed it
}

// place creates the owner's node in the key's queue and finds it there.
// Normally the owner has just the node made now; an earlier attempt whose
// reply was lost, or another driver, may have made one too: the oldest
// keeps its place, the others go.
func (d *Driver) place(ctx context.Context, req driver.Request) (placement, error) {
	p := placement{parent: d.parentPath(req.Key)} // lingering, if the key was locked recently
	created, createErr := d.create(p.parent, nodeBase(req.Owner, req.Mode, req.Limit, d.layout), encodeData(req.Owner, req.Info, false))
	if createErr != nil && !maybeApplied(createErr) {
		return p, createErr
	}
	// createErr != nil: the reply was lost and the node may exist. Look for
	// it by its owner's name before anything else.
	if createErr == nil && ctx.Err() != nil {
		return p, ctx.Err()
	}
	p.sid = d.conn.SessionID()
	children, st, err := d.look(p.parent, created)
	if err != nil {
		return p, errors.Join(createErr, err)
	}
	id := dlock.OwnerID(req.Owner)
	p.children, p.q = children, queue(children)
	if p.i = find(p.q, id); p.i < 0 && createErr != nil {
		return p, createErr // it was not created
	} else if p.i < 0 {
		return p, fmt.Errorf("zkdlock: node %s vanished as it was created (session %#x ended?)", created, p.sid)
	}
	p.path = p.parent + "/" + p.q[p.i].name
	p.crowded = d.dropYounger(p.parent, p.q[p.i+1:], id, p.sid)
	if p.fresh = p.path == created; !p.fresh {
		var exists bool
		if exists, st, err = d.conn.Exists(p.path); err != nil {
			return p, err
		} else if !exists {
			st = nil
		}
	}
	if st == nil {
		return p, fmt.Errorf("zkdlock: node %s vanished as it was created (session %#x ended?)", p.path, p.sid)
	}
	p.st, p.own = st, st.EphemeralOwner == p.sid && d.conn.SessionID() == p.sid
	return p, nil
}

// dropYounger deletes the nodes of owner id among q, the nodes behind the
// owner's oldest, and reports whether nodes of other owners are among them.
func (d *Driver) dropYounger(parent string, q []node, id string, sid int64) (crowded bool) {
	for _, n := range q {
		if n.ownerID != id {
			crowded = true
			continue
		}
		p := parent + "/" + n.name
		if err := d.conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			d.retry(parent, p, sid)
		}
	}
	return crowded
}

// refuse returns why the request cannot stay in the key's queue, if it
// cannot, and then deletes the node the call made. The key's first node
// says what the key is in use as (see compatible); a foreign recipe blind
// to the node refuses it too. An older node in another mode is kept.
func (d *Driver) refuse(req driver.Request, p placement) error {
	err := foreignRecipe(p.children, p.q, d.layout)
	switch n := p.q[p.i]; {
	case err != nil:
	case n.mode != req.Mode || n.limit != req.Limit:
		err = mismatch(req.Key, n, req.Mode, req.Limit)
	case p.i > 0 && !compatible(p.q[0], req.Mode, req.Limit):
		err = mismatch(req.Key, p.q[0], req.Mode, req.Limit)
	}
	if err != nil && p.fresh && p.own {
		return cmp.Or(d.drop(p.parent, p.path, p.sid), err)
	}
	return err
}

// validity returns the longest lease the node p can back: the timeout of
// its session.
func (d *Driver) validity(p placement) (time.Duration, error) {
	switch {
	case p.own:
		return d.sess.timeoutOf(p.sid) // without it no validity can be promised
	case p.fresh || d.sess.ours(p.st.EphemeralOwner):
		// The session changed under the call: the node goes with the
		// old one.
		return 0, fmt.Errorf("zkdlock: the session of node %s ended during the call", p.path)
	}
	// Another session's node (another driver's, for the same owner): this
	// driver can neither renew its session nor know its timeout.
	return cmp.Or(d.sess.latest(), d.ttl), nil
}

// answer is the result of an Acquire that found the owner's node h holding
// or waiting, with the session timeout s: a single attempt that waits
// leaves the queue.
func (d *Driver) answer(req driver.Request, h hold, s time.Duration) (driver.Result, error) {
	switch {
	case h.held:
		return driver.Result{Acquired: true, Token: uint64(h.czxid), TTL: min(req.TTL, s)}, nil
	case req.Queue:
		return driver.Result{}, nil
	}
	return driver.Result{}, d.leave(req.Owner, h)
}

// reacquire is Acquire by an owner with a node of this driver: a renewal of
// a queue entry, an Acquire by the holder, or a downgrade.
func (d *Driver) reacquire(req driver.Request, h hold) (driver.Result, error) {
	downgrade, err := modeChange(req, h)
	switch {
	case h.session != d.conn.SessionID():
		return driver.Result{}, d.forget(req.Owner, h, "the session of its node ended")
	case err != nil:
		return driver.Result{}, err
	case downgrade && h.held:
		return d.downgrade(req, h)
	}
	p, err := d.relook(req.Owner, h)
	if err != nil {
		return driver.Result{}, err
	}
	s, err := d.sess.timeoutOf(h.session)
	if err != nil {
		return driver.Result{}, err
	}
	if err := foreignRecipe(p.children, p.q, d.layout); err != nil && !h.held {
		// A waiter that finds a foreign recipe blind to its node leaves.
		return driver.Result{}, errors.Join(err, d.leave(req.Owner, h))
	}
	if err := d.admit(&h, p.q, p.i); err != nil {
		return driver.Result{}, err
	}
	if downgrade && !h.held {
		// A waiting writer has nothing to downgrade.
		return driver.Result{}, fmt.Errorf("%q: the owner waits for the write lock: %w", req.Key, driver.ErrModeMismatch)
	}
	if !downgrade && !d.holds.Touch(req.Owner, req.TTL) {
		return driver.Result{}, notHeld("its lease ran out")
	}
	h.crowded, h.version = p.i < len(p.q)-1, p.st.Version
	d.holds.Update(req.Owner, func(hold) hold { return h })
	if downgrade {
		return d.downgrade(req, h)
	}
	return d.answer(req, h, s)
}

// modeChange checks the mode of req against the owner's node h: the same
// family and limit, and no upgrade from shared to exclusive. It reports a
// downgrade from exclusive to shared.
func modeChange(req driver.Request, h hold) (downgrade bool, err error) {
	switch {
	case (h.mode == driver.Semaphore) != (req.Mode == driver.Semaphore) || h.limit != req.Limit:
		return false, mismatch(req.Key, node{mode: h.mode, limit: h.limit}, req.Mode, req.Limit)
	case req.Mode == driver.Exclusive && (h.mode == driver.Shared || h.downgraded):
		return false, fmt.Errorf("%q: an upgrade from shared to exclusive: %w", req.Key, driver.ErrModeMismatch)
	}
	return req.Mode == driver.Shared && h.mode == driver.Exclusive && !h.downgraded, nil
}

// relook finds the owner's node h again in its key's queue, with the key's
// children and its stat. A node that is gone, or whose session has ended,
// is forgotten.
func (d *Driver) relook(owner string, h hold) (placement, error) {
	children, st, err := d.look(h.parent, h.path)
	if errors.Is(err, zk.ErrSessionExpired) {
		return placement{}, d.forget(owner, h, "the session of its node expired")
	}
	if err != nil {
		return placement{}, err
	}
	q := queue(children)
	i := slices.IndexFunc(q, func(n node) bool { return n.name == path.Base(h.path) })
	if i < 0 || !d.current(h, st) {
		return placement{}, d.forget(owner, h, "its node is gone")
	}
	return placement{children: children, q: q, i: i, st: st}, nil
}

// current reports whether st is the stat of h's node, in the driver's
// current session.
func (d *Driver) current(h hold, st *zk.Stat) bool {
	return st != nil && st.Czxid == h.czxid && st.EphemeralOwner == h.session && d.conn.SessionID() == h.session
}

// leave takes the owner's node h out of the queue.
func (d *Driver) leave(owner string, h hold) error {
	d.holds.Take(owner)
	return d.drop(h.parent, h.path, h.session)
}

// drop deletes the node p of session under the key's znode parent, and
// tries again in the background if that fails.
func (d *Driver) drop(parent, p string, session int64) error {
	_, err := d.removeNode(parent, p, true)
	if err != nil {
		d.retry(parent, p, session)
	}
	return err
}

// downgrade turns the write hold h into a read hold: one setData of the
// node, conditional on the data version the driver knows, marks it (see
// encodeData). The node keeps its place, its creation zxid (the token) and
// its session; readers waiting behind it watch its data and are told. The
// request proves the session alive, as a Refresh does, and the lease is
// renewed.
func (d *Driver) downgrade(req driver.Request, h hold) (driver.Result, error) {
	st, err := d.conn.Set(h.path, encodeData(req.Owner, req.Info, true), h.version)
	if errors.Is(err, zk.ErrBadVersion) {
		// An earlier downgrade whose reply was lost, perhaps.
		var data []byte
		data, st, err = d.conn.Get(h.path)
		if _, _, downgraded, _ := decodeData(data); err == nil && !downgraded {
			return driver.Result{}, fmt.Errorf("zkdlock: the data of node %s changed under the driver", h.path)
		}
	}
	switch {
	case err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrSessionExpired):
		return driver.Result{}, err
	case err != nil || !d.current(h, st):
		return driver.Result{}, d.forget(req.Owner, h, "its node is gone")
	}
	s, err := d.sess.timeoutOf(h.session)
	if err != nil {
		return driver.Result{}, err
	}
	if !d.holds.Touch(req.Owner, req.TTL) {
		return driver.Result{}, notHeld("its lease ran out")
	}
	d.holds.Update(req.Owner, func(h hold) hold {
		h.downgraded, h.version = true, st.Version
		return h
	})
	return driver.Result{Acquired: true, Token: uint64(h.czxid), TTL: min(req.TTL, s)}, nil
}

// create creates the contender's ephemeral sequential node under parent,
// creating parent first if it is missing, and returns its path. The parent
// may vanish between the two: another driver (or this one, for a key whose
// linger period ended) deleted it when it was empty. ZooKeeper deletes only
// empty znodes, so a contender's node, once created, keeps the parent; a
// Create that finds the parent gone creates it again.
func (d *Driver) create(parent, name string, data []byte) (string, error) {
	var err error
	for range createAttempts {
		var p string
		p, err = d.conn.Create(parent+"/"+name, data, zk.FlagEphemeralSequential, d.acl)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return "", err
		}
		if err = d.ensureParent(parent); err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("zkdlock: %s keeps vanishing: %w", parent, err)
}

// ensureParent creates a key's znode, as a container (which the server
// deletes once it is empty, should the driver's own deletion not happen),
// and the prefix's znodes if they are missing.
func (d *Driver) ensureParent(parent string) error {
	_, err := d.conn.CreateContainer(parent, nil, zk.FlagContainer, d.acl)
	if errors.Is(err, zk.ErrNoNode) {
		p := ""
		for c := range strings.SplitSeq(d.root[1:], "/") {
			p += "/" + c
			if _, err := d.conn.Create(p, nil, zk.FlagPersistent, d.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return err
			}
		}
		_, err = d.conn.CreateContainer(parent, nil, zk.FlagContainer, d.acl)
	}
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return err
	}
	return nil
}

// look lists parent's children and, if p is not empty, reads p's stat (nil
// if p does not exist), with the two requests in flight together. A
// missing parent has no children.
func (d *Driver) look(parent, p string) (children []string, st *zk.Stat, err error) {
	var (
		exists bool
		serr   error
		wg     sync.WaitGroup
	)
	if p != "" {
		wg.Go(func() { exists, st, serr = d.conn.Exists(p) })
	}
	children, _, err = d.conn.Children(parent)
	wg.Wait()
	if errors.Is(err, zk.ErrNoNode) {
		children, err = nil, nil
	}
	if err = cmp.Or(err, serr); err != nil {
		return nil, nil, err
	}
	if !exists {
		st = nil
	}
	return children, st, nil
}

// maybeApplied reports whether a request that failed with err may have
// been applied all the same: its reply was lost with the connection.
func maybeApplied(err error) bool {
	for _, e := range []error{
		zk.ErrSessionExpired, zk.ErrNoServer, zk.ErrClosing, errClosed,
		zk.ErrNoNode, zk.ErrNodeExists, zk.ErrNoAuth, zk.ErrBadVersion, zk.ErrNoChildrenForEphemerals,
		zk.ErrNotEmpty, zk.ErrInvalidACL, zk.ErrAuthFailed, zk.ErrInvalidPath, zk.ErrInvalidFlags, zk.ErrBadArguments,
	} {
		if errors.Is(err, e) {
			return false
		}
	}
	return true
}
