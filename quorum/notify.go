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
// does: a release goes to every node, so one live subscription among the
// nodes that held the lock is enough to hear it. It returns as soon as a
// majority of nodes listen (a majority shares a node with the majority that
// holds the lock) and the others had as long again (at least 5ms) to
// confirm, or once every node has answered (see fanout), and keeps
// listening to nodes that confirm later; a node that is hung does not hold
// it up. It fails only if no node could subscribe, and returns an error
// wrapping driver.ErrUnsupported if no node is a Notifier (package dlock
// then polls).
func (d *Driver) Subscribe(ctx context.Context, req driver.Request) (_ driver.Subscription, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	if err := d.enter(ctx, &req); err != nil {
		return nil, err
	}
	defer d.calls.Done()
	timeout := nodeTimeout(req.TTL)
	s := &subscription{c: make(chan struct{}, 1), done: make(chan struct{})}
	listening := func(yesN, _, _ int) bool { return yesN >= d.quorum }
	answers := d.fanout(ctx, acquireGrace, false, listening, func(ctx context.Context, i int) answer {
		nt, ok := d.nodes[i].(driver.Notifier)
		if !ok {
			return answer{vote: no, err: errNotAsked}
		}
		sub, err := timed(ctx, timeout, func(ctx context.Context) (driver.Subscription, error) { return nt.Subscribe(ctx, req) })
		if err != nil {
			return answer{vote: failed, err: err}
		}
		// A node that answers after the round joins then (or is
		// closed, if the subscription has ended by then).
		s.add(sub)
		return answer{vote: yes}
	})
	var failures []error
	for i, a := range answers {
		if a.vote == failed && !errors.Is(a.err, errNoAnswer) {
			failures = append(failures, fmt.Errorf("%s: %w", d.name(i), a.err))
		}
	}
	switch yesN, noN, _ := count(answers); {
	case noN == len(d.nodes):
		return nil, fmt.Errorf("quorum: no node notifies releases: %w", driver.ErrUnsupported)
	case yesN == 0 || ctx.Err() != nil:
		s.Close()
		return nil, fmt.Errorf("quorum: subscribe %q: %w", req.Key, cmp.Or(ctx.Err(), errors.Join(failures...)))
	case len(failures) > 0:
		d.log.Warn("quorum: some nodes cannot notify releases; listening to the others", "key", req.Key, "err", errors.Join(failures...))
	}
	return s, nil
}

// subscription merges the nodes' subscriptions.
type subscription struct {
	c    chan struct{}
	done chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	closed bool
	subs   []driver.Subscription

	once sync.Once
	err  error
}

// add listens to sub, or closes it if s is closed.
func (s *subscription) add(sub driver.Subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		sub.Close()
		return
	}
	s.subs = append(s.subs, sub)
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

// C implements driver.Subscription.
func (s *subscription) C() <-chan struct{} { return s.c }

// Close implements driver.Subscription: it stops listening and closes the
// nodes' subscriptions, those that join later included. It is idempotent.
func (s *subscription) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.done)
		subs := s.subs
		s.mu.Unlock()
		s.wg.Wait()
		var errs []error
		for _, sub := range subs {
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
	if err := d.enter(ctx, nil); err != nil {
		return nil, err
	}
	defer d.calls.Done()
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
	if err := d.all(ctx, func(i int) { lists[i], errs[i] = listers[i].List(ctx, prefix) }); err != nil {
		return nil, fmt.Errorf("quorum: list %q: %w", prefix, err)
	}
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

// ReadHold implements driver.HoldReader: it reads owner's hold of key on
// every node and returns it if a majority of nodes hold it, as List does:
// with the time until fewer than a majority will hold it and the token
// Acquire returned (the largest of the nodes', or of their fences). It
// returns an error wrapping driver.ErrNotOwner if so many nodes do not
// hold it that no majority does, and the nodes' errors if fewer than a
// majority answered.
func (d *Driver) ReadHold(ctx context.Context, key, owner string) (_ driver.Holder, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	if err := d.enter(ctx, nil); err != nil {
		return driver.Holder{}, err
	}
	defer d.calls.Done()
	readers := make([]driver.HoldReader, len(d.nodes))
	for i, n := range d.nodes {
		r, ok := n.(driver.HoldReader)
		if !ok {
			return driver.Holder{}, fmt.Errorf("quorum: node %d (%T) cannot read a hold: %w", i, n, driver.ErrUnsupported)
		}
		readers[i] = r
	}
	holds := make([]driver.Holder, len(d.nodes))
	fences := make([]uint64, len(d.nodes))
	errs := make([]error, len(d.nodes))
	err = d.all(ctx, func(i int) {
		if d.fence {
			f, err := readers[i].ReadHold(ctx, key+fenceSuffix, owner)
			if err == nil {
				fences[i] = f.Token
			}
		}
		holds[i], errs[i] = readers[i].ReadHold(ctx, key, owner)
	})
	if err != nil {
		return driver.Holder{}, fmt.Errorf("quorum: read hold %q: %w", key, err)
	}
	var (
		h       driver.Holder
		ttls    []time.Duration
		notHeld int
	)
	for i, err := range errs {
		switch {
		case err == nil:
			if len(ttls) == 0 {
				h = holds[i]
			}
			h.Token, h.Info = max(h.Token, holds[i].Token), cmp.Or(h.Info, holds[i].Info)
			ttls = append(ttls, holds[i].TTL)
		case errors.Is(err, driver.ErrNotOwner):
			notHeld++
		}
	}
	switch {
	case len(ttls) >= d.quorum:
		slices.SortFunc(ttls, func(a, b time.Duration) int { return cmp.Compare(b, a) })
		h.TTL = ttls[d.quorum-1]
		if tok := slices.Max(fences); tok > 0 {
			h.Token = tok
		}
		return h, nil
	case notHeld > len(d.nodes)-d.quorum:
		return driver.Holder{}, fmt.Errorf("quorum: read hold %q: %d of %d nodes do not hold it, %d needed: %w",
			key, notHeld, len(d.nodes), d.quorum, driver.ErrNotOwner)
	}
	return driver.Holder{}, d.needMajority(fmt.Sprintf("read hold %q", key), errs)
}

// ForceRelease implements driver.ForceReleaser: it removes every hold of key
// (and its fence) on every node and reports the most holds any node removed. It returns an
// error wrapping driver.ErrUnsupported if a node cannot do it, and the
// nodes' errors if fewer than a majority succeeded.
func (d *Driver) ForceRelease(ctx context.Context, key string) (_ int, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	if err := d.enter(ctx, nil); err != nil {
		return 0, err
	}
	defer d.calls.Done()
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
	err = d.all(ctx, func(i int) {
		f := frs[i]
		if !d.fence {
			counts[i], errs[i] = f.ForceRelease(ctx, key)
			return
		}
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = f.ForceRelease(ctx, key+fenceSuffix) })
		counts[i], errs[i] = f.ForceRelease(ctx, key)
		wg.Wait()
	})
	if err != nil {
		return 0, fmt.Errorf("quorum: force release %q: %w", key, err)
	}
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
			failures = append(failures, fmt.Errorf("%s: %w", d.name(i), err))
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
