package etcddlock

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// session is one lease of the driver, kept alive in the background by the
// client's lessor. Every entry the driver creates is attached to the current
// session; when the session ends, its entries are gone.
type session struct {
	ready   chan struct{} // closed when the grant has finished
	done    chan struct{} // closed when the session has ended (or failed to start)
	cancel  context.CancelFunc
	lost    atomic.Bool // the server no longer knows the lease
	stopped atomic.Bool // the keep-alive has stopped for good: no new entries join

	// Set before ready is closed.
	id    clientv3.LeaseID
	ttl   time.Duration // the TTL the server granted
	start time.Time     // when the grant was sent
	err   error         // why the session could not start

	proof atomic.Int64 // the send time of the latest renewal known to have succeeded, after start

	slotMu sync.Mutex
	slots  map[string][]uint64 // the slots in use, a bit set per dlock key (see Driver.claim)

	ctx    context.Context       // the keep-alive's, which the delay leases share
	delays map[int64]*delayLease // by lock delay in whole seconds; guarded by slotMu
}

// delayLease is a lease that the shadows of a session's entries with one
// lock delay are attached to (see shadowOf and Driver.delayLease).
type delayLease struct {
	ready chan struct{} // closed when the grant has finished
	id    clientv3.LeaseID
	err   error
}

// seconds returns d in whole seconds, rounded up, as etcd leases count.
func seconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// delayLease returns s's lease for the shadows of entries with lock delay
// delay, granting it on first use. Its TTL is 1.5 times the sum of the
// session's and the delay, and the client's lessor keeps it alive with the
// session, every third of its TTL: when the session's keep-alive stops, the
// shadows stay for at least the delay after the session lease has ended
// (whichever of the two leases was renewed last), on the store's clock. A
// session has one per distinct delay, so that each hold keeps its own delay,
// not the longest one asked.
func (d *Driver) delayLease(ctx context.Context, s *session, delay time.Duration) (clientv3.LeaseID, error) {
	secs := seconds(delay)
	s.slotMu.Lock()
	l := s.delays[secs]
	if l == nil {
		l = &delayLease{ready: make(chan struct{})}
		if s.delays == nil {
			s.delays = map[int64]*delayLease{}
		}
		s.delays[secs] = l
		d.wg.Add(1)
		go d.keepDelay(s, l, secs, (3*(int64(s.ttl/time.Second)+secs)+1)/2)
	}
	s.slotMu.Unlock()
	select {
	case <-l.ready:
		return l.id, l.err
	case <-ctx.Done():
		return 0, fmt.Errorf("starting the lease of a lock delay: %w", ctx.Err())
	}
}

// keepDelay grants l, a lease of ttl seconds for the lock delay secs, and
// keeps it alive until s's keep-alive stops. A grant that fails is
// forgotten, so that the next acquisition asks again.
func (d *Driver) keepDelay(s *session, l *delayLease, secs, ttl int64) {
	defer d.wg.Done()
	gctx, cancel := context.WithTimeout(s.ctx, backgroundTimeout)
	g, _, err := retry(gctx, func(ctx context.Context) (*clientv3.LeaseGrantResponse, error) { return d.cli.Grant(ctx, ttl) })
	cancel()
	var ch <-chan *clientv3.LeaseKeepAliveResponse
	if err == nil {
		ch, err = d.cli.KeepAlive(s.ctx, g.ID)
	}
	if err != nil {
		l.err = fmt.Errorf("starting the lease of a lock delay: %w", err)
		s.slotMu.Lock()
		delete(s.delays, secs)
		s.slotMu.Unlock()
		close(l.ready)
		return
	}
	l.id = g.ID
	d.mu.Lock()
	d.leases[g.ID] = s
	d.mu.Unlock()
	close(l.ready)
	for range ch {
	}
}

// ended reports whether the session is over: its keep-alive stopped (the
// lease expired, or went unanswered for its TTL) or a request found the
// lease gone.
func (s *session) ended() bool {
	if s.lost.Load() || s.stopped.Load() {
		return true
	}
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// kill ends a session whose lease the server no longer has.
func (s *session) kill() {
	s.lost.Store(true)
	s.cancel()
}

// session returns the current session, starting one if there is none or it
// has ended. Concurrent callers share one grant.
func (d *Driver) session(ctx context.Context) (*session, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, errClosed
	}
	s := d.sess
	if s == nil || s.ended() {
		s = &session{ready: make(chan struct{}), done: make(chan struct{})}
		s.ctx, s.cancel = context.WithCancel(d.ctx)
		d.sess = s
		d.wg.Add(1)
		go d.runSession(s.ctx, s)
	}
	d.mu.Unlock()
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("etcddlock: starting a session: %w", ctx.Err())
	}
	if s.err != nil {
		return nil, s.err
	}
	return s, nil
}

