package etcddlock

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlockhq/dlock/internal/testsrv"
)

// TestHungEndpointIsPassedBy checks that a driver whose client balances
// requests over two endpoints, one of which hangs (a blackholing proxy in
// front of the server), acquires, refreshes and releases without waiting
// for the hung one: each request is sent again to the other endpoint.
func TestHungEndpointIsPassedBy(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	p, err := testsrv.StartProxy(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Addr(), srv.Addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := newDriver(cli, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	defer p.Unblock() // so that Close can revoke the session through either
	// Connect to both endpoints, then hang one.
	for range 4 {
		if _, err := cli.Get(ctx(t), "x"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.session(ctx(t)); err != nil {
		t.Fatal(err)
	}
	p.Block()
	// A request that waited for the hung endpoint would take an
	// attempt's timeout, or backgroundTimeout, or the context's.
	const bound = attemptTimeout
	c, cancel := context.WithTimeout(ctx(t), 20*time.Second)
	defer cancel()
	timed := func(what string, f func() error) {
		t.Helper()
		start := time.Now()
		err := f()
		if took := time.Since(start); took >= bound {
			t.Errorf("%s took %v with one endpoint hung; want less than %v", what, took, bound)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	for i := range 3 {
		r := req(key(t))
		r.Queue = i%2 == 0
		timed("Acquire", func() error {
			res, err := d.Acquire(c, r)
			if err == nil && !res.Acquired {
				t.Fatalf("Acquire %d = %+v", i, res)
			}
			return err
		})
		timed("Refresh", func() error { return d.Refresh(c, r) })
		timed("Release", func() error { return d.Release(c, r) })
	}
}

// TestStragglerEntryIsDeleted checks that an entry created by an attempt
// of a creating transaction whose reply came after the decision is deleted
// again, unless it is the entry the decision recorded.
func TestStragglerEntryIsDeleted(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Etcd)
	cli := admin(t)
	d := newTestDriver(t, srv.Addr)
	defer d.Close()
	s, err := d.session(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	name := d.entryName(key(t), s.id, 0)
	put, err := cli.Put(ctx(t), name, "late", clientv3.WithLease(s.id))
	if err != nil {
		t.Fatal(err)
	}
	rev := put.Header.Revision
	wctx, cancel := context.WithTimeout(ctx(t), 10*time.Second)
	defer cancel()
	wch := cli.Watch(wctx, name, clientv3.WithRev(rev+1))
	replies := make(chan txnReply, 1)
	replies <- txnReply{resp: &clientv3.TxnResponse{Succeeded: true, Header: &pb.ResponseHeader{Revision: rev}}}
	d.straggle(name, s, 0, 1, replies)
	for resp := range wch {
		for _, ev := range resp.Events {
			if ev.Type == mvccpb.DELETE {
				return
			}
		}
	}
	t.Fatal("the straggler's entry is still there after 10s")
}
