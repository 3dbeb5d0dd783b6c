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
	var res driver.Result
	err := call(ctx, d, func() (err error) {
		res, err = d.acquire(ctx, req)
		return err
	})
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
	parent := d.parentPath(req.Key) // lingering, if the key was locked recently
	created, createErr := d.create(parent, nodeBase(req.Owner, req.Mode, req.Limit, d.layout), encodeData(req.Owner, req.Info, false))
	if createErr != nil && !maybeApplied(createErr) {
		return driver.Result{}, createErr
	}
	// createErr != nil: the reply was lost and the node may exist. Look for
	// it by its owner's name before anything else.
	if createErr == nil && ctx.Err() != nil {
		return driver.Result{}, ctx.Err()
	}
	sid := d.conn.SessionID()
	children, st, err := d.look(parent, created)
	if err != nil {
		if createErr != nil {
			err = errors.Join(createErr, err)
		}
		return driver.Result{}, err
	}
	q := queue(children)
	id := dlock.OwnerID(req.Owner)
	i := find(q, id)
	if i < 0 {
		if createErr != nil {
			return driver.Result{}, createErr // it was not created
		}
		return driver.Result{}, fmt.Errorf("zkdlock: node %s vanished as it was created (session %#x ended?)", created, sid)
	}
	// Normally the owner has just the node made now; an earlier attempt
	// whose reply was lost, or another driver, may have made one too. The
	// oldest keeps its place; the others go.
	keep := parent + "/" + q[i].name
	crowded := false
	for _, n := range q[i+1:] {
		if n.ownerID != id {
			crowded = true
			continue
		}
		p := parent + "/" + n.name
		if err := d.conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			d.retry(parent, p, sid)
		}
	}
	if keep != created {
		created = ""
		var exists bool
		if exists, st, err = d.conn.Exists(keep); err != nil {
			return driver.Result{}, err
		} else if !exists {
			st = nil
		}
	}
	if st == nil {
		return driver.Result{}, fmt.Errorf("zkdlock: node %s vanished as it was created (session %#x ended?)", keep, sid)
	}
	own := st.EphemeralOwner == sid && d.conn.SessionID() == sid
	// Modes: the key's first node says what the key is in use as; a
	// request that cannot join it leaves (see compatible), and so does one
	// on a key a foreign recipe blind to its node uses. An older node of the
	// owner in another mode is kept, and the request refused.
	refused := foreignRecipe(children, q, d.layout)
	switch {
	case refused != nil:
	case q[i].mode != req.Mode || q[i].limit != req.Limit:
		refused = mismatch(req.Key, q[i], req.Mode, req.Limit)
	case i > 0 && !compatible(q[0], req.Mode, req.Limit):
		refused = mismatch(req.Key, q[0], req.Mode, req.Limit)
	}
	if refused != nil {
		if keep == created && own {
			if _, err := d.removeNode(parent, keep, true); err != nil {
				d.retry(parent, keep, sid)
				return driver.Result{}, err
			}
		}
		return driver.Result{}, refused
	}
	s, known := d.sess.timeoutOf(st.EphemeralOwner)
	h := hold{parent: parent, path: keep, czxid: st.Czxid, session: st.EphemeralOwner, crowded: crowded,
		mode: req.Mode, limit: req.Limit, version: st.Version}
	switch {
	case own && !known:
		// Without the granted timeout no validity can be promised.
		d.holds.Put(req.Owner, h, req.TTL)
		return driver.Result{}, fmt.Errorf("zkdlock: the session timeout the server granted to session %#x is unknown", sid)
	case !own && (keep == created || d.sess.ours(st.EphemeralOwner)):
		// The session changed under the call: the node goes with the
		// old one.
		return driver.Result{}, fmt.Errorf("zkdlock: the session of node %s ended during the call", keep)
	case !own:
		// Another session's node (another driver's, for the same owner):
		// this driver can neither renew its session nor know its timeout.
		s = cmp.Or(d.sess.latest(), d.ttl)
	}
	held, v, err := d.admitted(parent, q, i)
	if err != nil {
		if own {
			d.holds.Put(req.Owner, h, req.TTL) // Release finds it
		}
		return driver.Result{}, err
	}
	h.note(held, v)
	switch {
	case held:
		if own {
			d.holds.Put(req.Owner, h, req.TTL)
		}
		return driver.Result{Acquired: true, Token: uint64(st.Czxid), TTL: min(req.TTL, s)}, nil
	case req.Queue:
		if own {
			d.holds.Put(req.Owner, h, req.TTL)
		}
		return driver.Result{}, nil
	case own:
		// A single attempt leaves nothing behind.
		if _, err := d.removeNode(parent, keep, true); err != nil {
			d.retry(parent, keep, sid)
			return driver.Result{}, err
		}
	}
	return driver.Result{}, nil
}

