package redisdlock

import (
	"context"
	"errors"
	"fmt"
	"math"
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

// rerun runs step, a WATCH transaction, again when its EXEC found a watched
// key changed (errConflict), up to conflictRuns times in all, and returns
// the last run's error. Refresh and Release must say whether the owner
// held the lock, and a conflict says nothing about that: nothing was
// written, and the next run reads the changed keys afresh. (Racing
// releases of one hold are the usual case: the loser's second run finds
// the hold gone and reports ErrNotOwner.) This is one atomic step done
// optimistically, not a retry of a failed request.
func rerun(step func() error) error {
	var err error
	for range conflictRuns {
		if err = step(); !errors.Is(err, errConflict) {
			return err
		}
	}
	return err
}

// conflictRuns bounds rerun. Each conflict is another client's EXEC that
// succeeded, so concurrent refreshes of one hold by up to conflictRuns
// clients all succeed; only a key changed again and again between a
// transaction's reads and its EXEC exhausts it.
const conflictRuns = 32

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
		case isMark(owner):
			// The general form of Script mode: the owner may hold the
			// lock there since a Script waiter queued behind it.
			held, err := p.heldGeneral(ctx, tx, k, req.Owner, ttl)
			if err != nil || held == 0 {
				res = driver.Result{RetryAfter: max(pttl.Val(), 0).Truncate(time.Millisecond)}
				return lostRace(err)
			}
			res = driver.Result{Acquired: true, Token: held}
		default:
			// Held in the simple form by another owner. This waiter
			// listens on the lock's channel, which a Script release of
			// the simple form publishes on only when the hash has the
			// field l (see scripts/release.lua): set it, under the WATCH,
			// so that it marks the hold just read and nothing else (EXEC
			// fails if the hash changed or expired meanwhile).
			res = driver.Result{RetryAfter: max(pttl.Val(), 0).Truncate(time.Millisecond)}
			return lostRace(commit(ctx, tx, func(pipe redis.Pipeliner) { pipe.HSet(ctx, k.lock, fieldListen, "1") }))
		}
		return p.d.awaitReplicas(ctx, tx)
	}, k.lock, k.fence)
	return res, err
}

// Script mode keeps a lock in the general form (see scripts/common.lua)
// while waiters queue, so a hold that Transaction mode took may be found
// there: its owner is then a member of the holders zset. Refresh and
// Release handle that case too, WATCHing the hash, the holders and the
// queue leases.

// generalHold is what Refresh and Release read of a lock in the general
// form: the owner's lease, the server's clock and the longest other leases.
type generalHold struct {
	mine  float64 // the owner's lease end (ms); 0 if it holds nothing
	now   float64 // the server's clock (ms)
	other float64 // the longest lease of another holder or a waiter (ms)
	head  string  // the first waiter in the queue, if any
}

// readGeneral reads the general form of k for owner, under tx's WATCH.
func readGeneral(ctx context.Context, tx *redis.Tx, k layout, owner string) (generalHold, error) {
	var (
		mine  *redis.FloatCmd
		clock *redis.TimeCmd
		top   *redis.ZSliceCmd
		qtop  *redis.ZSliceCmd
		head  *redis.StringSliceCmd
	)
	_, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
		mine = p.ZScore(ctx, k.holders, owner)
		clock = p.Time(ctx)
		top = p.ZRevRangeWithScores(ctx, k.holders, 0, 1)
		qtop = p.ZRevRangeWithScores(ctx, k.qexp, 0, 0)
		head = p.ZRange(ctx, k.queue, 0, 0)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return generalHold{}, err
	}
	now, err := clock.Result()
	if err != nil {
		return generalHold{}, err
	}
	g := generalHold{mine: mine.Val(), now: float64(now.UnixMilli())}
	for _, z := range top.Val() {
		if z.Member != owner {
			g.other = max(g.other, z.Score)
		}
	}
	for _, z := range qtop.Val() {
		g.other = max(g.other, z.Score)
	}
	if h := head.Val(); len(h) > 0 {
		g.head = h[0]
	}
	return g, nil
}

// expireGeneral queues the PEXPIREATs of the general form's keys for a
// longest lease ending at ms, or their deletion if it has passed.
func expireGeneral(ctx context.Context, pipe redis.Pipeliner, k layout, at, now float64) {
	if at <= now {
		pipe.Del(ctx, k.lock, k.holders, k.queue)
		return
	}
	t := time.UnixMilli(int64(at))
	for _, key := range []string{k.lock, k.holders, k.queue} {
		pipe.PExpireAt(ctx, key, t)
	}
}

