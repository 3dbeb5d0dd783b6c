package redisdlock_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/redisdlock"
)

// TestWaitWithoutReplica checks, on a Sentinel deployment of its own whose
// replica is gone, that a Lock asking for a replica's acknowledgement
// (wait_replicas=1) and waiting for a lock that becomes free ends with an
// error that names the missing acknowledgement, not one that passes for a
// lock still held.
func TestWaitWithoutReplica(t *testing.T) {
	ctx := context.Background()
	srv, err := testsrv.StartRedisSentinel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	prefix := testPrefix(t)
	open := func(params ...string) *dlock.Client {
		url := withParams(srv.URL, append([]string{"prefix", prefix}, params...)...)
		c, err := dlock.Open(ctx, url, dlock.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	holder, err := open().TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Members()[1].Kill(); err != nil { // master, replica, sentinel
		t.Fatal(err)
	}
	// The lock is free in 2s: the waiter first finds it held, then every
	// attempt takes it and gives it back for want of the replica.
	if err := holder.ReleaseAfter(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 6*time.Second)
	defer cancel()
	_, err = open("wait_replicas", "1", "wait_timeout", "100ms").Lock(wctx, "k")
	for _, target := range []error{redisdlock.ErrReplicaAck, dlock.ErrUnavailable, dlock.ErrNotAcquired, context.DeadlineExceeded} {
		if !errors.Is(err, target) {
			t.Errorf("Lock without the replica = %v; want an error wrapping %v", err, target)
		}
	}
}
