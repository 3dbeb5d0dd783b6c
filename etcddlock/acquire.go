package etcddlock

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// validity returns the lease to report for a hold acquired by a call that
// started at start: the request's TTL, but no more than the session's TTL and
// than the session lease is known to last from then.
func validity(req driver.Request, s *session, start time.Time) time.Duration {
	return min(req.TTL, s.ttl, s.left(start))
}

// renewal starts a KeepAliveOnce of s's lease for an acquisition that starts
// at t, to run alongside its transaction, unless an earlier renewal leaves
// enough of the lease (see session.needsProof); it returns nil then.
func (d *Driver) renewal(ctx context.Context, s *session, t time.Time, req driver.Request) *proof {
	if !s.needsProof(t, min(req.TTL, s.ttl)) {
		return nil
	}
	return d.keepAlive(ctx, s.id, s, s.ttl)
}

// Acquire implements driver.Driver. A new owner's entry is created in one
// transaction; an owner the driver already knows (a waiter asking again, a
// holder acquiring again or downgrading) is checked by its entry's
// CreateRevision. A KeepAliveOnce of the session lease runs alongside when
// the latest renewal does not cover the lease to report. See the package
// documentation.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Result, error) {
	if err := d.check(); err != nil {
		return driver.Result{}, err
	}
	switch {
	case !d.caps.Modes.Has(req.Mode):
		return driver.Result{}, fmt.Errorf("etcddlock: %v mode: %w", req.Mode, driver.ErrUnsupported)
	case req.Mode == driver.Semaphore && req.Limit < 1:
		return driver.Result{}, &dlock.ArgError{Name: "limit", Value: req.Limit, Reason: "must be at least 1"}
	}
	id := reqID(req)
	if rec, ok := d.table.Get(id); ok {
		if rec.lost {
			return driver.Result{}, notHeld(req.Key, "its entry was lost")
		}
		return d.reacquire(ctx, req, id, rec)
	}
	res, retry, err := d.create(ctx, req, id, true)
	if retry {
		// Nothing was created: the session had ended on the server
		// before this process noticed (start a new one), the name was
		// taken (take the next), or a TryLock found only the entries
		// of nested keys.
		res, _, err = d.create(ctx, req, id, false)
	}
	return res, err
}

// reacquire is Acquire for an owner whose entry the driver knows: a waiter
// asking again, a holder acquiring again, or an exclusive holder asking for
// a shared hold (a downgrade, which rewrites the entry's value: the Put keeps
// its CreateRevision, hence its token, and wakes the readers that wait for
// it).
func (d *Driver) reacquire(ctx context.Context, req driver.Request, id string, rec record) (driver.Result, error) {
	if rec.sess.ended() {
		d.lose(id, rec)
		return driver.Result{}, notHeld(req.Key, "the session of its entry ended")
	}
	then, downgrade, err := d.again(req, rec)
	if err != nil {
		return driver.Result{}, err
	}
	start := time.Now()
	p := d.renewal(ctx, rec.sess, start, req)
	resp, _, err := d.txn(ctx, rec.is(), then...)
	if err != nil {
		p.stop()
		return driver.Result{}, fmt.Errorf("etcddlock: acquire %q: %w", req.Key, err)
	}
	_, kerr := p.wait()
	if !resp.Succeeded {
		d.lose(id, rec)
		return driver.Result{}, notHeld(req.Key, "its entry is gone")
	}
	if downgrade {
		// The entry is shared now, whatever the renewal's outcome.
		d.mark(id, rec, func(r *record) { r.mode = driver.Shared })
	}
	if kerr != nil {
		if isLeaseNotFound(kerr) {
			rec.sess.kill()
			d.lose(id, rec)
			return driver.Result{}, notHeld(req.Key, "the session of its entry ended")
		}
		return driver.Result{}, fmt.Errorf("etcddlock: acquire %q: renewing the session: %w", req.Key, kerr)
	}
	held, wait := rec.held || rec.clear, rec.wait
	if r := resp.Responses; !held && !r[0].GetResponseTxn().GetSucceeded() {
		// The queue was read: the entry that blocked the owner had gone.
		if t := r[0].GetResponseTxn(); t != nil {
			r = t.Responses
		}
		kvs := d.queue(req.Key, r[0])
		held = admits(kvs, rec.rev)
		wait = rec.waiting(resp.Header.Revision, kvs, held)
	}
	if !rec.held {
		d.mark(id, rec, func(r *record) { r.held, r.wait = held, wait })
	}
	if !d.table.Touch(id, req.TTL) {
		return driver.Result{}, notHeld(req.Key, "its lease ran out")
	}
	if !held {
		return driver.Result{}, nil
	}
	return driver.Result{Acquired: true, Token: uint64(rec.rev), TTL: validity(req, rec.sess, start)}, nil
}

