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
// that starts with prefix, the first node of its queue (waiters are not
// listed), with the owner and Info from the node's data and its creation
// zxid as the token. Holder.TTL is the session timeout the server granted
// this driver: an upper bound of how long the hold outlives its holder,
// when the holder's driver was set up alike.
func (d *Driver) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	var hs []driver.Holder
	err := call(ctx, d, func() (err error) {
		hs, err = d.list(prefix)
		return err
	})
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
			h, ok, err := d.holder(k)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case ok:
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

// holder reads the holder of key, if it has one.
func (d *Driver) holder(key string) (driver.Holder, bool, error) {
	parent := d.parentPath(key)
	for range maxWatchAttempts { // the holder may go between the two reads
		children, _, err := d.look(parent, "")
		if err != nil {
			return driver.Holder{}, false, err
		}
		q := queue(children)
		if len(q) == 0 {
			return driver.Holder{}, false, nil
		}
		data, st, err := d.conn.Get(parent + "/" + q[0].name)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return driver.Holder{}, false, err
		}
		owner, info, _ := decodeData(data)
		return driver.Holder{Key: key, Owner: owner, Mode: driver.Exclusive, Token: uint64(st.Czxid), Info: info}, true, nil
	}
	return driver.Holder{}, false, nil
}

// ForceRelease implements driver.ForceReleaser: it deletes every node of
// the key (the holder's and the queue's) and then the key's znode, and
// reports 1 if it deleted a holder's node.
func (d *Driver) ForceRelease(ctx context.Context, key string) (int, error) {
	var n int
	err := call(ctx, d, func() (err error) {
		n, err = d.forceRelease(key)
		return err
	})
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
			if i == 0 {
				removed = 1
			}
		case errors.Is(err, zk.ErrNoNode):
			errs[i] = nil
		}
	}
	d.deleteParent(parent)
	return removed, errors.Join(errs...)
}
