package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// maxWatchAttempts bounds the attempts to set a watch on a node that keeps
// vanishing before the watch is set; the waiter then polls.
const maxWatchAttempts = 8

// Subscribe implements driver.Notifier. A waiter with a node in the key's
// queue watches only the nodes that keep it from holding (see verdict): a
// writer its predecessor, a reader the nearest node ahead that is not a
// reader (whose data change, a downgrade, is signalled as well as its
// deletion), a permit of N the N nodes just ahead of its own (the key's
// children, when N is over 16). No herd of waiters wakes on a release: a
// release wakes the writer just behind it, the readers behind a writer, or
// the permits within N places behind it. One without a node watches the
// first node. A watch set on a missing node, or on the owner's own node
// holding, signals at once. When a watched node changes, the subscription
// signals and moves on to what blocks the owner now, until it is closed.
func (d *Driver) Subscribe(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	if err := checkMode(req); err != nil {
		return nil, err
	}
	parent, id := d.parentPath(req.Key), dlock.OwnerID(req.Owner)
	var hint []string
	first := false
	if h, ok := d.holds.Get(req.Owner); ok && !h.held {
		// What blocked it at the last look: a node ahead stays so until
		// it is deleted.
		hint, first = h.wait, h.first
	}
	ws := watches{}
	now, err := callFor(ctx, d, func() (bool, error) { return d.watchNext(parent, id, hint, first, ws) })
	if err != nil {
		return nil, fmt.Errorf("zkdlock: subscribe %q: %w", req.Key, err)
	}
	s := &subscription{c: make(chan struct{}, 1), done: make(chan struct{})}
	if !d.spawn(func() { d.follow(s, parent, id, now, ws) }) {
		return nil, fmt.Errorf("zkdlock: subscribe %q: %w", req.Key, errClosed)
	}
	return s, nil
}

// watches are the watches a subscription has set, by the name of the
// watched node ("" for the key's children or znode). A watch that has not
// fired means its node has not changed since it was set.
type watches map[string]<-chan zk.Event

// watchNext sets watches (adding them to ws) on what the owner with ID id
// waits for under parent: targets, if known (first: the first of them is a
// write node that holds the owner back unless its data says downgraded),
// else what the key's queue says blocks the owner's node, else the first
// node, else the arrival of nodes. now reports that a change may already
// have happened: the waiter should look again at once. Watches of nodes
// that no longer block the owner are dropped from ws (they stay with the
// client until their node changes, and are then ignored).
func (d *Driver) watchNext(parent, id string, targets []string, first bool, ws watches) (now bool, err error) {
	for range maxWatchAttempts {
		if targets == nil {
			children, _, err := d.conn.Children(parent)
			if errors.Is(err, zk.ErrNoNode) {
				exists, _, ch, err := d.conn.ExistsW(parent)
				switch {
				case err != nil:
					return false, err
				case exists:
					continue
				}
				clear(ws)
				ws[""] = ch
				return true, nil
			}
			if err != nil {
				return false, err
			}
			q := queue(children)
			switch i := find(q, id); {
			case i >= 0:
				v := judge(q, i)
				switch {
				case v.held:
					clear(ws)
					return true, nil // nothing to wait for
				case v.children:
					return d.watchChildren(parent, id, ws)
				}
				targets, first = nil, v.first
				for _, n := range v.wait {
					targets = append(targets, n.name)
				}
			case len(q) > 0:
				targets, first = []string{q[0].name}, false
			default:
				if _, err := d.watchChildren(parent, id, ws); err != nil {
					return false, err
				}
				return true, nil
			}
		}
		ok, err := d.watchNodes(parent, targets, first, ws)
		if err != nil {
			return false, err
		}
		if ok {
			return now, nil
		}
		// A target has gone, or was a downgraded write node: look again.
		now, targets, first = true, nil, false
	}
	return true, nil
}