// again checks that req may ask rec's entry again, and returns what the
// transaction that does it runs: a downgrade rewrites the entry's value, a
// waiter reads the queue ahead of it, a holder needs nothing.
func (d *Driver) again(req driver.Request, rec record) (then []clientv3.Op, downgrade bool, _ error) {
	switch {
	case (rec.mode == driver.Semaphore) != (req.Mode == driver.Semaphore) || rec.mode == driver.Semaphore && rec.limit != req.Limit:
		return nil, false, fmt.Errorf("etcddlock: %q: the owner's entry is %s (limit %d), asked for %s (limit %d): %w",
			req.Key, rec.mode, rec.limit, req.Mode, req.Limit, driver.ErrModeMismatch)
	case rec.mode == driver.Shared && req.Mode == driver.Exclusive:
		return nil, false, fmt.Errorf("etcddlock: %q: an upgrade from shared to exclusive: %w", req.Key, driver.ErrModeMismatch)
	case rec.mode == driver.Exclusive && req.Mode == driver.Shared && !rec.held:
		return nil, false, fmt.Errorf("etcddlock: %q: the owner waits for an exclusive hold, asked for a shared one: %w", req.Key, driver.ErrModeMismatch)
	case rec.mode == driver.Exclusive && req.Mode == driver.Shared:
		// The shadow, which stands for the entry in the queue (see
		// merge), is downgraded too, if there is one.
		shadow := shadowOf(rec.name)
		return []clientv3.Op{
			clientv3.OpPut(rec.name, encodeValue(req.Owner, req.Info, driver.Shared, 0, req.TTL), clientv3.WithIgnoreLease()),
			clientv3.OpTxn(isEntry(shadow, rec.rev), []clientv3.Op{clientv3.OpPut(shadow, encodeValue(req.Owner, req.Info, driver.Shared, 0, req.TTL+rec.delay), clientv3.WithIgnoreLease())}, nil),
		}, true, nil
	case !rec.held && !rec.clear:
		read := d.aheadOp(req.Key, rec.rev, rec.mode == driver.Exclusive)
		if b := rec.wait; b != nil && b.name != "" {
			// While the entry that kept the owner out stays, the
			// queue need not be read.
			read = clientv3.OpTxn(b.stays(), nil, []clientv3.Op{read})
		}
		return []clientv3.Op{read}, false, nil
	}
	return nil, false, nil
}

// mark applies f to the record of id while it is still rec's entry.
func (d *Driver) mark(id string, rec record, f func(*record)) {
	d.table.Update(id, func(r record) record {
		if r.rev == rec.rev {
			f(&r)
		}
		return r
	})
}

