package zkdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// maxWatchAttempts bounds the attempts to set a watch on a node that keeps
// vanishing before the watch is set; the waiter then polls.
const maxWatchAttempts = 8

// Subscribe implements driver.Notifier. A waiter with a node in the key's
// queue watches only the node just ahead of its own (no herd effect); one
// without a node watches the holder's. A watch set on a missing node, or on
// the owner's own node being first, signals at once. When the watched node
// goes, the subscription signals and moves on to the node now ahead, until
// it is closed.
func (d *Driver) Subscribe(ctx context.Context, req driver.Request) (driver.Subscription, error) {
	if req.Mode != driver.Exclusive {
		return nil, fmt.Errorf("zkdlock: %s mode: %w", req.Mode, driver.ErrUnsupported)
	}
	parent, id := d.parentPath(req.Key), dlock.OwnerID(req.Owner)
	hint := ""
	if h, ok := d.holds.Get(req.Owner); ok {
		hint = h.pred // the predecessor stays so until it is deleted
	}
	var w watch
	err := call(ctx, d, func() (err error) {
		w, err = d.watchNext(parent, id, hint)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("zkdlock: subscribe %q: %w", req.Key, err)
	}
	s := &subscription{c: make(chan struct{}, 1), done: make(chan struct{})}
	if _, ok := d.spawn(func() { d.follow(s, parent, id, w) }); !ok {
		return nil, fmt.Errorf("zkdlock: subscribe %q: %w", req.Key, errClosed)
	}
	return s, nil
}

// watch is a watch set by watchNext.
type watch struct {
	ch  <-chan zk.Event // fires on the change; nil: nothing to watch
	now bool            // signal at once: a change may already have happened
}

// watchNext sets a watch on what the owner with ID id waits for under
// parent: the node ahead of its own (target, if known), else the holder's
// node, else the arrival of nodes.
func (d *Driver) watchNext(parent, id, target string) (watch, error) {
	now := false
	for range maxWatchAttempts {
		if target == "" {
			children, _, err := d.conn.Children(parent)
			if errors.Is(err, zk.ErrNoNode) {
				exists, _, ch, err := d.conn.ExistsW(parent)
				switch {
				case err != nil:
					return watch{}, err
				case exists:
					continue
				}
				return watch{ch: ch, now: true}, nil
			}
			if err != nil {
				return watch{}, err
			}
			q := queue(children)
			switch i := find(q, id); {
			case i == 0:
				return watch{now: true}, nil // first: nothing to wait for
			case i > 0:
				target = q[i-1].name
			case len(q) > 0:
				target = q[0].name
			default:
				_, _, ch, err := d.conn.ChildrenW(parent)
				switch {
				case errors.Is(err, zk.ErrNoNode):
					continue
				case err != nil:
					return watch{}, err
				}
				return watch{ch: ch, now: true}, nil
			}
		}
		// GetW sets no watch on a missing node (ExistsW would, for good).
		_, _, ch, err := d.conn.GetW(parent + "/" + target)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			now, target = true, ""
			continue
		case err != nil:
			return watch{}, err
		}
		return watch{ch: ch, now: now}, nil
	}
	return watch{now: true}, nil
}

// follow signals s for w and the watches after it, until s is closed.
func (d *Driver) follow(s *subscription, parent, id string, w watch) {
	for {
		if w.now {
			s.signal()
		}
		if w.ch == nil {
			return
		}
		select {
		case <-w.ch:
			s.signal()
		case <-s.done:
			return
		case <-d.ctx.Done():
			return
		}
		select {
		case <-s.done:
			return
		default:
		}
		var err error
		if w, err = d.watchNext(parent, id, ""); err != nil {
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

// Close implements driver.Subscription. It sets no further watch, but one
// already set stays with the client until its node changes (go-zookeeper
// cannot remove a watch), and is then ignored: on the node ahead, which goes
// when its owner releases or its session ends, or on the key's znode (when
// the key had no contender), which goes once its linger period has passed
// or comes when the key is next locked.
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
