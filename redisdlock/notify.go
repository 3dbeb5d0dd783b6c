package redisdlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/notify"
)

// Release notification.
//
// A change that may let a waiter in (a release, a forced release, a queue
// entry given up, a writer turned reader, expired holds or entries removed)
// PUBLISHes an empty message inside the script or transaction that makes
// it, so a message is sent when, and only when, the lock's state changed.
//
// In Script mode every waiter queues (FIFO), and a queued waiter listens on
// a channel of its own, the lock's channel plus ":" and its owner ID; the
// queue entry carries the hash field c:OWNER to say so. The script that
// makes the change signals only the waiters it may let in (wake in
// scripts/common.lua): the head of the queue; when the head is a reader and
// no writer holds the lock, every reader before the first queued writer;
// for a semaphore, as many waiters from the head as permits are free. A
// release thus costs one message and one attempt by the next in line,
// however many wait, instead of waking every waiter to run the acquire
// script and find that it is not its turn. Admission sends no message:
// whoever else the lock can let in was signalled with the waiter admitted.
// When the head is a writer and the release leaves no holder, the release
// hands it the lock before signalling it (grant in scripts/release.lua),
// and the message says so: the head holds the lock on receipt, without
// another round trip (see grants.go), and nobody can take the key in
// between. Until its first renewal (or an acquire) extends the hold, the
// head holds for the rest of its queue entry's lease, at most three seconds.
// A waiter at the head that died keeps its place until its queue entry
// expires, or the lock handed to it until those seconds have passed; the
// waiters behind it then learn of it from their own polls (dlock polls
// queued waiters at least every third of the lease, and no later than the
// end of the hold ahead of them), or at once from the next script that
// removes the expired entry or hold, which signals the new head.
//
// Waiters that do not queue (Transaction mode, and Script mode requests
// without Queue, as a quorum lock's) listen on the lock's channel, which
// carries the releases of the simple form (where nobody is queued) and the
// changes after which the queue is empty. Every release of the simple form
// publishes there, so that observers that never try the lock
// (leader.Observe) see each release after their Subscribe. Transaction mode signals the lock's
// channel and the head of the queue; readers behind that head find out by
// polling.
//
// Drivers of older versions of this package listen on the lock's channel
// only, and queue without c:OWNER: a script of this version that signals
// such a waiter does so on the lock's channel (which wakes every such
// waiter, as before). A waiter of a version that does not set l, waiting
// without queueing for a lock in the simple form, learns of its release by
// polling. Their scripts, in turn, signal on the lock's channel only, so in a mixed fleet a waiter of this version queued behind a
// holder of an older one learns of the release by polling. Older scripts
// leave c:OWNER and i:OWNER fields of the entries they remove behind; they go with the
// lock's hash once nobody holds or waits. PUBSUB NUMSUB cannot tell
// whether anyone listens on the lock's channel: in a Cluster it counts the
// subscribers of one node only.
//
// A Driver keeps one pub/sub connection (a go-redis PubSub: see goredisPS),
// opened by the first Subscribe, and SUBSCRIBEs to a channel while at least one waiter of
// this Driver waits on it: a process hears only about the locks it waits
// for, not about every release in the keyspace. Subscriptions are counted
// per channel and the last one to close UNSUBSCRIBEs at once. The waiters
// of one channel are woken through an internal/notify Hub.
//
// Subscribe returns only after the server confirmed the SUBSCRIBE, so every
// release after it is signalled. If the connection breaks, go-redis
// reconnects and subscribes to every channel again; when the server
// confirms a channel a second time, its waiters are signalled, since a
// release may have gone unheard meanwhile. A connection that stays silent
// for healthInterval is pinged, and one that does not answer the ping
// within another healthInterval is replaced by a new one (its
// confirmations signal the waiters likewise). Until then waiters poll.
//
// One narrow race remains: if the connection is re-established while the
// last waiter of a channel leaves and a new one arrives at once, the new
// waiter can take go-redis's re-sent SUBSCRIBE's confirmation for its own,
// and a release between the UNSUBSCRIBE and its own SUBSCRIBE goes
// unheard; the waiter then notices the release by polling.
//
// In a Cluster the messages are plain PUBLISH, which the cluster bus
// forwards to every node, so the one connection (to any node) hears them
// all. Sharded pub/sub (SPUBLISH) would keep each message on its shard but
// needs a connection per shard and resubscription on resharding.

// subscribeTimeout bounds the wait for the server to confirm a SUBSCRIBE
// when the caller's context has no earlier deadline: a waiter that cannot
// subscribe falls back to polling rather than hang.
const subscribeTimeout = 10 * time.Second