// note records in h what the last look found.
func (h *hold) note(held bool, v verdict) {
	h.held, h.first, h.wait = held, v.first, nil
	if v.children {
		return // Subscribe lists the children itself
	}
	for _, n := range v.wait {
		h.wait = append(h.wait, n.name)
	}
}

// reacquire is Acquire by an owner with a node of this driver: a renewal of
// a queue entry, an Acquire by the holder, or a downgrade.
func (d *Driver) reacquire(req driver.Request, h hold) (driver.Result, error) {
	if h.session != d.conn.SessionID() {
		d.forget(req.Owner, h)
		return driver.Result{}, notHeld("the session of its node ended")
	}
	downgrade := false
	switch {
	case (h.mode == driver.Semaphore) != (req.Mode == driver.Semaphore) || h.limit != req.Limit:
		return driver.Result{}, mismatch(req.Key, node{mode: h.mode, limit: h.limit}, req.Mode, req.Limit)
	case req.Mode == driver.Exclusive && (h.mode == driver.Shared || h.downgraded):
		return driver.Result{}, fmt.Errorf("%q: an upgrade from shared to exclusive: %w", req.Key, driver.ErrModeMismatch)
	case req.Mode == driver.Shared && h.mode == driver.Exclusive && !h.downgraded:
		if h.held {
			return d.downgrade(req, h)
		}
		downgrade = true
	}
	children, st, err := d.look(h.parent, h.path)
	if errors.Is(err, zk.ErrSessionExpired) {
		d.forget(req.Owner, h)
		return driver.Result{}, notHeld("the session of its node expired")
	}
	if err != nil {
		return driver.Result{}, err
	}
	if st == nil || st.Czxid != h.czxid || st.EphemeralOwner != h.session || d.conn.SessionID() != h.session {
		d.forget(req.Owner, h)
		return driver.Result{}, notHeld("its node is gone")
	}
	s, ok := d.sess.timeoutOf(h.session)
	if !ok {
		return driver.Result{}, fmt.Errorf("zkdlock: the session timeout the server granted to session %#x is unknown", h.session)
	}
	q := queue(children)
	i := slices.IndexFunc(q, func(n node) bool { return n.name == path.Base(h.path) })
	if i < 0 {
		d.forget(req.Owner, h)
		return driver.Result{}, notHeld("its node is gone")
	}
	held, v, err := d.admitted(h.parent, q, i)
	if err != nil {
		return driver.Result{}, err
	}
	if err := foreignRecipe(children, q, d.layout); err != nil && !h.held {
		// A waiter that finds a foreign recipe blind to its node leaves.
		return driver.Result{}, errors.Join(err, d.leave(req.Owner, h))
	}
	if downgrade {
		if !held {
			// A waiting writer has nothing to downgrade.
			return driver.Result{}, fmt.Errorf("%q: the owner waits for the write lock: %w", req.Key, driver.ErrModeMismatch)
		}
		h.crowded, h.version = i < len(q)-1, st.Version
		h.note(true, v)
		d.holds.Update(req.Owner, func(hold) hold { return h })
		return d.downgrade(req, h)
	}
	if !d.holds.Touch(req.Owner, req.TTL) {
		return driver.Result{}, notHeld("its lease ran out")
	}
	h.crowded, h.version = i < len(q)-1, st.Version
	h.note(held, v)
	d.holds.Update(req.Owner, func(hold) hold { return h })
	switch {
	case held:
		return driver.Result{Acquired: true, Token: uint64(h.czxid), TTL: min(req.TTL, s)}, nil
	case req.Queue:
		return driver.Result{}, nil
	}
	// A single attempt by an owner that queued before: leave the queue.
	return driver.Result{}, d.leave(req.Owner, h)
}

// leave takes the owner's node h out of the queue.
func (d *Driver) leave(owner string, h hold) error {
	d.holds.Take(owner)
	if _, err := d.removeNode(h.parent, h.path, true); err != nil {
		d.retry(h.parent, h.path, h.session)
		return err
	}
	return nil
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
		if err == nil {
			if _, _, downgraded, _ := decodeData(data); !downgraded {
				return driver.Result{}, fmt.Errorf("zkdlock: the data of node %s changed under the driver", h.path)
			}
		}
	}
	switch {
	case errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrSessionExpired):
		d.forget(req.Owner, h)
		return driver.Result{}, notHeld("its node is gone")
	case err != nil:
		return driver.Result{}, err
	}
	if st.Czxid != h.czxid || st.EphemeralOwner != h.session || d.conn.SessionID() != h.session {
		d.forget(req.Owner, h)
		return driver.Result{}, notHeld("its node is gone")
	}
	s, ok := d.sess.timeoutOf(h.session)
	if !ok {
		return driver.Result{}, fmt.Errorf("zkdlock: the session timeout the server granted to session %#x is unknown", h.session)
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