// create is Acquire for an owner the driver does not know: one transaction
// that creates its entry, in a slot of the session it claims, if the slot's
// name is free and the queue has no permit the entry could not share the key
// with (modeGuard), and reads the queue (aheadOp), which decides whether the
// entry holds the key. A permit that the read shows to clash with a lock
// entry of this driver's format ahead of it goes again, as does an entry
// that is not admitted at once and whose request has no Queue (a TryLock
// never waits in line). A transaction that creates nothing reads the queue:
// it shows a mode mismatch, or a name in use.
//
// With fast, an exclusive request without Queue creates its entry only if
// nothing at all is under the queue prefix, as a plain mutex does, so that
// a TryLock of a held key writes nothing; the entries of a nested key fail
// it too, and the second attempt goes the general way.
//
// retry reports that nothing was created and another attempt may succeed:
// the session had ended unnoticed, the slot's name was taken, or only
// entries of nested keys kept a fast TryLock out.
func (d *Driver) create(ctx context.Context, req driver.Request, id string, fast bool) (_ driver.Result, retry bool, _ error) {
	s, err := d.session(ctx)
	if err != nil {
		return driver.Result{}, false, err
	}
	sl := d.claim(s, req.Key, req.Mode, req.Limit)
	// Never overwrite: a Put on an existing key keeps its CreateRevision,
	// which would hand out an old token.
	cond := append(d.modeGuard(req.Key, req.Mode, req.Limit), clientv3.Compare(clientv3.CreateRevision(sl.name), "=", 0))
	puts := []clientv3.Op{clientv3.OpPut(sl.name, encodeValue(req.Owner, req.Info, req.Mode, req.Limit, req.TTL), clientv3.WithLease(s.id))}
	if req.LockDelay > 0 {
		lease, err := d.delayLease(ctx, s, req.LockDelay)
		if err != nil {
			sl.free()
			return driver.Result{}, false, fmt.Errorf("etcddlock: acquire %q: %w", req.Key, err)
		}
		cond = append(cond, clientv3.Compare(clientv3.CreateRevision(shadowOf(sl.name)), "=", 0))
		puts = append(puts, clientv3.OpPut(shadowOf(sl.name), encodeValue(req.Owner, req.Info, req.Mode, req.Limit, req.TTL+req.LockDelay), clientv3.WithLease(lease)))
	}
	fast = fast && req.Mode == driver.Exclusive && !req.Queue
	if fast {
		cond = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(d.queuePrefix(req.Key)), "=", 0).WithPrefix()}
	}
	read := d.aheadOp(req.Key, 0, false)
	start := time.Now()
	p := d.renewal(ctx, s, start, req)
	// The transaction runs to its reply even if ctx ends first: a
	// creation cancelled on the wire may still be applied by the server,
	// after the Release that follows has looked for it. With the outcome
	// known, the entry is recorded and that Release removes it.
	tctx, cancel := d.detach(ctx)
	resp, err := d.cli.Txn(tctx).If(cond...).Then(append(puts, read)...).Else(read).Commit()
	cancel()
	if err != nil {
		p.stop()
		err = fmt.Errorf("etcddlock: acquire %q: %w", req.Key, withCtx(ctx, err))
		if isLeaseNotFound(err) {
			s.kill()
			sl.free()
			return driver.Result{}, true, err
		}
		// The entry may have been created (the request outlived
		// backgroundTimeout or Close): its slot stays in use for the
		// rest of the session, and the Release that follows an error
		// finds the entry by its owner.
		return driver.Result{}, false, err
	}
	kvs := d.queue(req.Key, resp.Responses[len(resp.Responses)-1])
	var rec record
	if resp.Succeeded {
		rec = record{name: sl.name, rev: resp.Header.Revision, sess: s, slot: sl, mode: req.Mode, limit: req.Limit, delay: req.LockDelay, held: admits(kvs, resp.Header.Revision)}
		rec.wait = rec.waiting(rec.rev, kvs, rec.held)
		d.table.Put(id, rec, req.TTL)
	}
	if _, kerr := p.wait(); kerr != nil {
		// A created entry stays recorded: the Release that follows an
		// error removes it.
		if isLeaseNotFound(kerr) {
			s.kill()
		}
		return driver.Result{}, false, fmt.Errorf("etcddlock: acquire %q: renewing the session: %w", req.Key, kerr)
	}
	switch {
	case !resp.Succeeded:
		return d.notCreated(ctx, req, sl, kvs, fast)
	case rec.held:
		return driver.Result{Acquired: true, Token: uint64(rec.rev), TTL: validity(req, s, start)}, false, nil
	}
	res, err := d.notAdmitted(ctx, req, id, rec, kvs)
	return res, false, err
}