// watchChildren replaces ws with a watch of parent's children, for a
// permit with too many nodes ahead to watch one by one, or for a key
// without nodes. now reports that the owner's node, if it has one, holds
// (or is gone) by the listing the watch was set with.
func (d *Driver) watchChildren(parent, id string, ws watches) (now bool, err error) {
	children, _, ch, err := d.conn.ChildrenW(parent)
	if errors.Is(err, zk.ErrNoNode) {
		// The key's znode is gone, and the owner's node with it: watch
		// for its return, and look again.
		_, _, ch, err := d.conn.ExistsW(parent)
		if err != nil {
			return false, err
		}
		clear(ws)
		ws[""] = ch
		return true, nil
	}
	if err != nil {
		return false, err
	}
	clear(ws)
	ws[""] = ch
	q := queue(children)
	i := find(q, id)
	return i < 0 || judge(q, i).held, nil
}

// watchNodes sets a watch on each of the targets under parent (GetW, which
// sets none on a missing node, as ExistsW would, for good), in parallel,
// keeping the watches of ws that have not fired and dropping the others.
// It reports false if a target is missing, or if first is set and the
// first target's data says it has been downgraded.
func (d *Driver) watchNodes(parent string, targets []string, first bool, ws watches) (bool, error) {
	keep := make(map[string]bool, len(targets))
	for _, t := range targets {
		keep[t] = true
	}
	for name := range ws {
		if !keep[name] {
			delete(ws, name)
		}
	}
	type set struct {
		name string
		ch   <-chan zk.Event
		data []byte
		err  error
	}
	var (
		sets []*set
		wg   sync.WaitGroup
	)
	for j, t := range targets {
		if _, ok := ws[t]; ok && !(first && j == 0) {
			continue
		}
		st := &set{name: t}
		sets = append(sets, st)
		wg.Go(func() { st.data, _, st.ch, st.err = d.conn.GetW(parent + "/" + t) })
	}
	wg.Wait()
	ok := true
	for _, st := range sets {
		switch {
		case errors.Is(st.err, zk.ErrNoNode):
			ok = false
			continue
		case st.err != nil:
			return false, st.err
		}
		ws[st.name] = st.ch
		if first && st.name == targets[0] {
			if _, _, downgraded, _ := decodeData(st.data); downgraded {
				ok = false
			}
		}
	}
	return ok, nil
}

// follow signals s when a watch of ws fires and sets the watches after it,
// until s is closed.
func (d *Driver) follow(s *subscription, parent, id string, now bool, ws watches) {
	for {
		if now {
			s.signal()
		}
		if len(ws) == 0 {
			return
		}
		cases := []reflect.SelectCase{
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.done)},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(d.ctx.Done())},
		}
		names := make([]string, 0, len(ws))
		for name, ch := range ws {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
			names = append(names, name)
		}
		chosen, _, _ := reflect.Select(cases)
		if chosen < 2 {
			return
		}
		delete(ws, names[chosen-2])
		s.signal()
		select {
		case <-s.done:
			return
		default:
		}
		var err error
		if now, err = d.watchNext(parent, id, nil, false, ws); err != nil {
			s.signal() // the waiter tries again and learns more
			return
		}
	}
}

// subscription implements driver.Subscription.
type subscription struct {
	c    chan struct{}
	done chan struct{}
	once sync.Once
}

// C implements driver.Subscription.
func (s *subscription) C() <-chan struct{} { return s.c }

// Close implements driver.Subscription. It sets no further watch, but those
// already set stay with the client until their node changes (go-zookeeper
// cannot remove a watch), and are then ignored: on nodes ahead, which go
// when their owners release or their sessions end, on the key's children,
// or on the key's znode (when the key had no contender), which goes once
// its linger period has passed or comes when the key is next locked.
func (s *subscription) Close() error {
	s.once.Do(func() { close(s.done) })
	return nil
}

func (s *subscription) signal() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}
