package quorum_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/quorum"
	"github.com/dlockhq/dlock/redisdlock"
)

// TestTokensOneRound checks the fencing tokens of a quorum of Redis
// servers, which Acquire takes from its one round of lock requests (every
// node is a quorum.TokenRaiser): they strictly increase from holder to
// holder when the loser of a split vote counted one more on a node, when
// the next holder's majority leaves out the node with the largest counter,
// and when a node restarted empty. Three servers of their own, since one
// of them is killed.
func TestTokensOneRound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := testsrv.StartRedisQuorum(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	nodes := make([]*redisdlock.Driver, 3)
	ds := make([]driver.Driver, 3)
	for i, a := range srv.Addrs {
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, ContextTimeoutEnabled: true})
		d, err := redisdlock.New(c)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = d
		ds[i] = &redisNode{Driver: d, client: c}
	}
	q, err := quorum.New(ds, quorum.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, ok := ds[0].(quorum.TokenRaiser); !ok {
		t.Fatal("a redisdlock node is not a quorum.TokenRaiser")
	}

	const k = "k"
	var last uint64
	holder := func(what string) {
		t.Helper()
		r := req(k)
		res, err := q.Acquire(ctx, r)
		if err != nil || !res.Acquired {
			t.Fatalf("%s: Acquire = %+v, %v", what, res, err)
		}
		if res.Token <= last {
			t.Errorf("%s: token %d after %d", what, res.Token, last)
		}
		last = res.Token
		if err := q.Release(ctx, r); err != nil {
			t.Fatalf("%s: Release: %v", what, err)
		}
	}
	// block holds k on node i for another owner, as the loser of a split
	// vote (or a node that answers no) does; the returned func lets go.
	block := func(i int) func() {
		t.Helper()
		r := req(k)
		if res, err := nodes[i].Acquire(ctx, r); err != nil || !res.Acquired {
			t.Fatalf("Acquire on node %d = %+v, %v", i, res, err)
		}
		return func() {
			if err := nodes[i].Release(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	// counter returns the token node i would hand out next, less one,
	// or 0 if it does not answer or holds k still (a release that the
	// quorum sends in the background, after a call that answered late).
	counter := func(i int) uint64 {
		t.Helper()
		r := req(k)
		res, err := nodes[i].Acquire(ctx, r)
		if err != nil || !res.Acquired {
			return 0
		}
		if err := nodes[i].Release(ctx, r); err != nil {
			t.Fatal(err)
		}
		return res.Token - 1
	}

	holder("first")
	holder("second")

	// A holder wins nodes 1 and 2 while a loser of a split vote holds
	// node 0.
	unblock := block(0)
	holder("beside the loser")
	unblock()
	// Another loser took node 0 only and let go: node 0 has counted one
	// acquisition more than the others. The next holder gets its largest
	// token from node 0 alone.
	block(0)()
	holder("after the loser")
	// The holder after it, on nodes 1 and 2 only, still gets a larger
	// one: the first raised their counters to its token.
	unblock = block(0)
	holder("without node 0")
	unblock()

	// Node 2 restarts without its data: its counter starts from zero.
	m := srv.Members()[2]
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	holder("with node 2 down")
	if err := m.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// Its counter is raised by the next holder whose majority it answers
	// in time (the client's pooled connections to the killed server fail
	// once each first), so that a majority with node 2 counts past the
	// token too.
	for i := 0; ; i++ {
		holder("after node 2 restarted")
		if counter(2) >= last {
			break
		}
		if i == 5 {
			// Unraised, it would take about as many holders as
			// there were before, since each counts one on it.
			t.Fatalf("node 2's counter is not raised to %d by 5 holders", last)
		}
	}
	unblock = block(1)
	holder("on nodes 0 and 2")
	unblock()
	unblock = block(0)
	holder("on nodes 1 and 2")
	unblock()
}
