package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// Refresh implements driver.Driver: it reads the stat of the owner's node
// and checks that it is the same node (creation zxid) of the driver's
// current session, which the request itself proves alive, then moves the
// lease's local deadline. With the stat it looks for a Curator semaphore
// that came to the key's znode after the hold began (it does not see the
// driver's nodes, so it may hold the key too): then the hold ends, its node
// is deleted and Refresh reports the owner no longer holds the key.
func (d *Driver) Refresh(ctx context.Context, req driver.Request) error {
	if err := check(req); err != nil {
		return err
	}
	if err := call(ctx, d, func() error { return d.refresh(req) }); err != nil {
		return fmt.Errorf("zkdlock: refresh %q: %w", req.Key, err)
	}
	return nil
}

func (d *Driver) refresh(req driver.Request) error {
	h, ok := d.holds.Get(req.Owner)
	if !ok {
		return d.refreshUnrecorded(req)
	}
	if h.session != d.conn.SessionID() {
		return d.forget(req.Owner, h, "the session of its node ended")
	}
	var (
		foreign error
		wg      sync.WaitGroup
	)
	wg.Go(func() { foreign = d.foreignNow(h.parent) })
	exists, st, err := d.conn.Exists(h.path)
	wg.Wait()
	if err != nil && d.sessionEnded(err, h.session) {
		return d.forget(req.Owner, h, "the session of its node ended")
	}
	if err != nil {
		return err
	}
	if !exists || !d.current(h, st) {
		return d.forget(req.Owner, h, "its node is gone")
	}
	if foreign != nil {
		return errors.Join(notHeld("%v", foreign), d.leave(req.Owner, h))
	}
	if !d.holds.Touch(req.Owner, req.TTL) {
		return notHeld("its lease ran out")
	}
	return nil
}

// refreshUnrecorded refreshes a hold the driver has no record of: found by
// its owner's name, it is another driver's (whose session this driver
// cannot renew), or one of this session that an Acquire made without
// reporting it, which the driver takes into its records.
func (d *Driver) refreshUnrecorded(req driver.Request) error {
	parent := d.parentPath(req.Key)
	sid := d.conn.SessionID()
	children, _, err := d.look(parent, "")
	if err != nil && d.clientEnded(err) {
		return notHeld("the driver's connection is closed")
	}
	if err != nil {
		return err
	}
	q := queue(children)
	i := find(q, dlock.OwnerID(req.Owner))
	if i < 0 {
		return notHeld("no node of this owner")
	}
	p := parent + "/" + q[i].name
	exists, st, err := d.conn.Exists(p)
	if err != nil {
		return err
	}
	own := st.EphemeralOwner == sid && d.conn.SessionID() == sid
	if !exists || !own && d.sess.ours(st.EphemeralOwner) {
		return notHeld("its node is gone")
	}
	if own {
		// Whether it holds is left for the next Acquire to find out.
		h := hold{parent: parent, path: p, czxid: st.Czxid, session: sid, crowded: i < len(q)-1,
			mode: q[i].mode, limit: q[i].limit, version: st.Version}
		d.holds.Put(req.Owner, h, req.TTL)
	}
	return nil
}

// Release implements driver.Driver: it deletes the owner's node (one round
// trip) and schedules the removal of the key's znode for when the linger
// period has passed (see WithParentLinger). Without a linger period it
// deletes the key's znode with the node if no other node is left (one
// multi-operation when the owner was alone at its last look; otherwise a
// delete of the node and then of the key's znode, which fails harmlessly if
// others remain). An owner the driver has no record of is looked up by its
// name.
func (d *Driver) Release(ctx context.Context, req driver.Request) error {
	if err := checkMode(req); err != nil {
		return err
	}
	if err := call(ctx, d, func() error { return d.release(req) }); err != nil {
		return fmt.Errorf("zkdlock: release %q: %w", req.Key, err)
	}
	return nil
}

func (d *Driver) release(req driver.Request) error {
	d.lost.Take(req.Owner)
	h, ok := d.holds.Take(req.Owner)
	if !ok {
		return d.releaseUnrecorded(req)
	}
	if h.session != d.conn.SessionID() {
		// The server deleted the node with its session.
		d.parents.released(h.parent)
		return notHeld("the session of its node ended")
	}
	existed, err := d.removeNode(h.parent, h.path, h.crowded)
	if err != nil {
		// Retry at once, before sessionEnded takes its time to tell a
		// lost connection from a closed client; the retry does nothing
		// if the session has ended.
		d.retry(h.parent, h.path, h.session)
		if d.sessionEnded(err, h.session) {
			d.parents.released(h.parent)
			return notHeld("the session of its node ended")
		}
		return err
	}
	if !existed {
		return notHeld("its node is gone")
	}
	return nil
}

// clientEndWait bounds the wait for the client's goroutines to end after a
// request failed because the connection closed, to tell a connection
// closed for good (the session ended with it) from a passing disconnection.
const clientEndWait = time.Second

// sessionEnded reports whether the request that failed with err shows the
// session sid over, and with it every node of that session: the server
// expired it, the client moved to another session, or the connection was
// closed for good (Close of the driver's Conn ends the session).
func (d *Driver) sessionEnded(err error, sid int64) bool {
	return errors.Is(err, zk.ErrSessionExpired) || d.conn.SessionID() != sid || d.clientEnded(err)
}

