package redisdlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// NewRueidis returns a driver in Script mode over a rueidis client (a
// standalone server, a Sentinel-managed master or a Cluster: rueidis
// tells them apart on its own). The driver does not own the client: Close
// leaves it open. Bad options are reported as a *dlock.ArgError; the
// Transaction and Legacy protocols and WithReplicaAck need a go-redis
// client (New).
//
// rueidis pipelines the commands of concurrent callers on one connection
// and abandons a command once its context ends, so the driver declares
// driver.Capabilities.CancelsPromptly and package dlock calls it on the
// caller's goroutine. Under many concurrent locks this roughly triples the
// throughput of one server over go-redis (see bench/).
//
// Three client settings matter:
//   - PipelineMultiplex -1, one connection per server. With more, a
//     Release that follows an Acquire whose caller gave up may reach the
//     server first, on another connection; the hold then stays until its
//     lease ends.
//   - DisableRetry true: dlock retries on its own, and a retried release
//     can report "not held" for a lock it did release.
//   - DisableCache true, unless the client-side cache is used elsewhere:
//     the driver reads nothing through it.
//
// Clients opened from a URL with client=rueidis get all three.
func NewRueidis(client rueidis.Client, opts ...Option) (*Driver, error) {
	if client == nil {
		return nil, &dlock.ArgError{Name: "client", Value: nil, Reason: "must not be nil"}
	}
	d, err := newRueidisDriver(opts)
	if err != nil {
		return nil, err
	}
	d.useRueidis(client)
	return d, nil
}

// newRueidisDriver checks opts and returns a driver without its client,
// so that bad options are refused before a client dials the server.
func newRueidisDriver(opts []Option) (*Driver, error) {
	d := &Driver{}
	if err := d.configure(opts); err != nil {
		return nil, err
	}
	switch {
	case d.cfg.mode != Script:
		return nil, &dlock.ArgError{Name: "mode", Value: d.cfg.mode.String(), Reason: "needs a go-redis client (New, or client=go-redis in a URL); a rueidis client runs Script mode"}
	case d.cfg.replicas > 0:
		return nil, &dlock.ArgError{Name: "replicas", Value: d.cfg.replicas, Reason: "waiting for replicas (WithReplicaAck, wait_replicas in a URL) needs a go-redis client"}
	}
	d.caps.CancelsPromptly = true
	return d, nil
}

// useRueidis gives d, from newRueidisDriver, its client.
func (d *Driver) useRueidis(client rueidis.Client) {
	d.ru = client
	d.n = newNotifier(dialRueidis(client))
	d.ev = rueidisEval{client}
}

// Rueidis returns the rueidis client of a driver made by NewRueidis (or
// opened with client=rueidis), else nil.
func (d *Driver) Rueidis() rueidis.Client { return d.ru }

// rueidisEval is the evaler of a rueidis client.
type rueidisEval struct{ c rueidis.Client }

func (e rueidisEval) eval(ctx context.Context, s *script, keys, args []string, _ bool) ([]int64, error) {
	m, err := s.ru.Exec(ctx, e.c, keys, args).ToMessage()
	if err != nil {
		return nil, err
	}
	if m.IsInt64() {
		n, _ := m.AsInt64()
		return []int64{n}, nil
	}
	return m.AsIntSlice()
}

// isCluster reports whether the driver runs on a Redis Cluster.
func (d *Driver) isCluster() bool {
	if d.ru != nil {
		return d.ru.Mode() == rueidis.ClientModeCluster
	}
	return d.cluster != nil
}

