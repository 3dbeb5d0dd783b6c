package quorum

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"hash/maphash"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/inflight"
)

// The lead of a key.
//
// Contenders that ask every node at once split the vote: with a bare
// majority of the nodes up, every node that grants the hold to one of them
// leaves it out of a majority, and they can go on rolling back and trying
// again for as long as the fault lasts. So an acquisition of a contended
// key first asks the key's lead alone, the first node in the key's order
// that answers, and only if the lead grants the hold asks the other nodes,
// at once. The lead grants the hold to one contender at a time; the others
// stop at its refusal and leave the other nodes free for that one. The
// key's order is the same for every client of the same nodes: the nodes
// ranked by a hash of the key and the node's address (rendezvous hashing),
// the nodes known to be stalled last, so that a hung lead is passed over
// at once. It costs an acquisition one round trip more than asking every
// node at once.
//
// A key that nobody else holds or wants does not need it: an acquisition
// asks every node at once unless a node refused the key to this Driver
// within the last lease (see contention). A contender thus asks every node
// at once at most once before it asks the lead first, and contenders that
// wait for a key, having been refused it, meet at its lead when it is
// released.

// contentionSlots is the number of slots of a contention table.
const contentionSlots = 256

// contention remembers which keys were refused lately: per slot of keys
// (by a hash of the key), until when (Unix nanoseconds) an acquisition of
// those keys asks the lead first. Keys that share a slot share the memory,
// which costs them a round trip, never safety.
type contention struct {
	seed  maphash.Seed
	until [contentionSlots]atomic.Int64
}

func newContention() *contention { return &contention{seed: maphash.MakeSeed()} }

func (c *contention) slot(key string) *atomic.Int64 {
	return &c.until[maphash.String(c.seed, key)%contentionSlots]
}

// refused records that a node refused key, held by another owner: its
// acquisitions ask the lead first for a lease of ttl from now.
func (c *contention) refused(key string, ttl time.Duration) {
	c.slot(key).Store(time.Now().Add(ttl).UnixNano())
}

// contended reports whether key was refused within the lease recorded.
func (c *contention) contended(key string) bool {
	return time.Now().UnixNano() < c.slot(key).Load()
}

// errNotAsked is the answer of a node that an acquisition did not ask: its
// outcome was decided without it.
var errNotAsked = errors.New("not asked: the outcome was decided without it")

// acquireRound asks the nodes for req's hold and returns their answers,
// indexed like d.nodes: every node at once, or, for a contended key, the
// key's lead first (see The lead of a key). A refusal by the lead stands
// for the nodes not asked; once the lead grants the hold, or so many nodes
// failed that no majority is left, the other nodes are asked at once.
func (d *Driver) acquireRound(ctx context.Context, req driver.Request) []answer {
	timeout := nodeTimeout(req.TTL)
	turns := make([]*inflight.Turn, len(d.nodes))
	ask := func(ctx context.Context, i int) answer {
		res, err := d.acquireOn(ctx, turns[i], i, req, timeout)
		switch {
		case err != nil:
			return answer{vote: failed, err: err}
		case res.Acquired:
			return answer{vote: yes, res: res}
		default:
			return answer{vote: no, res: res}
		}
	}
	answers := make([]answer, len(d.nodes))
	asked := make([]bool, len(d.nodes))
	failedN := 0
	var leads []int
	if d.contention.contended(req.Key) {
		leads = d.order(req.Key)
	}
	for _, i := range leads {
		turns[i] = d.register(req, i, inflight.Acquire)
		a := d.one(ctx, i, ask)
		answers[i], asked[i] = a, true
		if a.vote == failed {
			failedN++
		}
		if a.vote == no || ctx.Err() != nil {
			// Refused, or out of time.
			for j, ok := range asked {
				switch {
				case ok:
				case a.vote == no:
					answers[j] = a
				default:
					answers[j] = answer{vote: failed, err: errNotAsked}
				}
			}
			return answers
		}
		if a.vote == yes || failedN > len(d.nodes)-d.quorum {
			// Granted, or no majority left: the others answer at
			// once, so that the outcome says whether a majority
			// failed for good (see Permanent).
			break
		}
	}
	for i := range d.nodes {
		if !asked[i] {
			turns[i] = d.register(req, i, inflight.Acquire)
		}
	}
	return d.fanout(ctx, acquireGrace, false, d.acquired, func(ctx context.Context, i int) answer {
		if asked[i] {
			return answers[i]
		}
		return ask(ctx, i)
	})
}

// one calls call(ctx, i) on a worker and returns its answer, or a failure
// with ctx's cause once ctx ends (the call then ends in the background).
func (d *Driver) one(ctx context.Context, i int, call func(ctx context.Context, i int) answer) answer {
	reply := make(chan answer, 1) // the call never blocks
	d.pool.Go(func() {
		a := call(ctx, i)
		d.note(ctx, i, a.err)
		reply <- a
	})
	select {
	case a := <-reply:
		return a
	case <-ctx.Done():
		return answer{vote: failed, err: fmt.Errorf("%w", context.Cause(ctx))}
	}
}

// order returns the indexes of the nodes in key's order: the nodes not
// known to be stalled, then those that are, each ranked by a hash of key
// and the node's address (its index, for a node that is not a
// fmt.Stringer).
func (d *Driver) order(key string) []int {
	type node struct {
		i       int
		stalled bool
		rank    uint64
	}
	nodes := make([]node, len(d.nodes))
	for i, n := range d.nodes {
		h := fnv.New64a()
		h.Write([]byte(key))
		if s, ok := n.(fmt.Stringer); ok {
			fmt.Fprintf(h, "\x00%s", s)
		} else {
			fmt.Fprintf(h, "\x00%d", i)
		}
		nodes[i] = node{i, d.stalled[i].Load(), h.Sum64()}
	}
	slices.SortFunc(nodes, func(a, b node) int {
		if a.stalled != b.stalled {
			if a.stalled {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.rank, b.rank)
	})
	order := make([]int, len(nodes))
	for k, n := range nodes {
		order[k] = n.i
	}
	return order
}
