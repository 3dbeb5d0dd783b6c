package redisdlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/driver"
)

// txProto is Transaction mode: the same keys as Script mode, changed with
// WATCH/MULTI/EXEC. Each step WATCHes the keys it reads, reads them, and
// writes in MULTI/EXEC only if what it read allows; EXEC fails if another
// client changed a watched key in between, and then nothing was written.
type txProto struct{ d *Driver }

// errConflict reports an EXEC that failed because a watched key changed.
// Nothing was written; the caller (package dlock) decides whether to retry.
var errConflict = errors.New("transaction aborted: the lock changed concurrently (nothing was written)")

// commit runs the commands queue adds in one MULTI/EXEC on tx. It returns
// errConflict if a watched key changed, in which case nothing was written.
func commit(ctx context.Context, tx *redis.Tx, queue func(pipe redis.Pipeliner)) error {
	_, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		queue(pipe)
		return nil
	})
	if errors.Is(err, redis.TxFailedErr) {
		return errConflict
	}
	return err
}

// lostRace turns errConflict into "not acquired": an acquire that lost a race
// for a free lock simply did not get it.
func lostRace(err error) error {
	if errors.Is(err, errConflict) {
		return nil
	}
	return err
}

func (p txProto) acquire(ctx context.Context, k layout, req driver.Request, ttl time.Duration) (driver.Result, error) {
	var res driver.Result
	err := p.d.client.Watch(ctx, func(tx *redis.Tx) error {
		var (
			hm    *redis.SliceCmd
			pttl  *redis.DurationCmd
			fence *redis.StringCmd
		)
		_, err := tx.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			hm = pipe.HMGet(ctx, k.lock, fieldOwner, fieldToken)
			pttl = pipe.PTTL(ctx, k.lock)
			fence = pipe.Get(ctx, k.fence)
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		vals, err := hm.Result()
		if err != nil {
			return err
		}
		if len(vals) != 2 {
			return fmt.Errorf("HMGET %q returned %v", k.lock, vals)
		}
		owner, _ := vals[0].(string)
		switch {
		case owner == "":
			token, err := takeFenced(ctx, tx, k, fence, func(pipe redis.Pipeliner, token int64) {
				pipe.HSet(ctx, k.lock, fieldOwner, req.Owner, fieldToken, token, fieldInfo, req.Info)
				pipe.PExpire(ctx, k.lock, ttl)
			})
			if err != nil || token == 0 {
				return err // token 0: another client got there first
			}
			res = driver.Result{Acquired: true, Token: token}
		case owner == req.Owner:
			tokStr, _ := vals[1].(string)
			token, err := strconv.ParseUint(tokStr, 10, 64)
			if err != nil {
				return fmt.Errorf("lock %q has a bad token %q", k.lock, tokStr)
			}
			if err := commit(ctx, tx, func(pipe redis.Pipeliner) { pipe.PExpire(ctx, k.lock, ttl) }); err != nil {
				return lostRace(err)
			}
			res = driver.Result{Acquired: true, Token: token}
		default:
			res = driver.Result{RetryAfter: max(pttl.Val(), 0).Truncate(time.Millisecond)}
			return nil
		}
		return p.d.awaitReplicas(ctx, tx)
	}, k.lock, k.fence)
	return res, err
}

func (p txProto) refresh(ctx context.Context, k layout, req driver.Request, ttl time.Duration) error {
	return p.d.client.Watch(ctx, func(tx *redis.Tx) error {
		owner, err := tx.HGet(ctx, k.lock, fieldOwner).Result()
		if errors.Is(err, redis.Nil) || err == nil && owner != req.Owner {
			return driver.ErrNotHeld
		}
		if err != nil {
			return err
		}
		return commit(ctx, tx, func(pipe redis.Pipeliner) { pipe.PExpire(ctx, k.lock, ttl) })
	}, k.lock)
}

func (p txProto) release(ctx context.Context, k layout, req driver.Request) error {
	return p.d.client.Watch(ctx, func(tx *redis.Tx) error {
		owner, err := tx.HGet(ctx, k.lock, fieldOwner).Result()
		if errors.Is(err, redis.Nil) || err == nil && owner != req.Owner {
			return driver.ErrNotHeld
		}
		if err != nil {
			return err
		}
		return commit(ctx, tx, func(pipe redis.Pipeliner) {
			pipe.Del(ctx, k.lock)
			pipe.Publish(ctx, k.channel, "")
		})
	}, k.lock)
}

func (p txProto) forceRelease(ctx context.Context, k layout) (int, error) {
	// MULTI/EXEC on the key's master, so that DEL and PUBLISH go to the
	// same server; nothing needs watching.
	node, err := p.d.master(ctx, k.lock)
	if err != nil {
		return 0, err
	}
	var del *redis.IntCmd
	_, err = node.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		del = pipe.Del(ctx, k.lock)
		pipe.Publish(ctx, k.channel, "")
		return nil
	})
	if err != nil {
		return 0, err
	}
	return int(del.Val()), nil
}

func (p txProto) list(ctx context.Context, node *redis.Client, prefix string) ([]driver.Holder, error) {
	return listHashes(ctx, p.d, node, prefix)
}

func (p txProto) count(ctx context.Context, node *redis.Client, prefix string) (int, error) {
	return countHashes(ctx, p.d, node, prefix)
}

// takeFenced takes a free lock inside a WATCH transaction: it runs write and
// increments the fencing counter (whose value before, read under the same
// WATCH, is in fence) in one MULTI/EXEC, and returns the new token. It
// returns token 0 and no error when EXEC found a watched key changed: another
// client got there first and nothing was written.
func takeFenced(ctx context.Context, tx *redis.Tx, k layout, fence *redis.StringCmd, write func(pipe redis.Pipeliner, token int64)) (uint64, error) {
	last, err := fence.Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("fencing counter %q: %w", k.fence, err)
	}
	token := last + 1
	var incr *redis.IntCmd
	if err := commit(ctx, tx, func(pipe redis.Pipeliner) {
		write(pipe, token)
		incr = pipe.Incr(ctx, k.fence)
	}); err != nil {
		return 0, lostRace(err)
	}
	if incr.Val() != token {
		return 0, fmt.Errorf("fencing counter %q moved from %d to %d inside a transaction", k.fence, last, incr.Val())
	}
	return uint64(token), nil
}
