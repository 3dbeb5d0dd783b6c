package main

import (
	"context"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/quorum"
	"github.com/dlockhq/dlock/redisdlock"
)

// dlockLocker is a dlock Client over redisdlock (one server) or over a
// quorum of redisdlock drivers (several independent servers).
type dlockLocker struct{ c *dlock.Client }

// dlockOpener opens dlock clients; qopts apply to the quorum driver over
// several servers.
func dlockOpener(qopts ...quorum.Option) func(addrs []string, s settings) (locker, func(), error) {
	return func(addrs []string, s settings) (locker, func(), error) { return openDlock(addrs, s, qopts) }
}

func openDlock(addrs []string, s settings, qopts []quorum.Option) (locker, func(), error) {
	cs, closeClients := newClients(addrs, s)
	nodes := make([]driver.Driver, 0, len(cs))
	fail := func(err error) (locker, func(), error) {
		for _, n := range nodes {
			n.Close()
		}
		closeClients()
		return nil, nil, err
	}
	var nodeOpts []redisdlock.Option
	if len(cs) > 1 {
		// As redlock:// opens its nodes (see package quorum).
		nodeOpts = append(nodeOpts, redisdlock.WithAutoPipeline(false))
	}
	for _, c := range cs {
		d, err := redisdlock.New(c, nodeOpts...)
		if err != nil {
			return fail(err)
		}
		nodes = append(nodes, d)
	}
	return newDlockLocker(nodes, s, qopts, closeClients)
}

// newDlockLocker makes a dlock Client over nodes: the one driver, or a
// quorum of them. closeClients closes the nodes' clients.
func newDlockLocker(nodes []driver.Driver, s settings, qopts []quorum.Option, closeClients func()) (locker, func(), error) {
	fail := func(err error) (locker, func(), error) {
		for _, n := range nodes {
			n.Close()
		}
		closeClients()
		return nil, nil, err
	}
	var d driver.Driver = nodes[0]
	if len(nodes) > 1 {
		q, err := quorum.New(nodes, qopts...)
		if err != nil {
			return fail(err)
		}
		d = q
	}
	c, err := dlock.New(d, dlock.WithDefaultTTL(s.ttl))
	if err != nil {
		return fail(err)
	}
	return dlockLocker{c}, func() { c.Close(); closeClients() }, nil
}

func (l dlockLocker) Lock(ctx context.Context, key string) (func(context.Context) error, error) {
	lk, err := l.c.Lock(ctx, key)
	if err != nil {
		return nil, err
	}
	return lk.Release, nil
}
