package etcddlock

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Attempts. The client spreads requests over the cluster's members; one
// sent to a member that hangs (stopped, or cut off without the connection
// breaking) gets no answer, and one that a member forwarded to a leader
// that has just failed is lost: the member answers only when its own
// request timeout (about 7s) passes. A request whose repetition is harmless
// is therefore sent in attempts of attemptTimeout each, and sent again
// (to the next member) after an attempt that timed out or that the
// cluster answered with a leader election's error.
const (
	// attemptTimeout bounds one attempt: several times a round trip and a
	// disk write on a loaded cluster, and about the time etcd needs to
	// elect a new leader with its default election timeout of 1s.
	attemptTimeout = 2 * time.Second
	// minAttemptDelay and maxAttemptDelay bound the pause between
	// attempts, which doubles from one to the next.
	minAttemptDelay = 50 * time.Millisecond
	maxAttemptDelay = 500 * time.Millisecond
)

// retry makes attempts at op, a request that may be repeated, until one
// succeeds, fails for a reason that a repetition would not change, or ctx
// ends (the error then wraps ctx's). Each attempt is bounded by
// attemptTimeout. It reports whether an attempt before the last one failed
// in a way that leaves its outcome unknown: it may have been applied.
func retry[T any](ctx context.Context, op func(context.Context) (T, error)) (_ T, unsure bool, _ error) {
	delay := minAttemptDelay
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		v, err := op(actx)
		cancel()
		if err == nil || !retriable(ctx, err) {
			return v, unsure, err
		}
		unsure = true
		if !sleep(ctx, delay) {
			return v, unsure, withCtx(ctx, err)
		}
		delay = min(2*delay, maxAttemptDelay)
	}
}

// retriable reports whether err, the error of an attempt made within ctx,
// calls for another attempt: the attempt timed out while ctx is live, or the
// cluster could not serve it for want of a leader (etcd reports a
// leader change, a lost leader, a proposal that timed out, and a member it
// cannot reach as codes.Unavailable).
func retriable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable
	}
	return status.Code(err) == codes.Unavailable
}

// txn runs a transaction that may be repeated (it compares before it
// writes, and a second application changes nothing the first did not), in
// attempts (see retry).
func (d *Driver) txn(ctx context.Context, cond []clientv3.Cmp, then ...clientv3.Op) (*clientv3.TxnResponse, bool, error) {
	return retry(ctx, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return d.cli.Txn(ctx).If(cond...).Then(then...).Commit()
	})
}

// get reads key in attempts (see retry).
func (d *Driver) get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, _, err := retry(ctx, func(ctx context.Context) (*clientv3.GetResponse, error) {
		return d.cli.Get(ctx, key, opts...)
	})
	return resp, err
}
