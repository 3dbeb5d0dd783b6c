package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlockhq/dlock/quorum"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// locker is what every workload runs on: one client of one library, with
// its own connection pool(s). Lock waits until the lock is held or ctx ends.
type locker interface {
	Lock(ctx context.Context, key string) (unlock func(context.Context) error, err error)
}

// library opens lockers of one lock library over one server (len(addrs) ==
// 1) or, for libraries with quorum, over several independent servers.
type library struct {
	name       string
	store      string // the store it runs on: redis, etcd, zk
	native     bool   // the store's own recipe, which dlock is compared with
	quorum     bool   // can lock over several independent servers (Redlock)
	quorumOnly bool   // runs only the quorum cells
	contended  bool   // runs only the cells where clients contend for one key (hot key, handoff)
	ref        string // library whose single-server cell is this one's N=1 reference (default: itself)
	open       func(addrs []string, s settings) (locker, func(), error)
}

// settings are the knobs every library gets the same values of.
type settings struct {
	ttl   time.Duration // lease of every lock
	retry time.Duration // fixed delay between attempts, for libraries that poll
	pool  int           // go-redis PoolSize of every client
	name  string        // the name of the client's connections (CLIENT SETNAME), on Redis
}

// libraries lists the libraries in the order they are reported, store by
// store. dlock comes first; on Redis the hand-written baseline last.
var libraries = []library{
	{name: "dlock", store: "redis", quorum: true, open: dlockOpener()},
	// dlock's quorum keeps its fencing tokens monotonic, raising the
	// counters of nodes that lag behind in a second round when they have
	// drifted apart; this shows the quorum without that.
	{name: "dlock-nofence", store: "redis", quorum: true, quorumOnly: true, ref: "dlock", open: dlockOpener(quorum.WithoutFenceRound())},
	{name: "redsync", store: "redis", quorum: true, open: openRedsync},
	{name: "redislock", store: "redis", open: openRedislock},
	{name: "baseline", store: "redis", quorum: true, open: openBaseline},
	// The baseline retrying at once, without sleeping: the fastest a
	// polling client can take a released lock (and the most it can load
	// the server meanwhile).
	{name: "spin", store: "redis", contended: true, open: openSpin},

	{name: "dlock", store: "etcd", open: dlockURLOpener("etcd")},
	{name: "concurrency.Mutex", store: "etcd", native: true, open: openEtcdMutex},

	{name: "dlock", store: "zk", open: dlockURLOpener("zk")},
	{name: "zk.Lock", store: "zk", native: true, open: openZkLock},

	{name: "dlock", store: "pg", open: dlockPgOpen},

	{name: "dlock", store: "nats", open: dlockURLOpener("nats")},
}

var errNotHeld = errors.New("lock was not held at unlock")

// newClient returns a go-redis client with the settings every library
// shares: the pool size, no command retries after network errors and
// context deadlines applied to reads (what redisdlock asks of the clients
// it is given; neither changes anything while the network is fine), and
// go-redis's defaults otherwise.
func newClient(addr string, s settings) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		PoolSize:              s.pool,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
		ClientName:            s.name,
	})
}

func newClients(addrs []string, s settings) ([]*redis.Client, func()) {
	cs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		cs[i] = newClient(a, s)
	}
	return cs, func() {
		for _, c := range cs {
			c.Close()
		}
	}
}

// --- go-redsync/redsync/v4, with its go-redis v9 pool ---

type redsyncLocker struct {
	rs   *redsync.Redsync
	opts []redsync.Option
}

func openRedsync(addrs []string, s settings) (locker, func(), error) {
	cs, closeAll := newClients(addrs, s)
	pools := make([]rsredis.Pool, len(cs))
	for i, c := range cs {
		pools[i] = goredis.NewPool(c)
	}
	opts := []redsync.Option{
		redsync.WithExpiry(s.ttl),
		redsync.WithTries(math.MaxInt32), // the context bounds the wait
		redsync.WithRetryDelay(s.retry),
	}
	return &redsyncLocker{rs: redsync.New(pools...), opts: opts}, closeAll, nil
}

