package quorum

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/ctxerr"
)

// Subscribe implements driver.Notifier. It subscribes to every node that
// implements driver.Notifier, in parallel, and signals whenever any of them
// does: a release goes to every node, so one live subscription is enough to
// hear it. It fails only if no node could subscribe, and returns an error
// wrapping driver.ErrUnsupported if no node is a Notifier (package dlock then
// polls).
func (d *Driver) Subscribe(ctx context.Context, req driver.Request) (_ driver.Subscription, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	if err := d.check(ctx, &req); err != nil {
		return nil, err
	}
	subs := make([]driver.Subscription, len(d.nodes))
	errs := make([]error, len(d.nodes))
	some := false
	var wg sync.WaitGroup
	for i, n := range d.nodes {
		nt, ok := n.(driver.Notifier)
		if !ok {
			continue
		}
		some = true
		wg.Go(func() { subs[i], errs[i] = nt.Subscribe(ctx, req) })
	}
	wg.Wait()
	if !some {
		return nil, fmt.Errorf("quorum: no node notifies releases: %w", driver.ErrUnsupported)
	}
	s := &subscription{c: make(chan struct{}, 1), done: make(chan struct{})}
	var failures []error
	for i, sub := range subs {
		switch {
		case errs[i] != nil:
			failures = append(failures, fmt.Errorf("node %d: %w", i, errs[i]))
		case sub != nil:
			s.subs = append(s.subs, sub)
		}
	}
	if len(s.subs) == 0 {
		return nil, fmt.Errorf("quorum: subscribe %q: %w", req.Key, errors.Join(failures...))
	}
	if len(failures) > 0 {
		d.log.Warn("quorum: some nodes cannot notify releases; listening to the others", "key", req.Key, "err", errors.Join(failures...))
	}
	for _, sub := range s.subs {
		s.wg.Go(func() {
			for {
				select {
				case <-s.done:
					return
				case <-sub.C():
					select {
					case s.c <- struct{}{}:
					default: // a signal is pending already
					}
				}
			}
		})
	}
	return s, nil
}

// subscription merges the nodes' subscriptions.
type subscription struct {
	c    chan struct{}
	done chan struct{}
	subs []driver.Subscription
	wg   sync.WaitGroup
	once sync.Once
	err  error
}

// C implements driver.Subscription.
func (s *subscription) C() <-chan struct{} { return s.c }

// Close implements driver.Subscription: it stops listening and closes the
// nodes' subscriptions. It is idempotent.
func (s *subscription) Close() error {
	s.once.Do(func() {
		close(s.done)
		s.wg.Wait()
		var errs []error
		for _, sub := range s.subs {
			if err := sub.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		s.err = errors.Join(errs...)
	})
	return s.err
}

// List implements driver.Lister: it lists the holders of keys under prefix
// on every node and returns those that a majority of nodes list, with the
// time until fewer than a majority will hold it and the token Acquire
// returned. It returns an error wrapping driver.ErrUnsupported if a node
// cannot list, and the nodes' errors if fewer than a majority answered.
func (d *Driver) List(ctx context.Context, prefix string) (_ []driver.Holder, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	if err := d.check(ctx, nil); err != nil {
		return nil, err
	}
	listers := make([]driver.Lister, len(d.nodes))
	for i, n := range d.nodes {
		l, ok := n.(driver.Lister)
		if !ok {
			return nil, fmt.Errorf("quorum: node %d (%T) cannot list holders: %w", i, n, driver.ErrUnsupported)
		}
		listers[i] = l
	}
	lists := make([][]driver.Holder, len(d.nodes))
	errs := make([]error, len(d.nodes))
	var wg sync.WaitGroup
	for i, l := range listers {
		wg.Go(func() { lists[i], errs[i] = l.List(ctx, prefix) })
	}
	wg.Wait()
	if err := d.needMajority("list", errs); err != nil {
		return nil, err
	}
	type id struct {
		key, owner string
		mode       driver.Mode
	}
	seen := map[id]*driver.Holder{}
	ttls := map[id][]time.Duration{}
	fences := map[id]uint64{} // the holder's token: its largest fence token
	for i, hs := range lists {
		if errs[i] != nil {
			continue
		}
		for _, h := range hs {
			if isFence(h.Key) {
				k := id{h.Key[:len(h.Key)-len(fenceSuffix)], h.Owner, h.Mode}
				fences[k] = max(fences[k], h.Token)
				continue
			}
			k := id{h.Key, h.Owner, h.Mode}
			if p := seen[k]; p == nil {
				h := h
				seen[k] = &h
			} else {
				p.Token = max(p.Token, h.Token)
				if p.Info == "" {
					p.Info = h.Info
				}
			}
			ttls[k] = append(ttls[k], h.TTL)
		}
	}
	var out []driver.Holder
	for k, h := range seen {
		t := ttls[k]
		if len(t) < d.quorum {
			continue
		}
		// The hold lasts while a majority holds it: the quorum-th longest.
		slices.SortFunc(t, func(a, b time.Duration) int { return cmp.Compare(b, a) })
		h.TTL = t[d.quorum-1]
		if tok, ok := fences[k]; ok {
			h.Token = tok
		}
		out = append(out, *h)
	}
	slices.SortFunc(out, func(a, b driver.Holder) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Token, b.Token))
	})
	return out, nil
}

// ForceRelease implements driver.ForceReleaser: it removes every hold of key
// (and its fence) on every node and reports the most holds any node removed. It returns an
// error wrapping driver.ErrUnsupported if a node cannot do it, and the
// nodes' errors if fewer than a majority succeeded.
func (d *Driver) ForceRelease(ctx context.Context, key string) (_ int, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	if err := d.check(ctx, nil); err != nil {
		return 0, err
	}
	frs := make([]driver.ForceReleaser, len(d.nodes))
	for i, n := range d.nodes {
		f, ok := n.(driver.ForceReleaser)
		if !ok {
			return 0, fmt.Errorf("quorum: node %d (%T) cannot force a release: %w", i, n, driver.ErrUnsupported)
		}
		frs[i] = f
	}
	counts := make([]int, len(d.nodes))
	errs := make([]error, len(d.nodes))
	var wg sync.WaitGroup
	for i, f := range frs {
		wg.Go(func() { counts[i], errs[i] = f.ForceRelease(ctx, key) })
		if d.fence {
			wg.Go(func() { _, _ = f.ForceRelease(ctx, key+fenceSuffix) })
		}
	}
	wg.Wait()
	removed := slices.Max(counts)
	if err := d.needMajority(fmt.Sprintf("force release %q", key), errs); err != nil {
		return removed, err
	}
	return removed, nil
}

// needMajority returns nil if a majority of errs are nil; it logs the
// failures of a minority.
func (d *Driver) needMajority(op string, errs []error) error {
	var failures []error
	for i, err := range errs {
		if err != nil {
			failures = append(failures, fmt.Errorf("node %d: %w", i, err))
		}
	}
	if len(failures) == 0 {
		return nil
	}
	if len(d.nodes)-len(failures) < d.quorum {
		return fmt.Errorf("quorum: %s: only %d of %d nodes answered, %d needed: %w",
			op, len(d.nodes)-len(failures), len(d.nodes), d.quorum, errors.Join(failures...))
	}
	d.log.Warn("quorum: "+op+": some nodes failed", "err", errors.Join(failures...))
	return nil
}