// runSession grants the session's lease, keeps it alive until ctx ends or the
// keep-alive stops, and then revokes it (unless the driver is closing: Close
// revokes every lease itself).
func (d *Driver) runSession(ctx context.Context, s *session) {
	defer d.wg.Done()
	defer close(s.done)
	defer s.cancel()
	gctx, cancel := context.WithTimeout(ctx, backgroundTimeout)
	s.start = time.Now()
	// A grant that times out may still be applied: its lease, with
	// nothing attached, expires on its own.
	g, _, err := retry(gctx, func(ctx context.Context) (*clientv3.LeaseGrantResponse, error) {
		return d.cli.Grant(ctx, d.sessionTTL)
	})
	cancel()
	if err != nil {
		s.err = fmt.Errorf("etcddlock: starting a session: %w", err)
		close(s.ready)
		return
	}
	s.id, s.ttl = g.ID, time.Duration(g.TTL)*time.Second
	d.mu.Lock()
	d.leases[g.ID] = s
	d.mu.Unlock()
	ch, err := d.cli.KeepAlive(ctx, g.ID)
	if err != nil {
		s.err = fmt.Errorf("etcddlock: keeping the session alive: %w", err)
		close(s.ready)
		d.revoke(s)
		return
	}
	close(s.ready)
	for {
		for range ch {
		}
		if ctx.Err() != nil || s.lost.Load() {
			break
		}
		// The keep-alive went unanswered for the lease's TTL (its
		// stream was on a member that died or hangs), or the server
		// said the lease is gone. A renewal proven since may still
		// hold the lease: ask once, and keep the session on a new
		// stream if it lives.
		if !d.stillAlive(ctx, s) {
			break
		}
		if ch, err = d.cli.KeepAlive(ctx, s.id); err != nil {
			break
		}
	}
	s.stopped.Store(true)
	// The driver reported holds on this session valid until the latest
	// proven renewal plus the TTL (session.left). Unless the server said
	// the lease is gone, it may still be alive, and revoking it now would
	// end those holds early, so it is revoked once that time has passed.
	if !s.lost.Load() {
		sleep(ctx, s.left(time.Now()))
	}
	if d.revoke(s) {
		d.settle(s)
	}
}

// stillAlive renews s's lease once, after its keep-alive stopped, and
// reports whether it lives. The renewal is retried, on whichever member
// answers, while an earlier proof still vouches for the lease; a reply that
// the lease is gone kills the session.
func (d *Driver) stillAlive(ctx context.Context, s *session) bool {
	delay := 50 * time.Millisecond
	for {
		left := s.left(time.Now())
		if left <= 0 {
			return false
		}
		_, err := d.keepAlive(ctx, s.id, s, left).wait()
		switch {
		case err == nil:
			return true
		case isLeaseNotFound(err):
			s.kill()
			return false
		case !sleep(ctx, delay):
			return false
		}
		delay = min(2*delay, maxRetryDelay)
	}
}

// revoke revokes an ended session's lease, so that entries it may still have
// on the server (if the keep-alive only went unanswered) go at once, and
// reports whether the lease is gone.
func (d *Driver) revoke(s *session) bool {
	if d.ctx.Err() != nil {
		return false // Close revokes
	}
	ctx, cancel := context.WithTimeout(d.ctx, backgroundTimeout)
	defer cancel()
	_, _, err := retry(ctx, func(ctx context.Context) (*clientv3.LeaseRevokeResponse, error) {
		return d.cli.Revoke(ctx, s.id)
	})
	if err == nil || isLeaseNotFound(err) {
		d.mu.Lock()
		delete(d.leases, s.id)
		d.mu.Unlock()
		return true
	}
	return false
}

