package redisdlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/driver"
)

// legacyProto is Legacy mode: the SETNX/GET/GETSET expiry-timestamp
// protocol. The lock key holds the time the lock expires, as a decimal Unix
// timestamp in the configured unit; a lock whose timestamp is in the past
// (on the reader's clock) is free. The driver's own steps are atomic
// (WATCH/MULTI/EXEC over the lock key and its side keys), and it records
// which dlock owner wrote which timestamp in a side hash, so that refresh and
// release change the lock key only while it still holds the timestamp this
// owner wrote.
type legacyProto struct{ d *Driver }

// Fields of the legacy side hash.
const (
	fieldValue = "value" // the timestamp the owner wrote into the lock key
)

// now returns the client's clock in legacy units.
func (p legacyProto) now() int64 {
	if p.d.cfg.unit == time.Second {
		return time.Now().Unix()
	}
	return time.Now().UnixMilli()
}

// restamp queues the commands that give the current holder the new timestamp
// v and a lease of ttl.
func (p legacyProto) restamp(ctx context.Context, pipe redis.Pipeliner, k layout, v string, ttl time.Duration) {
	pipe.Set(ctx, k.lock, v, ttl)
	pipe.HSet(ctx, k.holder, fieldValue, v)
	pipe.PExpire(ctx, k.holder, ttl)
}

// stamp returns the timestamp to write for a lease of ttl taken at now: the
// expiry time plus one unit, as the protocol's writers do
// (SETNX key <now + timeout + 1>).
func (p legacyProto) stamp(now int64, ttl time.Duration) string {
	return strconv.FormatInt(now+int64(ttl/p.d.cfg.unit)+1, 10)
}

// left returns how long the lock with expiry exp has to run, by the
// client's clock.
func (p legacyProto) left(exp, now int64) time.Duration {
	if exp < now {
		return 0
	}
	return time.Duration(exp-now) * p.d.cfg.unit
}

func parseStamp(k layout, v string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("lock key %q holds %q, not a Unix timestamp", k.lock, v)
	}
	return n, nil
}

// legacyState is what a step reads before it writes.
type legacyState struct {
	value   string // the lock key's value; "" if absent
	present bool
	owner   string // the side hash: the dlock owner that wrote holderV
	holderV string
	token   string
}

// read reads the lock key and the side hash inside a WATCH; more commands
// can be queued by extra.
func (p legacyProto) read(ctx context.Context, tx *redis.Tx, k layout, extra func(redis.Pipeliner)) (legacyState, error) {
	var (
		get *redis.StringCmd
		hm  *redis.SliceCmd
	)
	_, err := tx.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		get = pipe.Get(ctx, k.lock)
		hm = pipe.HMGet(ctx, k.holder, fieldOwner, fieldValue, fieldToken)
		if extra != nil {
			extra(pipe)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return legacyState{}, err
	}
	var s legacyState
	s.value, err = get.Result()
	switch {
	case err == nil:
		s.present = true
	case !errors.Is(err, redis.Nil):
		return s, err
	}
	vals, err := hm.Result()
	if err != nil {
		return s, err
	}
	if len(vals) != 3 {
		return s, fmt.Errorf("HMGET %q returned %v", k.holder, vals)
	}
	s.owner, _ = vals[0].(string)
	s.holderV, _ = vals[1].(string)
	s.token, _ = vals[2].(string)
	return s, nil
}

// ours reports whether the state shows a hold by owner: the lock key still
// holds the timestamp owner wrote.
func (s legacyState) ours(owner string) bool {
	return s.present && s.owner == owner && s.holderV == s.value
}