// heldGeneral extends owner's exclusive hold of a lock in the general form,
// if it has one, and returns its token (0 if it has none).
func (p txProto) heldGeneral(ctx context.Context, tx *redis.Tx, k layout, owner string, ttl time.Duration) (uint64, error) {
	if err := tx.Watch(ctx, k.holders, k.qexp).Err(); err != nil {
		return 0, err
	}
	f, err := tx.HMGet(ctx, k.lock, fieldOwner, "m:"+owner, "t:"+owner).Result()
	if err != nil {
		return 0, err
	}
	if m, _ := f[0].(string); !isMark(m) || f[1] != "x" {
		return 0, nil
	}
	tokStr, _ := f[2].(string)
	token, err := strconv.ParseUint(tokStr, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("lock %q has a bad token %q for its holder", k.lock, tokStr)
	}
	g, err := readGeneral(ctx, tx, k, owner)
	if err != nil || g.mine <= g.now {
		return 0, err
	}
	end := g.now + float64(ttl.Milliseconds())
	err = commit(ctx, tx, func(pipe redis.Pipeliner) {
		pipe.ZAdd(ctx, k.holders, redis.Z{Score: end, Member: owner})
		expireGeneral(ctx, pipe, k, max(end, g.other), g.now)
	})
	if err != nil {
		return 0, err
	}
	return token, nil
}

func isMark(owner string) bool { return owner == markRW || owner == markSem }

// heldBy reads the key's owner field inside a WATCH: owner itself, or a
// mark of readers or permits, among which owner may hold. Anything else
// (no lock, another owner's) is ErrNotOwner.
func heldBy(ctx context.Context, tx *redis.Tx, k layout, owner string) (string, error) {
	got, err := tx.HGet(ctx, k.lock, fieldOwner).Result()
	if errors.Is(err, redis.Nil) || err == nil && got != owner && !isMark(got) {
		return "", driver.ErrNotOwner
	}
	return got, err
}

func (p txProto) refresh(ctx context.Context, k layout, req driver.Request, ttl time.Duration) error {
	return rerun(func() error {
		return p.d.client.Watch(ctx, func(tx *redis.Tx) error {
			owner, err := heldBy(ctx, tx, k, req.Owner)
			if err != nil {
				return err
			}
			if owner == req.Owner {
				return commit(ctx, tx, func(pipe redis.Pipeliner) { pipe.PExpire(ctx, k.lock, ttl) })
			}
			g, err := readGeneral(ctx, tx, k, req.Owner)
			if err != nil {
				return err
			}
			if g.mine <= g.now {
				return driver.ErrNotOwner
			}
			end := g.now + float64(ttl.Milliseconds())
			return commit(ctx, tx, func(pipe redis.Pipeliner) {
				pipe.ZAdd(ctx, k.holders, redis.Z{Score: end, Member: req.Owner})
				expireGeneral(ctx, pipe, k, max(end, g.other), g.now)
			})
		}, k.lock, k.holders, k.qexp)
	})
}

// readHold reads the lock's hash, its lease and owner's in the holders
// zset, and the server's clock, in one MULTI/EXEC on the key's master.
func (p txProto) readHold(ctx context.Context, k layout, key, owner string) (driver.Holder, error) {
	node, err := p.d.master(ctx, k.lock)
	if err != nil {
		return driver.Holder{}, err
	}
	var (
		all   *redis.MapStringStringCmd
		pttl  *redis.DurationCmd
		ends  *redis.FloatCmd
		clock *redis.TimeCmd
	)
	_, err = node.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		all = pipe.HGetAll(ctx, k.lock)
		pttl = pipe.PTTL(ctx, k.lock)
		ends = pipe.ZScore(ctx, k.holders, owner)
		clock = pipe.Time(ctx)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return driver.Holder{}, err
	}
	var members []scored
	if ends.Err() == nil {
		members = []scored{{owner, ends.Val()}}
	}
	for _, h := range holdersOf(key, all.Val(), pttl.Val(), members, clock.Val()) {
		if h.Owner == owner {
			return h, nil
		}
	}
	return driver.Holder{}, driver.ErrNotOwner
}