// clientEnded reports whether the request that failed with err did so
// because the connection was closed for good: the driver's session, and
// every node of it, ended with it, and no request can be made any more.
func (d *Driver) clientEnded(err error) bool {
	if !errors.Is(err, zk.ErrClosing) && !errors.Is(err, zk.ErrConnectionClosed) {
		return false
	}
	// The client closed for good ends its goroutines at once; a connection
	// lost in passing leaves them running.
	t := time.NewTimer(clientEndWait)
	defer t.Stop()
	select {
	case <-d.eventsDone:
		return true
	case <-t.C:
		return false
	}
}

func (d *Driver) releaseUnrecorded(req driver.Request) error {
	parent := d.parentPath(req.Key)
	children, _, err := d.look(parent, "")
	if err != nil && d.clientEnded(err) {
		return notHeld("the driver's connection is closed")
	}
	if err != nil {
		return err
	}
	if len(children) == 0 {
		d.parents.released(parent) // a leftover of an ended session, if it exists
		return notHeld("no node of this owner")
	}
	q := queue(children)
	id := dlock.OwnerID(req.Owner)
	removed := 0
	for _, n := range q {
		if n.ownerID != id {
			continue
		}
		p := parent + "/" + n.name
		existed, err := d.removeNode(parent, p, len(children) > 1)
		if err != nil {
			d.retry(parent, p, 0)
			return err
		}
		if existed {
			removed++
		}
	}
	if removed == 0 {
		return notHeld("no node of this owner")
	}
	return nil
}

// removeNode deletes the node p and hands the key's znode parent to
// d.parents, which removes it once the linger period has passed, if no
// other node is left then. Without a linger period the parent goes at once:
// when the owner was alone at its last look (crowded false), both go in one
// multi-operation, which fails as a whole if others have come; otherwise,
// and then, the node is deleted alone and the parent after it (a delete
// that fails harmlessly while others remain: the last node to go takes the
// parent with it). existed reports whether p was there.
func (d *Driver) removeNode(parent, p string, crowded bool) (existed bool, err error) {
	if !crowded && d.linger <= 0 {
		_, err := d.conn.Multi(&zk.DeleteRequest{Path: p, Version: -1}, &zk.DeleteRequest{Path: parent, Version: -1})
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, zk.ErrNoNode):
			d.parents.released(parent)
			return false, nil
		case !errors.Is(err, zk.ErrNotEmpty):
			return false, err
		}
	}
	err = d.conn.Delete(p, -1)
	switch {
	case err == nil:
		existed = true
	case !errors.Is(err, zk.ErrNoNode):
		return false, err
	}
	d.parents.released(parent)
	return existed, nil
}

// deleteParent deletes a key's znode if it is empty. Failures are left to
// the server, which deletes empty containers on its own. Deleting a parent
// under a contender is safe: ZooKeeper refuses to delete a znode that has
// children (ErrNotEmpty), and a contender that finds the parent gone when
// it creates its node creates the parent again.
func (d *Driver) deleteParent(parent string) {
	_ = d.conn.Delete(parent, -1)
}

// forget drops owner's record if it is still h, whose node is gone (why),
// and returns the error saying so.
func (d *Driver) forget(owner string, h hold, why string) error {
	if cur, ok := d.holds.Get(owner); ok && cur.path == h.path {
		d.holds.Take(owner)
	}
	return notHeld("%s", why)
}

// expire runs when the lease of a hold or queue entry ran out: it deletes
// the node.
func (d *Driver) expire(owner string, h hold) {
	if !h.held {
		d.lost.Put(owner, struct{}{}, gone)
	}
	ctx, cancel := context.WithTimeout(d.ctx, cleanupTimeout)
	defer cancel()
	err := call(ctx, d, func() error {
		if h.session != d.conn.SessionID() {
			d.parents.released(h.parent) // the node went with its session
			return nil
		}
		_, err := d.removeNode(h.parent, h.path, h.crowded)
		return err
	})
	if err != nil {
		d.retry(h.parent, h.path, h.session)
	}
}

// retry starts another attempt to delete the node p of session (0: of any
// session) at once: it waits for the connection's session (see call), so
// that a deletion cut off by a lost connection (a server that failed or
// hung) is made again as soon as the client has moved to another server,
// and the node does not hold up the key's next owner for longer.
func (d *Driver) retry(parent, p string, session int64) {
	d.trash.Put(p, garbage{parent: parent, path: p, session: session}, 0)
}

// retryDelete tries again to delete a node, until it is gone, its session
// has ended, or the driver closes, retryDelay after each failure.
func (d *Driver) retryDelete(p string, g garbage) {
	select {
	case <-d.eventsDone:
		return // the connection was closed for good, and the session with it
	default:
	}
	ctx, cancel := context.WithTimeout(d.ctx, cleanupTimeout)
	defer cancel()
	err := call(ctx, d, func() error {
		if g.session != 0 && g.session != d.conn.SessionID() {
			return nil // the node went with its session
		}
		_, err := d.removeNode(g.parent, g.path, true)
		return err
	})
	if err != nil {
		d.trash.Put(p, g, retryDelay) // ignored after Close
	}
}