func (p legacyProto) acquire(ctx context.Context, k layout, req driver.Request, ttl time.Duration) (driver.Result, error) {
	var res driver.Result
	err := p.d.client.Watch(ctx, func(tx *redis.Tx) error {
		var (
			pttl  *redis.DurationCmd
			fence *redis.StringCmd
		)
		s, err := p.read(ctx, tx, k, func(pipe redis.Pipeliner) {
			pttl = pipe.PTTL(ctx, k.lock)
			fence = pipe.Get(ctx, k.fence)
		})
		if err != nil {
			return err
		}
		now := p.now()
		if s.present {
			exp, err := parseStamp(k, s.value)
			if err != nil {
				return err
			}
			if exp >= now { // live
				if !s.ours(req.Owner) {
					wait := p.left(exp, now)
					if d := pttl.Val(); d > 0 && d < wait {
						wait = d // the server will drop the key sooner
					}
					res = driver.Result{RetryAfter: min(wait, ttl)}
					return nil
				}
				token, err := strconv.ParseUint(s.token, 10, 64)
				if err != nil {
					return fmt.Errorf("side key %q has a bad token %q", k.holder, s.token)
				}
				v := p.stamp(now, ttl)
				if err := commit(ctx, tx, func(pipe redis.Pipeliner) { p.restamp(ctx, pipe, k, v, ttl) }); err != nil {
					return lostRace(err)
				}
				res = driver.Result{Acquired: true, Token: token}
				return p.d.awaitReplicas(ctx, tx)
			}
		}
		// Free, or the timestamp has passed: take the lock.
		v := p.stamp(now, ttl)
		token, err := takeFenced(ctx, tx, k, fence, func(pipe redis.Pipeliner, token int64) {
			pipe.Set(ctx, k.lock, v, ttl)
			pipe.Del(ctx, k.holder)
			pipe.HSet(ctx, k.holder, fieldOwner, req.Owner, fieldValue, v, fieldToken, token, fieldInfo, req.Info)
			pipe.PExpire(ctx, k.holder, ttl)
		})
		if err != nil || token == 0 {
			return err // token 0: another client got there first
		}
		res = driver.Result{Acquired: true, Token: token}
		return p.d.awaitReplicas(ctx, tx)
	}, k.lock, k.holder, k.fence)
	return res, err
}

func (p legacyProto) refresh(ctx context.Context, k layout, req driver.Request, ttl time.Duration) error {
	return rerun(func() error {
		return p.d.client.Watch(ctx, func(tx *redis.Tx) error {
			s, err := p.read(ctx, tx, k, nil)
			if err != nil {
				return err
			}
			if !s.ours(req.Owner) {
				return driver.ErrNotOwner
			}
			now := p.now()
			if exp, err := parseStamp(k, s.value); err != nil || exp < now {
				return driver.ErrNotOwner // the lease has run out
			}
			v := p.stamp(now, ttl)
			return commit(ctx, tx, func(pipe redis.Pipeliner) { p.restamp(ctx, pipe, k, v, ttl) })
		}, k.lock, k.holder)
	})
}

func (p legacyProto) release(ctx context.Context, k layout, req driver.Request) error {
	return rerun(func() error {
		return p.d.client.Watch(ctx, func(tx *redis.Tx) error {
			s, err := p.read(ctx, tx, k, nil)
			if err != nil {
				return err
			}
			if s.owner != req.Owner {
				return driver.ErrNotOwner
			}
			if !s.ours(req.Owner) {
				// The timestamp is no longer ours (it expired and another
				// client took the lock, or the key is gone): remove only our
				// side record.
				if err := commit(ctx, tx, func(pipe redis.Pipeliner) { pipe.Del(ctx, k.holder) }); err != nil {
					return err
				}
				return driver.ErrNotOwner
			}
			exp, perr := parseStamp(k, s.value)
			if err := commit(ctx, tx, func(pipe redis.Pipeliner) {
				pipe.Del(ctx, k.lock, k.holder)
				pipe.Publish(ctx, k.channel, "")
			}); err != nil {
				return err
			}
			if perr != nil || exp < p.now() {
				return driver.ErrNotOwner // its lease had run out; the remains are gone now
			}
			return nil
		}, k.lock, k.holder)
	})
}

func (p legacyProto) forceRelease(ctx context.Context, k layout) (int, error) {
	node, err := p.d.master(ctx, k.lock)
	if err != nil {
		return 0, err
	}
	var get *redis.StringCmd
	_, err = node.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		get = pipe.Get(ctx, k.lock)
		pipe.Del(ctx, k.lock, k.holder)
		pipe.Publish(ctx, k.channel, "")
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	v, err := get.Result()
	if err != nil {
		return 0, nil // there was no lock
	}
	if exp, err := parseStamp(k, v); err == nil && exp < p.now() {
		return 0, nil // it had expired
	}
	return 1, nil
}