func (l *redsyncLocker) Lock(ctx context.Context, key string) (func(context.Context) error, error) {
	m := l.rs.NewMutex(key, l.opts...)
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", err, ctx.Err())
		}
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errNotHeld
		}
		return err
	}, nil
}

// --- bsm/redislock ---

type redislockLocker struct {
	c   *redislock.Client
	ttl time.Duration
	opt *redislock.Options
}

func openRedislock(addrs []string, s settings) (locker, func(), error) {
	cs, closeAll := newClients(addrs[:1], s)
	opt := &redislock.Options{RetryStrategy: redislock.LinearBackoff(s.retry)}
	return &redislockLocker{c: redislock.New(cs[0]), ttl: s.ttl, opt: opt}, closeAll, nil
}

func (l *redislockLocker) Lock(ctx context.Context, key string) (func(context.Context) error, error) {
	lk, err := l.c.Obtain(ctx, key, l.ttl, l.opt) // retries until ctx's deadline
	if err != nil {
		return nil, err
	}
	return lk.Release, nil
}

// --- the hand-written floor: SET NX PX, Lua compare-and-delete, fixed sleep (or none) ---
//
// Over N servers it is a bare Redlock: SET NX PX on all of them at once, held
// when a majority said yes, else undone everywhere and retried (no validity
// check, no drift: a floor, not a lock to use).

var compareAndDelete = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

type baselineLocker struct {
	rdbs []*redis.Client
	s    settings
}

func openBaseline(addrs []string, s settings) (locker, func(), error) {
	cs, closeAll := newClients(addrs, s)
	return &baselineLocker{rdbs: cs, s: s}, closeAll, nil
}

// openSpin opens the baseline with no delay between attempts: a busy spin.
func openSpin(addrs []string, s settings) (locker, func(), error) {
	s.retry = 0
	return openBaseline(addrs, s)
}

// all runs f on every server at once (inline when there is one) and returns
// how many said yes.
func (l *baselineLocker) all(f func(c *redis.Client) bool) int {
	if len(l.rdbs) == 1 {
		if f(l.rdbs[0]) {
			return 1
		}
		return 0
	}
	var n atomic.Int32
	var wg sync.WaitGroup
	for _, c := range l.rdbs[1:] {
		wg.Go(func() {
			if f(c) {
				n.Add(1)
			}
		})
	}
	if f(l.rdbs[0]) {
		n.Add(1)
	}
	wg.Wait()
	return int(n.Load())
}

func (l *baselineLocker) Lock(ctx context.Context, key string) (func(context.Context) error, error) {
	val := rand.Text()
	px := l.s.ttl.Milliseconds()
	unlock := func(ctx context.Context) error {
		var errs atomic.Int32
		n := l.all(func(c *redis.Client) bool {
			n, err := compareAndDelete.Run(ctx, c, []string{key}, val).Int()
			if err != nil {
				errs.Add(1)
			}
			return n == 1
		})
		if errs.Load() > 0 {
			return fmt.Errorf("unlock: %d servers failed", errs.Load())
		}
		if n < len(l.rdbs)/2+1 {
			return errNotHeld
		}
		return nil
	}
	var t *time.Timer
	for {
		var errs atomic.Int32
		n := l.all(func(c *redis.Client) bool {
			err := c.Do(ctx, "set", key, val, "nx", "px", px).Err()
			if err != nil && err != redis.Nil {
				errs.Add(1)
			}
			return err == nil
		})
		if n >= len(l.rdbs)/2+1 {
			return unlock, nil
		}
		if n > 0 || errs.Load() > 0 {
			unlock(context.WithoutCancel(ctx))
		}
		if errs.Load() > 0 && ctx.Err() == nil {
			return nil, fmt.Errorf("lock: %d servers failed", errs.Load())
		}
		if l.s.retry == 0 {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue
		}
		if t == nil {
			t = time.NewTimer(l.s.retry)
			defer t.Stop()
		} else {
			t.Reset(l.s.retry)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
