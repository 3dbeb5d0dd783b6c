package etcddlock

import (
	"cmp"
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
// is therefore made in attempts: when an attempt has had no reply for
// hedgeDelay, another is sent alongside it (the client's balancer sends it
// to the next member), up to maxInFlight at a time; the first reply wins.
// An attempt ends after attemptTimeout, and one that the cluster answers
// with a leader election's error is followed by another after a pause.
const (
	// hedgeDelay is how long an attempt waits for its reply before
	// another is sent alongside: many round trips and disk writes of a
	// healthy cluster.
	hedgeDelay = 500 * time.Millisecond
	// maxInFlight bounds the attempts of one request in flight at a time:
	// one per member of a three-member cluster.
	maxInFlight = 3
	// attemptTimeout bounds one attempt: about the time etcd needs to
	// elect a new leader with its default election timeout of 1s, and
	// longer than any request of a healthy cluster.
	attemptTimeout = 2 * time.Second
	// minAttemptDelay and maxAttemptDelay bound the pause after an
	// attempt that failed when no other is in flight; it doubles from
	// one to the next.
	minAttemptDelay = 50 * time.Millisecond
	maxAttemptDelay = 500 * time.Millisecond
)

// retry makes attempts at op, a request that may be repeated, until one
// succeeds, one fails for a reason that a repetition would not change, or
// ctx ends (the error then wraps ctx's); the attempts still in flight are
// then cancelled. It reports whether more than one attempt was made: an
// attempt other than the one whose result it returns may have been
// applied.
func retry[T any](ctx context.Context, op func(context.Context) (T, error)) (_ T, unsure bool, _ error) {
	type result struct {
		v   T
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan result)
	sent, inFlight := 0, 0
	send := func() {
		sent++
		inFlight++
		go func() {
			actx, cancel := context.WithTimeout(ctx, attemptTimeout)
			defer cancel()
			v, err := op(actx)
			select {
			case results <- result{v, err}:
			case <-ctx.Done():
			}
		}()
	}
	send()
	timer := time.NewTimer(hedgeDelay)
	defer timer.Stop()
	delay := minAttemptDelay
	var last error
	for {
		select {
		case r := <-results:
			inFlight--
			if r.err == nil || !retriable(ctx, r.err) {
				return r.v, sent > 1, r.err
			}
			last = r.err
			if inFlight == 0 {
				timer.Reset(delay)
				delay = min(2*delay, maxAttemptDelay)
			}
		case <-timer.C:
			if inFlight < maxInFlight {
				send()
			}
			timer.Reset(hedgeDelay)
		case <-ctx.Done():
			var zero T
			return zero, sent > 1, withCtx(ctx, cmp.Or(last, ctx.Err()))
		}
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
