package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// sessionTTL is the session of every consensus client: dlock's default
// (the etcd lease or ZooKeeper session its drivers keep), given to the
// native recipes too.
const sessionTTL = 15 * time.Second

// connectTimeout bounds opening one client of a consensus store.
const connectTimeout = 10 * time.Second

// dlockURLOpener opens dlock clients with dlock.Open on scheme://addr: the
// backend registered for the scheme, with its defaults.
func dlockURLOpener(scheme string) func(addrs []string, s settings) (locker, func(), error) {
	return func(addrs []string, s settings) (locker, func(), error) {
		ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
		defer cancel()
		c, err := dlock.Open(ctx, scheme+"://"+addrs[0], dlock.WithDefaultTTL(s.ttl))
		if err != nil {
			return nil, nil, err
		}
		return dlockLocker{c}, func() { c.Close() }, nil
	}
}

// --- etcd's own recipe: go.etcd.io/etcd/client/v3/concurrency ---

func newEtcdClient(addr string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   []string{addr},
		DialTimeout: connectTimeout,
		Logger:      zap.NewNop(),
	})
}

// etcdMutexLocker is one etcd client with one long-lived session (a lease
// kept alive in the background), as the package documents its use: every
// lock of the client is a concurrency.Mutex on that session. A session holds
// a Mutex's key at most once (a second Mutex on the same session and prefix
// would find its own key and hold the lock too), so the goroutines of one
// client queue locally per key first, as they do in a dlock Client.
type etcdMutexLocker struct {
	sess  *concurrency.Session
	local keyGates
}

func openEtcdMutex(addrs []string, _ settings) (locker, func(), error) {
	cli, err := newEtcdClient(addrs[0])
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(sessionTTL/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return &etcdMutexLocker{sess: sess}, func() { sess.Close(); cli.Close() }, nil
}

func (l *etcdMutexLocker) Lock(ctx context.Context, key string) (func(context.Context) error, error) {
	leave, err := l.local.enter(ctx, key)
	if err != nil {
		return nil, err
	}
	m := concurrency.NewMutex(l.sess, key)
	if err := m.Lock(ctx); err != nil {
		leave()
		return nil, err
	}
	return func(ctx context.Context) error {
		defer leave()
		return m.Unlock(ctx)
	}, nil
}

// keyGates queues goroutines per key: at most one at a time is inside.
type keyGates struct {
	mu sync.Mutex
	m  map[string]*keyGate
}

type keyGate struct {
	ch   chan struct{} // capacity 1: full while a goroutine is inside
	refs int
}

// enter waits until the caller is alone inside the key's gate (or ctx ends)
// and returns the function that leaves it.
func (g *keyGates) enter(ctx context.Context, key string) (leave func(), err error) {
	g.mu.Lock()
	if g.m == nil {
		g.m = map[string]*keyGate{}
	}
	gt := g.m[key]
	if gt == nil {
		gt = &keyGate{ch: make(chan struct{}, 1)}
		g.m[key] = gt
	}
	gt.refs++
	g.mu.Unlock()
	put := func() {
		g.mu.Lock()
		if gt.refs--; gt.refs == 0 {
			delete(g.m, key)
		}
		g.mu.Unlock()
	}
	select {
	case gt.ch <- struct{}{}:
		return func() { <-gt.ch; put() }, nil
	case <-ctx.Done():
		put()
		return nil, ctx.Err()
	}
}

// --- ZooKeeper's recipe in go-zookeeper: zk.Lock ---

// zkLogger discards go-zookeeper's log lines (connects, disconnects).
type zkLogger struct{}

func (zkLogger) Printf(string, ...any) {}

// connectZk opens a ZooKeeper connection with a session of sessionTTL and
// waits until the session is established.
func connectZk(addr string) (*zk.Conn, error) {
	conn, events, err := zk.Connect([]string{addr}, sessionTTL, zk.WithLogger(zkLogger{}))
	if err != nil {
		return nil, err
	}
	timeout := time.NewTimer(connectTimeout)
	defer timeout.Stop()
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn, nil
			}
		case <-timeout.C:
			conn.Close()
			return nil, fmt.Errorf("zk: no session with %s after %v", addr, connectTimeout)
		}
	}
}

// zkLocker is one ZooKeeper connection (one session); every lock of it is a
// zk.Lock on the znode "/" + key (go-zookeeper creates the parents).
// Separate zk.Lock values of one connection queue separately, each with a
// sequential node of its own, so goroutines need no local queue.
type zkLocker struct{ conn *zk.Conn }

func openZkLock(addrs []string, _ settings) (locker, func(), error) {
	conn, err := connectZk(addrs[0])
	if err != nil {
		return nil, nil, err
	}
	return zkLocker{conn}, conn.Close, nil
}

func (l zkLocker) Lock(ctx context.Context, key string) (func(context.Context) error, error) {
	lk := zk.NewLock(l.conn, "/"+key, zk.WorldACL(zk.PermAll))
	// zk.Lock has no context: it waits in a goroutine of its own, and
	// releases the lock when it gets it after the caller has given up.
	done := make(chan error, 1)
	go func() { done <- lk.Lock() }()
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		return func(context.Context) error { return lk.Unlock() }, nil
	case <-ctx.Done():
		go func() {
			if <-done == nil {
				lk.Unlock()
			}
		}()
		return nil, ctx.Err()
	}
}