type notifier struct {
	dial func(n *notifier) *goredisPS // opens a pub/sub connection reporting to n
	hub  notify.Hub

	mu     sync.Mutex
	ps     *goredisPS // nil until the first Subscribe
	chans  map[string]*chanState
	closed bool
	redial time.Duration // the pause before the next reconnection; see pause
	done   chan struct{} // closed by close
	wg     sync.WaitGroup
}

// chanState tracks one subscribed channel.
type chanState struct {
	refs      int           // open subscriptions
	confirmed bool          // the server has confirmed the SUBSCRIBE
	ready     chan struct{} // closed when confirmed
	grant     string        // the latest message that handed a hold over, until read (see grant)
}

func newNotifier(dial func(n *notifier) *goredisPS) *notifier {
	return &notifier{dial: dial, chans: map[string]*chanState{}, done: make(chan struct{})}
}

// Health of the pub/sub connection.
const (
	reconnectMin = 50 * time.Millisecond // backoff while the server cannot be reached
	reconnectMax = 2 * time.Second
)

// healthInterval is how long the pub/sub connection may stay silent before
// it is pinged, and then before it is given up. (A variable for tests.)
var healthInterval = 5 * time.Second

// current reports whether c is the notifier's connection, which the
// notifier has not closed.
func (n *notifier) current(c *goredisPS) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return !n.closed && n.ps == c
}

// pause waits before the next attempt to reach the server, longer after
// each failure until a SUBSCRIBE is confirmed, and reports false if the
// notifier closes first.
func (n *notifier) pause() bool {
	n.mu.Lock()
	n.redial = min(max(n.redial*2, reconnectMin), reconnectMax)
	d := n.redial/2 + rand.N(n.redial/2+1)
	n.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-n.done:
		return false
	case <-t.C:
		return true
	}
}

// goredisPS is a notifier's pub/sub connection, over go-redis's PubSub. It
// reports to its notifier from a goroutine of its own, counted in the
// notifier's wg: messages (hub.Notify), confirmed SUBSCRIBEs (confirm), and
// a connection it cannot keep (replace). A failed subscribe leaves the
// channel to be subscribed again when the connection is re-established.
type goredisPS struct {
	n  *notifier
	ps *redis.PubSub
}

// dialGoredis returns a notifier's dial function over client.
func dialGoredis(client redis.UniversalClient) func(*notifier) *goredisPS {
	return func(n *notifier) *goredisPS {
		c := &goredisPS{n: n, ps: client.Subscribe(context.Background())}
		n.wg.Add(1)
		go c.receive()
		return c
	}
}

func (c *goredisPS) subscribe(ctx context.Context, chans ...string) error {
	// On failure go-redis keeps the channels and subscribes when it
	// reconnects.
	return c.ps.Subscribe(ctx, chans...)
}

func (c *goredisPS) unsubscribe(chans ...string) {
	_ = c.ps.Unsubscribe(context.Background(), chans...)
}

func (c *goredisPS) close() error { return c.ps.Close() }

// receive reads the pub/sub connection until the notifier is closed or
// replaces it. It signals waiters itself, without a hop through another
// goroutine. A broken connection is reconnected by go-redis on the next
// read (which subscribes again to every channel); a connection that stays
// silent after a ping is replaced.
func (c *goredisPS) receive() {
	n := c.n
	defer n.wg.Done()
	ctx := context.Background()
	pinged := false
	for {
		msg, err := c.ps.ReceiveTimeout(ctx, healthInterval)
		if !n.current(c) {
			return
		}
		if err != nil {
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout() && !pinged:
				pinged = true
				_ = c.ps.Ping(ctx) // a failed write makes go-redis reconnect
			case errors.As(err, &ne) && ne.Timeout():
				// No answer to the ping: the connection died without
				// saying so.
				n.replace(c)
				return
			default:
				// go-redis reconnects on the next read; wait a little
				// when that fails too.
				pinged = false
				if !n.pause() {
					return
				}
			}
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Message:
			n.notify(m.Channel, m.Payload)
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				n.confirm(m.Channel)
			}
		}
	}
}

// notify signals the waiters of ch of a message with payload, which, if not
// empty, hands the lock to the waiter of ch (see grant).
func (n *notifier) notify(ch, payload string) {
	if payload != "" {
		n.mu.Lock()
		if st := n.chans[ch]; st != nil {
			st.grant = payload
		}
		n.mu.Unlock()
	}
	n.hub.Notify(ch)
}