// notCreated is create after a transaction that created nothing and read
// kvs, the queue: the key is in use in another mode, a fast TryLock found
// the key in use, or the slot's name was taken.
func (d *Driver) notCreated(ctx context.Context, req driver.Request, sl *slot, kvs []*mvccpb.KeyValue, fast bool) (_ driver.Result, retry bool, _ error) {
	if kv := clash(kvs, req.Mode, req.Limit); kv != nil {
		sl.free()
		return driver.Result{}, false, mismatch(req.Key, kv, req.Mode, req.Limit)
	}
	if !fast {
		// The name is taken by an entry this driver did not know of
		// (created by a request whose outcome it never learnt): its
		// slot stays in use for the rest of the session.
		return driver.Result{}, true, fmt.Errorf("etcddlock: acquire %q: entry name %q in use", req.Key, sl.name)
	}
	sl.free()
	kv := elsewhere(kvs, 0, req.Owner)
	switch {
	case len(kvs) == 0:
		return driver.Result{}, true, nil
	case kv == nil:
		return driver.Result{}, false, nil // held
	}
	res, err := d.heldElsewhere(ctx, req, kv)
	return res, false, err
}

// notAdmitted is create after the creation of rec's entry, which kvs, the
// queue, does not admit. A permit behind a lock entry, or a request without
// Queue, goes again; and an owner that holds the key through an entry this
// driver does not record needs no place in the queue.
func (d *Driver) notAdmitted(ctx context.Context, req driver.Request, id string, rec record, kvs []*mvccpb.KeyValue) (driver.Result, error) {
	clashing := clash(kvs, req.Mode, req.Limit)
	kv := elsewhere(kvs, rec.rev, req.Owner)
	if clashing == nil && kv == nil && req.Queue {
		return driver.Result{}, nil // queued
	}
	d.table.Take(id)
	if _, err := d.remove(ctx, id, rec); err != nil {
		return driver.Result{}, fmt.Errorf("etcddlock: acquire %q: %w", req.Key, err)
	}
	switch {
	case clashing != nil:
		return driver.Result{}, mismatch(req.Key, clashing, req.Mode, req.Limit)
	case kv == nil:
		return driver.Result{}, nil
	}
	return d.heldElsewhere(ctx, req, kv)
}

// heldElsewhere is Acquire for an owner whose entry kv holds the key but is
// not recorded by the driver. A shared request for an exclusive entry
// downgrades it; other requests of another mode are refused.
func (d *Driver) heldElsewhere(ctx context.Context, req driver.Request, kv *mvccpb.KeyValue) (driver.Result, error) {
	if ls := d.sessionOf(clientv3.LeaseID(kv.Lease)); ls != nil {
		if ls.ended() {
			return driver.Result{}, nil // it goes with its session
		}
		// An entry of this driver that it no longer records: its lease
		// ran out and it is being removed.
		return driver.Result{}, notHeld(req.Key, "its lease ran out")
	}
	// The owner's entry was made by another driver (another process
	// acquiring for the same owner).
	v := decode(kv)
	downgrade := v.mode() == driver.Exclusive && req.Mode == driver.Shared
	if v.mode() != req.Mode && !downgrade {
		return driver.Result{}, fmt.Errorf("etcddlock: %q: the owner holds it as %s, asked for %s: %w", req.Key, v.mode(), req.Mode, driver.ErrModeMismatch)
	}
	session, err := d.prove(ctx, clientv3.LeaseID(kv.Lease))
	if err != nil {
		if isLeaseNotFound(err) {
			return driver.Result{}, nil
		}
		return driver.Result{}, fmt.Errorf("etcddlock: acquire %q: renewing the session: %w", req.Key, err)
	}
	if downgrade {
		name := string(kv.Key)
		resp, _, err := d.txn(ctx, isEntry(name, kv.CreateRevision),
			clientv3.OpPut(name, encodeValue(v.Owner, v.Info, driver.Shared, 0, time.Duration(v.TTLms)*time.Millisecond), clientv3.WithIgnoreLease()))
		switch {
		case err != nil:
			return driver.Result{}, fmt.Errorf("etcddlock: downgrade %q: %w", req.Key, err)
		case !resp.Succeeded:
			return driver.Result{}, notHeld(req.Key, "its entry is gone")
		}
	}
	return driver.Result{Acquired: true, Token: uint64(kv.CreateRevision), TTL: min(req.TTL, session)}, nil
}
