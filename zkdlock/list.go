package zkdlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock/driver"
)

// listParallel bounds the keys List reads at once.
const listParallel = 16

// List implements driver.Lister: for each key under the driver's prefix
// that starts with prefix, the nodes of its queue that hold the key (all
// readers, all permits; waiters are not listed), with the owner and Info
// from the nodes' data (a foreign client's node: its name, as both), the mode from the node's name and data (a
// downgraded write node is Shared) and the creation zxid as the token.
// Holder.TTL is the session timeout the server granted this driver: an
// upper bound of how long the hold outlives its holder, when the holder's
// driver was set up alike. A node is listed as soon as the queue lets it
// hold, which may be a moment before its contender learns so.
func (d *Driver) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	hs, err := callFor(ctx, d, func() ([]driver.Holder, error) { return d.list(prefix) })
	if err != nil {
		return nil, fmt.Errorf("zkdlock: list %q: %w", prefix, err)
	}
	return hs, nil
}

func (d *Driver) list(prefix string) ([]driver.Holder, error) {
	names, _, err := d.conn.Children(d.root)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, n := range names {
		if k, ok := unescape(n); ok && strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	ttl := cmp.Or(d.sess.latest(), d.ttl)
	var (
		mu   sync.Mutex
		hs   []driver.Holder
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, listParallel)
	)
	for _, k := range keys {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			khs, err := d.keyHolders(k)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			for _, h := range khs {
				h.TTL = ttl
				hs = append(hs, h)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.SortFunc(hs, func(a, b driver.Holder) int {
		return cmp.Or(strings.Compare(a.Key, b.Key), cmp.Compare(a.Token, b.Token))
	})
	return hs, nil
}

// keyHolders reads the holders of key.
func (d *Driver) keyHolders(key string) ([]driver.Holder, error) {
	parent := d.parentPath(key)
	children, _, err := d.look(parent, "")
	if err != nil {
		return nil, err
	}
	hs, err := d.holders(parent, queue(children))
	if err != nil {
		return nil, err
	}
	out := make([]driver.Holder, len(hs))
	for i, h := range hs {
		out[i] = driver.Holder{Key: key, Owner: h.owner, Mode: h.heldMode(), Limit: h.limit, Token: uint64(h.czxid), Info: h.info}
	}
	return out, nil
}

// ForceRelease implements driver.ForceReleaser: it reads which nodes hold
// the key (as List does), deletes every node of the key (the holders' and
// the queue's) and then the key's znode, and reports how many of the
// holders' nodes it deleted.
func (d *Driver) ForceRelease(ctx context.Context, key string) (int, error) {
	n, err := callFor(ctx, d, func() (int, error) { return d.forceRelease(key) })
	if err != nil {
		return 0, fmt.Errorf("zkdlock: force release %q: %w", key, err)
	}
	return n, nil
}

func (d *Driver) forceRelease(key string) (int, error) {
	parent := d.parentPath(key)
	children, _, err := d.look(parent, "")
	if err != nil {
		return 0, err
	}
	q := queue(children)
	hs, err := d.holders(parent, q)
	if err != nil {
		return 0, err
	}
	holding := map[string]bool{}
	for _, h := range hs {
		holding[h.name] = true
	}
	errs := make([]error, len(q))
	var wg sync.WaitGroup
	for i, n := range q {
		wg.Go(func() { errs[i] = d.conn.Delete(parent+"/"+n.name, -1) })
	}
	wg.Wait()
	removed := 0
	for i, err := range errs {
		switch {
		case err == nil:
			if holding[q[i].name] {
				removed++
			}
		case errors.Is(err, zk.ErrNoNode):
			errs[i] = nil
		}
	}
	d.deleteParent(parent)
	return removed, errors.Join(errs...)
}