// replace swaps old, the pub/sub connection, for a new one subscribed to
// every channel; the confirmations signal the waiters (see confirm).
func (n *notifier) replace(old *goredisPS) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.ps != old {
		return
	}
	n.ps = n.dial(n)
	chans := make([]string, 0, len(n.chans))
	for ch := range n.chans {
		chans = append(chans, ch)
	}
	if len(chans) > 0 {
		_ = n.ps.subscribe(context.Background(), chans...)
	}
	_ = old.close()
}

// confirm handles the server's confirmation of a SUBSCRIBE.
func (n *notifier) confirm(ch string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.chans[ch]
	if st == nil {
		// Not wanted (any more): left behind by replace, or by a
		// reconnect that re-sent a SUBSCRIBE just before our
		// UNSUBSCRIBE.
		if !n.closed {
			n.ps.unsubscribe(ch)
		}
		return
	}
	n.redial = 0
	if st.confirmed {
		// Subscribed again after a reconnect: a release may have been
		// missed while the connection was down.
		n.hub.Notify(ch)
	} else {
		st.confirmed = true
		close(st.ready)
	}
	if st.refs == 0 {
		// Every waiter gave up before the confirmation came.
		n.unsubscribe(ch)
	}
}

// unsubscribe drops ch. n.mu is held.
func (n *notifier) unsubscribe(ch string) {
	delete(n.chans, ch)
	if !n.closed {
		n.ps.unsubscribe(ch)
	}
}

// subscribe returns a subscription to ch once the server has confirmed it.
func (n *notifier) subscribe(ctx context.Context, ch string) (*subscription, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, errClosed
	}
	if n.ps == nil {
		n.ps = n.dial(n)
	}
	st := n.chans[ch]
	fresh := st == nil
	if fresh {
		st = &chanState{ready: make(chan struct{})}
		n.chans[ch] = st
	}
	st.refs++
	s := &subscription{n: n, ch: ch, st: st, sub: n.hub.Subscribe(ch)}
	var err error
	if fresh {
		// Under n.mu, so that SUBSCRIBE and UNSUBSCRIBE commands reach
		// the server in the order of the changes to n.chans.
		err = n.ps.subscribe(ctx, ch)
	}
	n.mu.Unlock()
	if err != nil {
		// go-redis keeps the channel and subscribes again once it has
		// reconnected; the confirmation then finds no waiter.
		s.Close()
		return nil, err
	}
	t := time.NewTimer(subscribeTimeout)
	defer t.Stop()
	select {
	case <-st.ready:
		return s, nil
	case <-ctx.Done():
		s.Close()
		return nil, ctx.Err()
	case <-n.done:
		s.Close()
		return nil, errClosed
	case <-t.C:
		s.Close()
		return nil, errSubscribeTimeout
	}
}

var errSubscribeTimeout = errors.New("the server did not confirm SUBSCRIBE within " + subscribeTimeout.String())

// release drops one subscription to ch.
func (n *notifier) release(ch string, st *chanState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	st.refs--
	if st.refs == 0 && st.confirmed {
		n.unsubscribe(ch)
	}
	// An unconfirmed channel stays until its confirmation arrives (see
	// confirm), so that a later SUBSCRIBE of the same channel cannot be
	// mistaken for confirmed by the earlier one's reply.
}

// close closes the pub/sub connection and waits for the receiver to stop.
func (n *notifier) close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	close(n.done)
	ps := n.ps
	n.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.close()
	n.wg.Wait()
	return err
}

// subscription implements driver.Subscription, and driver.Granter.
type subscription struct {
	n    *notifier
	ch   string
	st   *chanState
	sub  *notify.Sub
	once sync.Once
	// grant makes a hold of a message that handed the lock to the
	// subscription's owner (nil: no message does).
	grant func(payload string) (driver.Result, bool)
}

// Granted implements driver.Granter.
func (s *subscription) Granted() (driver.Result, bool) {
	if s.grant == nil {
		return driver.Result{}, false
	}
	s.n.mu.Lock()
	p := s.st.grant
	s.st.grant = ""
	s.n.mu.Unlock()
	if p == "" {
		return driver.Result{}, false
	}
	return s.grant(p)
}

// C implements driver.Subscription.
func (s *subscription) C() <-chan struct{} { return s.sub.C() }

// Close implements driver.Subscription.
func (s *subscription) Close() error {
	s.once.Do(func() {
		s.sub.Close()
		s.n.release(s.ch, s.st)
	})
	return nil
}