func (p txProto) release(ctx context.Context, k layout, req driver.Request) error {
	return rerun(func() error {
		return p.d.client.Watch(ctx, func(tx *redis.Tx) error {
			owner, err := heldBy(ctx, tx, k, req.Owner)
			if err != nil {
				return err
			}
			if owner == req.Owner {
				return commit(ctx, tx, func(pipe redis.Pipeliner) {
					pipe.Del(ctx, k.lock)
					pipe.Publish(ctx, k.channel, "")
				})
			}
			g, err := readGeneral(ctx, tx, k, req.Owner)
			if err != nil {
				return err
			}
			if g.mine == 0 {
				return driver.ErrNotOwner
			}
			// The head of the queue listens on a channel of its own
			// if Script mode queued it (see wake in
			// scripts/common.lua). (Readers behind it, let in by
			// this release too, find out by polling.)
			own := ""
			if g.head != "" {
				if ok, err := tx.HExists(ctx, k.lock, "c:"+g.head).Result(); err != nil {
					return err
				} else if ok {
					own = waiterChannel(k.channel, g.head)
				}
			}
			o := req.Owner
			if err := commit(ctx, tx, func(pipe redis.Pipeliner) {
				pipe.ZRem(ctx, k.holders, o)
				pipe.HDel(ctx, k.lock, "t:"+o, "i:"+o, "m:"+o)
				expireGeneral(ctx, pipe, k, g.other, g.now)
				pipe.Publish(ctx, k.channel, "")
				if own != "" {
					pipe.Publish(ctx, own, "")
				}
			}); err != nil {
				return err
			}
			if g.mine <= g.now {
				return driver.ErrNotOwner // its lease had run out; the remains are gone now
			}
			return nil
		}, k.lock, k.holders, k.qexp)
	})
}

func (p txProto) forceRelease(ctx context.Context, k layout) (int, error) {
	// MULTI/EXEC on the key's master, so that the DEL and PUBLISH go to
	// the same server; nothing needs watching.
	node, err := p.d.master(ctx, k.lock)
	if err != nil {
		return 0, err
	}
	now, err := node.Time(ctx).Result()
	if err != nil {
		return 0, err
	}
	// The waiters that Script mode queued listen on channels of their own
	// (see wake in scripts/common.lua); one that queues after this read
	// finds out by polling.
	own, err := ownChannels(ctx, node, k)
	if err != nil {
		return 0, err
	}
	var (
		owner *redis.StringCmd
		live  *redis.IntCmd
	)
	_, err = node.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		owner = pipe.HGet(ctx, k.lock, fieldOwner)
		live = pipe.ZCount(ctx, k.holders, "("+strconv.FormatInt(now.UnixMilli(), 10), "+inf")
		pipe.Del(ctx, k.lock, k.holders, k.queue, k.qexp)
		pipe.Publish(ctx, k.channel, "")
		for _, ch := range own {
			pipe.Publish(ctx, ch, "")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	switch o := owner.Val(); {
	case o == "":
		return 0, nil
	case isMark(o):
		return int(live.Val()), nil
	}
	return 1, nil
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

// ownChannels returns the channels of the waiters queued for k that listen
// on channels of their own.
func ownChannels(ctx context.Context, node *redis.Client, k layout) ([]string, error) {
	queued, err := node.ZRange(ctx, k.queue, 0, -1).Result()
	if err != nil || len(queued) == 0 {
		if isWrongType(err) {
			return nil, nil // not a lock: the DEL says no more
		}
		return nil, err
	}
	fields := make([]string, len(queued))
	for i, o := range queued {
		fields[i] = "c:" + o
	}
	marks, err := node.HMGet(ctx, k.lock, fields...).Result()
	if err != nil {
		if isWrongType(err) {
			return nil, nil
		}
		return nil, err
	}
	var chans []string
	for i, m := range marks {
		if m != nil {
			chans = append(chans, waiterChannel(k.channel, queued[i]))
		}
	}
	return chans, nil
}

// RaiseToken makes the fencing counter of key at least token, and leaves a
// larger one alone, so that the next hold of key on this server gets a
// larger token. It changes nothing else. A quorum lock (package quorum,
// whose TokenRaiser interface it implements) raises with it the counters of
// the servers that lag behind a holder's token. In Script mode it runs a
// script; in the other protocols, which run no scripts, WATCH/MULTI/EXEC on
// the counter alone.
func (d *Driver) RaiseToken(ctx context.Context, key string, token uint64) error {
	if err := d.check(ctx, nil); err != nil {
		return fail(ctx, "raise token", key, err)
	}
	if token > math.MaxInt64 {
		return fail(ctx, "raise token", key, fmt.Errorf("token %d is out of range (Redis counts to %d)", token, int64(math.MaxInt64)))
	}
	f := d.layout(key).fence
	var err error
	if d.cfg.mode == Script {
		_, err = d.ev.eval(ctx, raiseScript, []string{f}, []string{strconv.FormatUint(token, 10)}, false)
	} else {
		err = rerun(func() error {
			return d.client.Watch(ctx, func(tx *redis.Tx) error {
				cur, err := tx.Get(ctx, f).Uint64()
				if err != nil && !errors.Is(err, redis.Nil) {
					return fmt.Errorf("fencing counter %q: %w", f, err)
				}
				if cur >= token {
					return nil
				}
				return commit(ctx, tx, func(pipe redis.Pipeliner) { pipe.Set(ctx, f, token, 0) })
			}, f)
		})
	}
	if err != nil {
		return fail(ctx, "raise token", key, err)
	}
	return nil
}
