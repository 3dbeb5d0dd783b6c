package quorum_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// watchedNode is a Redis node (a TokenRaiser, like the nodes of a redlock://
// URL) that calls before ahead of every acquisition it is asked for.
type watchedNode struct {
	*redisNode
	before func(ctx context.Context) error
}

func (n *watchedNode) Acquire(ctx context.Context, r driver.Request) (driver.Result, error) {
	if err := n.before(ctx); err != nil {
		return driver.Result{}, err
	}
	return n.redisNode.Acquire(ctx, r)
}

// watchedNodes returns n Redis nodes that call before ahead of every
// acquisition.
func watchedNodes(t *testing.T, n int, before func(ctx context.Context) error) []driver.Driver {
	nodes, _ := proxiedNodes(t, n, 0)
	for i, nd := range nodes {
		nodes[i] = &watchedNode{redisNode: nd.(*redisNode), before: before}
	}
	return nodes
}

// A key that nobody else holds is asked of every node at once: one round
// trip. Asking the lead first would leave the rendezvous short of a node
// until the lead's node timeout, and every node would fail in turn.
func TestAcquireFreeKeyAsksEveryNodeAtOnce(t *testing.T) {
	const n = 3
	rv := newRendezvous(n)
	q := newQuorum(t, watchedNodes(t, n, func(ctx context.Context) error {
		defer rv.leave()
		return rv.enter(ctx)
	}))
	r := req(key(t))
	res, err := q.Acquire(ctx(t), r)
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v; want acquired with every node asked at once", res, err)
	}
	if m := rv.maxIn.Load(); m != n {
		t.Errorf("at most %d node acquisitions in flight at once; want %d", m, n)
	}
	if err := q.Release(ctx(t), r); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// A key that a node refused is contended: until the refused request's
// lease has passed, an acquisition asks the key's lead alone first (see The
// lead of a key), and the other nodes only if the lead granted it.
func TestAcquireContendedKeyAsksLeadFirst(t *testing.T) {
	const n = 3
	var calls atomic.Int32
	q := newQuorum(t, watchedNodes(t, n, func(context.Context) error {
		calls.Add(1)
		return nil
	}))
	k := key(t)
	holder, contender := req(k), req(k)
	attempt := func(r driver.Request, wantAcquired bool, wantCalls int32, what string) {
		t.Helper()
		calls.Store(0)
		res, err := q.Acquire(ctx(t), r)
		if err != nil || res.Acquired != wantAcquired {
			t.Fatalf("%s: Acquire = %+v, %v; want acquired %v", what, res, err, wantAcquired)
		}
		if got := calls.Load(); got != wantCalls {
			t.Errorf("%s: %d nodes asked; want %d", what, got, wantCalls)
		}
	}
	attempt(holder, true, n, "free key")
	attempt(contender, false, n, "first refusal (every node asked at once)")
	attempt(contender, false, 1, "contended key, held (the lead refuses alone)")
	if err := q.Release(ctx(t), holder); err != nil {
		t.Fatalf("Release: %v", err)
	}
	attempt(contender, true, n, "contended key, released (the lead, then the others)")
	if err := q.Release(ctx(t), contender); err != nil {
		t.Fatalf("Release: %v", err)
	}

	// The memory of a refusal lasts one lease of the refused request.
	attempt(holder, true, n, "taken again")
	short := req(k)
	short.TTL = 100 * time.Millisecond
	attempt(short, false, 1, "contended key, held")
	time.Sleep(short.TTL) // the lease of the refused request passes
	attempt(short, false, n, "a lease after the refusal (every node asked at once)")
	if err := q.Release(ctx(t), holder); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// A contender refused by a majority leaves a clean-up retrying its release
// on a node that is down, in the contender's turn there. Its next attempt
// asks the key's lead first; when the lead is that node, the attempt must
// count it as not answering within the node timeout and go on to the next
// node, not wait for the clean-up until the caller's context ends (a waiter
// re-attempting after a release notification would hang). Twenty keys: the
// down node leads about a third of them.
func TestContendedAcquireDoesNotWaitForCleanupOnDownLead(t *testing.T) {
	stores, live := memNodes(2)
	for _, s := range stores {
		t.Cleanup(func() { s.Close() })
	}
	q := newQuorum(t, []driver.Driver{live[0], live[1], down()})
	for range 20 {
		k := key(t)
		holder, contender := req(k), req(k)
		if res, err := q.Acquire(ctx(t), holder); err != nil || !res.Acquired {
			t.Fatalf("holder: Acquire = %+v, %v", res, err)
		}
		for attempt := range 2 {
			c, cancel := context.WithTimeout(ctx(t), 10*time.Second)
			res, err := q.Acquire(c, contender)
			cancel()
			if err != nil || res.Acquired {
				t.Fatalf("contender's attempt %d on a held key = %+v, %v; want refused, not an error", attempt+1, res, err)
			}
		}
		if err := q.Release(ctx(t), holder); err != nil {
			t.Fatalf("holder: Release: %v", err)
		}
	}
}