// holderPattern returns the SCAN pattern of the side hashes of lock keys
// that start with the driver's prefix + prefix.
func (p legacyProto) holderPattern(prefix string) string {
	return "{*}" + globEscape(p.d.cfg.prefix+prefix) + "*" + globEscape(legacyHolderSuffix)
}

func (p legacyProto) list(ctx context.Context, node *redis.Client, prefix string) ([]driver.Holder, error) {
	var hs []driver.Holder
	full := p.d.cfg.prefix + prefix
	err := scanKeys(ctx, node, p.holderPattern(prefix), func(names []string) error {
		type item struct {
			key  string
			all  *redis.MapStringStringCmd
			get  *redis.StringCmd
			pttl *redis.DurationCmd
		}
		var items []item
		_, err := node.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, name := range names {
				lk, ok := sideLockKey(name, legacyHolderSuffix)
				if !ok || !strings.HasPrefix(lk, full) {
					continue
				}
				items = append(items, item{
					key:  lk[len(p.d.cfg.prefix):],
					all:  pipe.HGetAll(ctx, name),
					get:  pipe.Get(ctx, lk),
					pttl: pipe.PTTL(ctx, lk),
				})
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) && !isWrongType(err) {
			return err
		}
		for _, it := range items {
			if h, ok := p.holder(it.key, it.all, it.get, it.pttl); ok {
				hs = append(hs, h)
			}
		}
		return nil
	})
	return hs, err
}

// holder returns the live holder of key that the replies of HGETALL of its
// side hash, GET and PTTL of its lock key record, and false if there is
// none (the lock key no longer holds the timestamp the owner wrote, or it
// has passed).
func (p legacyProto) holder(key string, all *redis.MapStringStringCmd, get *redis.StringCmd, pttl *redis.DurationCmd) (driver.Holder, bool) {
	m, err := all.Result()
	if err != nil || m[fieldOwner] == "" {
		return driver.Holder{}, false
	}
	v, err := get.Result()
	if err != nil || v != m[fieldValue] {
		return driver.Holder{}, false // not (or no longer) this owner's timestamp
	}
	now := p.now()
	exp, err := strconv.ParseInt(v, 10, 64)
	if err != nil || exp < now {
		return driver.Holder{}, false
	}
	tok, err := strconv.ParseUint(m[fieldToken], 10, 64)
	if err != nil {
		return driver.Holder{}, false
	}
	ttl := p.left(exp, now)
	if d := pttl.Val(); d > 0 && d < ttl {
		ttl = d
	}
	return driver.Holder{Key: key, Owner: m[fieldOwner], Mode: driver.Exclusive, Token: tok, Info: m[fieldInfo], TTL: ttl}, true
}

// readHold reads the side hash and the lock key in one MULTI/EXEC on the
// key's master.
func (p legacyProto) readHold(ctx context.Context, k layout, key, owner string) (driver.Holder, error) {
	node, err := p.d.master(ctx, k.lock)
	if err != nil {
		return driver.Holder{}, err
	}
	var (
		all  *redis.MapStringStringCmd
		get  *redis.StringCmd
		pttl *redis.DurationCmd
	)
	_, err = node.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		all = pipe.HGetAll(ctx, k.holder)
		get = pipe.Get(ctx, k.lock)
		pttl = pipe.PTTL(ctx, k.lock)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return driver.Holder{}, err
	}
	if h, ok := p.holder(key, all, get, pttl); ok && h.Owner == owner {
		return h, nil
	}
	return driver.Holder{}, driver.ErrNotOwner
}

func (p legacyProto) count(ctx context.Context, node *redis.Client, prefix string) (int, error) {
	n := 0
	full := p.d.cfg.prefix + prefix
	// The lock keys themselves (dlock's and other services').
	err := scanKeys(ctx, node, globEscape(full)+"*", func(names []string) error {
		for _, name := range names {
			if !isLegacySideKey(name) {
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	// The side hashes.
	err = scanKeys(ctx, node, p.holderPattern(prefix), func(names []string) error {
		for _, name := range names {
			if lk, ok := sideLockKey(name, legacyHolderSuffix); ok && strings.HasPrefix(lk, full) {
				n++
			}
		}
		return nil
	})
	return n, err
}

func isLegacySideKey(name string) bool {
	for _, suffix := range []string{legacyHolderSuffix, legacyFenceSuffix} {
		if _, ok := sideLockKey(name, suffix); ok {
			return true
		}
	}
	return false
}
