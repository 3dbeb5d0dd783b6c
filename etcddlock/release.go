package etcddlock

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock/driver"
)

// Refresh implements driver.Driver: it checks that the owner's entry is the
// same incarnation and still holds the key, proves the session alive with a
// KeepAliveOnce sent alongside, and moves the entry's local deadline to
// req.TTL from now, with req.LockDelay as the delay its end keeps (zero for
// Lock.ReleaseAfter's, which ends it without delay).
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
	resp, _, err := d.txn(ctx, rec.is())
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
	if rec.delay != req.LockDelay {
		d.mark(id, rec, func(r *record) { r.delay = req.LockDelay })
	}
	if !d.table.Touch(id, req.TTL) {
		return notHeld(req.Key, "its lease ran out")
	}
	return nil
}

// refreshUnknown is Refresh of an owner whose entry the driver does not
// record: it succeeds only for a hold made by another driver.
func (d *Driver) refreshUnknown(ctx context.Context, req driver.Request) error {
	resp, err := d.get(ctx, d.queuePrefix(req.Key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return fmt.Errorf("etcddlock: refresh %q: %w", req.Key, err)
	}
	var kv *mvccpb.KeyValue
	for _, h := range holding(merge(d.own(req.Key, resp.Kvs))) {
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

// remove deletes the entry of rec, which the caller took from the table, and
// its shadow, if it is still that incarnation, and reports whether it was.
// If the request fails, the record goes back to the table with its deadline
// passed, so that expire deletes the entry, retrying.
func (d *Driver) remove(ctx context.Context, id string, rec record) (deleted bool, _ error) {
	resp, _, err := d.txn(ctx, rec.is(), rec.end(0)...)
	if err != nil {
		rec.released = true
		d.table.Put(id, rec, 0)
		return false, err
	}
	rec.slot.free()
	// An earlier attempt whose outcome is unknown may have deleted it:
	// the entry is then reported gone, which errs on the safe side (the
	// holder hears that its lock may have ended before the release).
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
	resp, err := d.get(ctx, d.queuePrefix(req.Key), clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("etcddlock: release %q: %w", req.Key, err)
	}
	var deleted, mine bool
	for _, kv := range d.own(req.Key, resp.Kvs) {
		if ownerOf(kv) != req.Owner {
			continue
		}
		name := string(kv.Key)
		r, _, err := d.txn(ctx, isEntry(name, kv.CreateRevision), clientv3.OpDelete(name))
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

// end returns the operations that end rec's entry: its deletion, and its
// shadow's, or, given lease, the move of the shadow to lease, whose TTL is
// the lock delay.
func (rec record) end(lease clientv3.LeaseID) []clientv3.Op {
	shadow := shadowOf(rec.name)
	if lease == 0 {
		return []clientv3.Op{clientv3.OpDelete(rec.name), clientv3.OpDelete(shadow)}
	}
	return []clientv3.Op{clientv3.OpDelete(rec.name), clientv3.OpTxn(isEntry(shadow, rec.rev),
		[]clientv3.Op{clientv3.OpPut(shadow, "", clientv3.WithIgnoreValue(), clientv3.WithLease(lease))}, nil)}
}

// expire runs when an entry's local deadline passed: the owner stopped
// refreshing (or re-asking, for a queue entry). It deletes the entry, if it is
// still the same incarnation, retrying until that succeeds, the session ends
// (which removes the entry) or the driver is closed. An entry with a lock
// delay leaves its shadow on a lease of its own, of the delay, which keeps
// the key (see shadowOf); the entry's slot stays in use for the delay (a
// creation that finds the shadow's name still taken takes the next slot).
func (d *Driver) expire(id string, rec record) {
	if rec.lost {
		return // a tombstone's time is up
	}
	if !rec.released {
		d.bury(id, rec)
	}
	delay := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(d.ctx, attemptTimeout)
		g, err := &clientv3.LeaseGrantResponse{}, error(nil)
		if rec.delay > 0 && !rec.released { // a Release ends the entry without delay
			g, err = d.cli.Grant(ctx, seconds(rec.delay))
		}
		if err == nil {
			_, err = d.cli.Txn(ctx).If(rec.is()...).Then(rec.end(g.ID)...).Commit()
		}
		cancel()
		if err == nil {
			if g.ID == 0 {
				rec.slot.free()
			} else {
				time.AfterFunc(time.Duration(seconds(rec.delay))*time.Second, rec.slot.free)
			}
			return
		}
		if rec.sess.ended() || !sleep(d.ctx, delay) {
			return
		}
		delay = min(2*delay, maxRetryDelay)
	}
}