// settle moves the shadows on the delay leases of s, whose lease is gone,
// each to a new lease of its delay, and revokes the delay leases: a shadow
// then keeps its key for the delay after the driver saw the session end,
// rather than until its delay lease, which lasts longer, expires. Shadows
// that it cannot move stay on their delay leases.
func (d *Driver) settle(s *session) {
	s.slotMu.Lock()
	delays := maps.Clone(s.delays)
	s.slotMu.Unlock()
	ctx, cancel := context.WithTimeout(d.ctx, backgroundTimeout)
	defer cancel()
	for secs, l := range delays {
		<-l.ready
		if l.err != nil {
			continue
		}
		ttl, err := d.cli.TimeToLive(ctx, l.id, clientv3.WithAttachedKeys())
		if err != nil {
			continue
		}
		g := &clientv3.LeaseGrantResponse{}
		if len(ttl.Keys) > 0 {
			g, err = d.cli.Grant(ctx, secs)
		}
		for _, k := range ttl.Keys {
			if err == nil {
				_, err = d.cli.Txn(ctx).If(clientv3.Compare(clientv3.LeaseValue(string(k)), "=", l.id)).
					Then(clientv3.OpPut(string(k), "", clientv3.WithIgnoreValue(), clientv3.WithLease(g.ID))).Commit()
			}
		}
		if err == nil {
			if _, err := d.cli.Revoke(ctx, l.id); err == nil || isLeaseNotFound(err) {
				d.mu.Lock()
				delete(d.leases, l.id)
				d.mu.Unlock()
			}
		}
	}
}

// sessionOf returns the driver's session whose lease (or delay lease) is id,
// or nil if id is not a lease of this driver.
func (d *Driver) sessionOf(id clientv3.LeaseID) *session {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.leases[id]
}

// proof is a KeepAliveOnce in flight.
type proof struct {
	done   chan struct{}
	cancel context.CancelFunc
	ttl    time.Duration
	err    error
}

// keepAlive sends a KeepAliveOnce of lease now, to run alongside a
// transaction. A successful reply proves that the lease existed when the
// request arrived and that the server then moved its expiry to at least its
// TTL from then, hence from the time the request was sent. If s is not nil
// (lease is s's), s records that time. The request is made in attempts
// (see retry), each of which counts from its own sending, and gives up
// after limit, when the proof would be of no use.
func (d *Driver) keepAlive(ctx context.Context, lease clientv3.LeaseID, s *session, limit time.Duration) *proof {
	ctx, cancel := context.WithTimeout(ctx, limit)
	p := &proof{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(p.done)
		var sent time.Time
		resp, _, err := retry(ctx, func(ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
			sent = time.Now()
			return d.cli.KeepAliveOnce(ctx, lease)
		})
		if err != nil {
			p.err = err
			return
		}
		p.ttl = time.Duration(resp.TTL) * time.Second
		if s != nil {
			s.proved(sent)
		}
	}()
	return p
}

// wait returns the lease's granted TTL, or why it could not be renewed. A nil
// proof (none was needed) returns nothing.
func (p *proof) wait() (time.Duration, error) {
	if p == nil {
		return 0, nil
	}
	<-p.done
	p.cancel()
	return p.ttl, p.err
}

// stop abandons the proof.
func (p *proof) stop() {
	if p == nil {
		return
	}
	p.cancel()
	<-p.done
}

// prove renews lease at once (a lease of another driver, whose TTL is not
// known beforehand) and returns its granted TTL.
func (d *Driver) prove(ctx context.Context, lease clientv3.LeaseID) (time.Duration, error) {
	return d.keepAlive(ctx, lease, nil, time.Duration(d.sessionTTL)*time.Second+backgroundTimeout).wait()
}

// proved records that a renewal of the session's lease sent at t succeeded:
// the lease then lasts until at least t plus its TTL, unless it is revoked.
func (s *session) proved(t time.Time) {
	at := int64(t.Sub(s.start))
	for {
		old := s.proof.Load()
		if at <= old || s.proof.CompareAndSwap(old, at) {
			return
		}
	}
}

// left returns how long after t the lease is known to last, by the latest
// renewal the driver saw succeed and the time it was sent (negative if that
// guarantee has run out). The keep-alive of the client's lessor renews the
// lease too, but its replies do not say when their requests were sent, so
// they are not counted.
func (s *session) left(t time.Time) time.Duration {
	return s.start.Add(time.Duration(s.proof.Load()) + s.ttl).Sub(t)
}

// needsProof reports whether an acquisition that starts at t and wants a
// lease of want (at most the session's TTL) must renew the session to report
// a useful one: when the latest proven renewal leaves less than two thirds of
// want. Otherwise the acquisition reports min(want, left) without a request
// of its own.
func (s *session) needsProof(t time.Time, want time.Duration) bool {
	return s.left(t) < want*2/3
}