// rueidisMasters calls fn for the server, or every master of the Cluster,
// concurrently.
func (d *Driver) rueidisMasters(ctx context.Context, fn func(ctx context.Context, node rueidis.Client) error) error {
	nodes := d.ru.Nodes()
	if len(nodes) == 1 {
		for _, node := range nodes {
			return fn(ctx, node)
		}
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, node := range nodes {
		wg.Go(func() {
			role, err := node.Do(ctx, node.B().Role().Build()).ToArray()
			if err == nil && len(role) > 0 {
				if r, _ := role[0].ToString(); r != "master" {
					return // a replica: its master lists the same locks
				}
				err = fn(ctx, node)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// rueidisScan is scanHashes's scan on node.
func rueidisScan(ctx context.Context, node rueidis.Client) func(string, func([]string) error) error {
	return func(pattern string, fn func([]string) error) error {
		var cursor uint64
		for {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return err
			}
			if len(e.Elements) > 0 {
				if err := fn(e.Elements); err != nil {
					return err
				}
			}
			if e.Cursor == 0 {
				return nil
			}
			cursor = e.Cursor
		}
	}
}

// lockNames returns the names among names of the lock hashes of keys that
// start with prefix, and those keys.
func (d *Driver) lockNames(names []string, prefix string) (hashes, keys []string) {
	for _, name := range names {
		if key, ok := d.keyOfHash(name); ok && strings.HasPrefix(key, prefix) {
			hashes, keys = append(hashes, name), append(keys, key)
		}
	}
	return hashes, keys
}

// replyErr returns the error of a reply that is not the server's answer
// (a connection failure): a Redis error reply says the key is not a lock.
func replyErr(r rueidis.RedisResult) error {
	err := r.Error()
	if _, ok := rueidis.IsRedisErr(err); ok || rueidis.IsRedisNil(err) {
		return nil
	}
	return err
}

// rueidisList is listHashes on a rueidis node.
func (d *Driver) rueidisList(ctx context.Context, node rueidis.Client, prefix string) ([]driver.Holder, error) {
	var hs []driver.Holder
	err := d.scanHashes(prefix, rueidisScan(ctx, node), func(names []string) error {
		hashes, keys := d.lockNames(names, prefix)
		cmds := make(rueidis.Commands, 0, 3*len(hashes)+1)
		for _, name := range hashes {
			cmds = append(cmds,
				node.B().Hgetall().Key(name).Build(),
				node.B().Pttl().Key(name).Build(),
				node.B().Zrange().Key(name+holdersSuffix).Min("0").Max("-1").Withscores().Build())
		}
		cmds = append(cmds, node.B().Time().Build())
		res := node.DoMulti(ctx, cmds...)
		clock, err := res[len(res)-1].AsStrSlice()
		if err != nil {
			return err
		}
		if len(clock) != 2 {
			return fmt.Errorf("TIME returned %q", clock)
		}
		sec, err1 := strconv.ParseInt(clock[0], 10, 64)
		usec, err2 := strconv.ParseInt(clock[1], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("TIME returned %q: %w", clock, err)
		}
		now := time.Unix(sec, usec*1000)
		for i, key := range keys {
			r := res[3*i : 3*i+3]
			for _, x := range r {
				if err := replyErr(x); err != nil {
					return err
				}
			}
			m, err := r[0].AsStrMap()
			if err != nil {
				continue // not a lock
			}
			pttl, err := r[1].AsInt64()
			if err != nil {
				continue
			}
			zs, _ := r[2].AsZScores()
			members := make([]scored, len(zs))
			for j, z := range zs {
				members[j] = scored{z.Member, z.Score}
			}
			hs = append(hs, holdersOf(key, m, time.Duration(pttl)*time.Millisecond, members, now)...)
		}
		return nil
	})
	return hs, err
}

// rueidisCount is countHashes on a rueidis node.
func (d *Driver) rueidisCount(ctx context.Context, node rueidis.Client, prefix string) (int, error) {
	n := 0
	err := d.scanHashes(prefix, rueidisScan(ctx, node), func(names []string) error {
		hashes, _ := d.lockNames(names, prefix)
		if len(hashes) == 0 {
			return nil
		}
		cmds := make(rueidis.Commands, 0, 3*len(hashes))
		for _, name := range hashes {
			cmds = append(cmds,
				node.B().Hget().Key(name).Field(fieldOwner).Build(),
				node.B().Zcard().Key(name+holdersSuffix).Build(),
				node.B().Zcard().Key(name+queueSuffix).Build())
		}
		res := node.DoMulti(ctx, cmds...)
		for i := range hashes {
			r := res[3*i : 3*i+3]
			for _, x := range r {
				if err := replyErr(x); err != nil {
					return err
				}
			}
			owner, _ := r[0].ToString()
			holders, _ := r[1].AsInt64()
			queued, _ := r[2].AsInt64()
			n += records(owner, holders, queued)
		}
		return nil
	})
	return n, err
}

// rueidisPS is a psConn over a dedicated rueidis connection. Its goroutine
// takes the connection, sends the SUBSCRIBE and UNSUBSCRIBE commands in
// the order they were asked for, and replaces the connection when it
// breaks. rueidis pings an idle connection and closes one that does not
// answer (ConnWriteTimeout), which ends the subscription likewise.
type rueidisPS struct {
	n      *notifier
	client rueidis.Client
	ctx    context.Context // ended by close
	cancel context.CancelFunc

	mu   sync.Mutex
	ops  []psOp
	wake chan struct{} // signalled when ops grows
}

// psOp is a SUBSCRIBE (sub) or UNSUBSCRIBE of chans.
type psOp struct {
	sub   bool
	chans []string
}

// dialRueidis returns a notifier's dial function over client.
func dialRueidis(client rueidis.Client) func(*notifier) psConn {
	return func(n *notifier) psConn {
		c := &rueidisPS{n: n, client: client, wake: make(chan struct{}, 1)}
		c.ctx, c.cancel = context.WithCancel(context.Background())
		n.wg.Add(1)
		go c.run()
		return c
	}
}

func (c *rueidisPS) push(op psOp) {
	c.mu.Lock()
	c.ops = append(c.ops, op)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *rueidisPS) subscribe(_ context.Context, chans ...string) error {
	c.push(psOp{sub: true, chans: chans})
	return nil
}

func (c *rueidisPS) unsubscribe(chans ...string) { c.push(psOp{chans: chans}) }

func (c *rueidisPS) close() error {
	c.cancel()
	return nil
}

func (c *rueidisPS) run() {
	n := c.n
	defer n.wg.Done()
	dc, release := c.client.Dedicate()
	defer release()
	defer dc.Close()
	broken := dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) { n.hub.Notify(m.Channel) },
		OnSubscription: func(s rueidis.PubSubSubscription) {
			if s.Kind == "subscribe" {
				n.confirm(s.Channel)
			}
		},
	})
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-broken:
			// The connection failed (or could not be made): a new one
			// subscribes again to every channel, after a pause.
			if n.pause() {
				n.replace(c)
			}
			return
		case <-c.wake:
		}
		c.mu.Lock()
		ops := c.ops
		c.ops = nil
		c.mu.Unlock()
		for _, op := range ops {
			cmd := dc.B().Unsubscribe().Channel(op.chans...).Build()
			if op.sub {
				cmd = dc.B().Subscribe().Channel(op.chans...).Build()
			}
			// A failure breaks the connection, which is then replaced.
			ctx, cancel := context.WithTimeout(c.ctx, subscribeTimeout)
			_ = dc.Do(ctx, cmd).Error()
			cancel()
		}
	}
}
