package zkdlock

import (
	"errors"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock/driver"
)

// Modes.
//
// Every mode uses one queue per key: the key's sequential nodes, in
// sequence order, whatever their kind. Which nodes hold the key is a
// function of the queue alone, as in Curator's InterProcessReadWriteLock:
//
//   - a write node (Exclusive, or a foreign node; see names.go) holds when
//     it is the first;
//   - a read node (Shared) holds when every node ahead of it is a read
//     node, except that the first may be a write node that has been
//     downgraded (its data says so; see encodeData);
//   - a permit node (a Semaphore of N) holds when fewer than N nodes are ahead of
//     it and all of them are permit nodes of the same N.
//
// Nodes only ever leave the queue, never enter it ahead of a node, and a
// downgrade is never undone, so a node that holds keeps holding until it is
// deleted: admission is monotone, and a contender that has once seen its
// node hold needs no further look.
//
// A downgraded write node is always the first: its write hold began when it
// was the first, and no node can come ahead of it later. So a read node
// needs the data of at most one node, the first, and only when that is the
// nearest write node ahead of it; a write node further back blocks it
// without a read.
//
// The rules are strict about nodes of the other family (permits among
// read-write nodes, permits with another N): such a node blocks every node
// behind it. It is either refused (see mismatch) and deleted by its
// contender at once, or, in a race between incompatible requests, holds:
// then nodes behind it wait for it rather than share the key with it. So a
// Semaphore hold never coexists with a Shared or Exclusive one, nor with a
// permit of another limit, even in a race.

// maxWindow bounds the nodes a waiting permit watches one by one; a
// semaphore with more permits watches the key's children instead.
const maxWindow = 16

// verdict is what the queue says about one node.
type verdict struct {
	held bool
	// wait lists the nodes whose deletion may let the node hold: a write
	// node's predecessor, the nearest node ahead of a read node that is
	// not a read node, the (up to) N nodes just ahead of a permit.
	wait []node
	// first reports that the node holds if and only if the first node,
	// the one in wait, is a downgraded write node: its data must be read.
	first bool
	// children reports that wait is too long to watch node by node: the
	// key's children are watched instead.
	children bool
}

// judge applies the rules to the node q[i]; its mode is q[i].mode (a
// downgraded write node is first, and holds).
func judge(q []node, i int) verdict {
	me := q[i]
	switch me.mode {
	case driver.Exclusive:
		if i == 0 {
			return verdict{held: true}
		}
		return verdict{wait: q[i-1 : i]}
	case driver.Shared:
		for j := i - 1; j >= 0; j-- {
			if q[j].mode != driver.Shared {
				return verdict{wait: q[j : j+1], first: j == 0 && q[j].mode == driver.Exclusive && !q[j].foreign}
			}
		}
		return verdict{held: true}
	}
	v := verdict{held: i < me.limit}
	for _, n := range q[:i] {
		if n.mode != driver.Semaphore || n.limit != me.limit {
			v.held = false
		}
	}
	if !v.held {
		v.wait = q[max(0, i-me.limit):i]
		v.children = len(v.wait) > maxWindow
	}
	return v
}

// compatible reports whether a request of mode m with limit may join a key
// whose first node is n: a Semaphore only with permits of the same limit,
// and Exclusive and Shared with each other.
func compatible(n node, m driver.Mode, limit int) bool {
	if n.mode == driver.Semaphore || m == driver.Semaphore {
		return n.mode == m && n.limit == limit
	}
	return true
}

// mismatch returns the error for a request of mode m (limit) that cannot
// join a key used as n's mode.
func mismatch(key string, n node, m driver.Mode, limit int) error {
	return fmt.Errorf("%q is in use as %s, asked for %s: %w", key, describe(n.mode, n.limit), describe(m, limit), driver.ErrModeMismatch)
}

func describe(m driver.Mode, limit int) string {
	if m == driver.Semaphore {
		return fmt.Sprintf("a semaphore of %d permits", limit)
	}
	return m.String()
}

// admit records in h, the node q[i], whether it holds and what keeps it
// from holding, reading the first node's data when the rules need it.
func (d *Driver) admit(h *hold, q []node, i int) error {
	v := judge(q, i)
	if v.first {
		data, _, err := d.conn.Get(h.parent + "/" + q[0].name)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		// Gone, only read nodes are ahead now, and no node can come.
		if _, _, downgraded, _ := decodeData(data); err != nil || downgraded {
			v = verdict{held: true}
		}
	}
	h.held, h.first, h.wait = v.held, v.first, nil
	if !v.children { // else Subscribe lists the children itself
		for _, n := range v.wait {
			h.wait = append(h.wait, n.name)
		}
	}
	return nil
}

// holder is a node that holds its key, with its data.
type holder struct {
	node
	owner, info string
	downgraded  bool
	czxid       int64
}

// holders returns the nodes of q (the queue of the key's znode parent) that
// hold the key, with their data, read in parallel. A node that goes while
// it is read is left out.
func (d *Driver) holders(parent string, q []node) ([]holder, error) {
	if len(q) == 0 {
		return nil, nil
	}
	n := holding(q)
	hs := make([]holder, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range hs {
		wg.Go(func() {
			data, st, err := d.conn.Get(parent + "/" + q[i].name)
			if err != nil {
				errs[i] = err
				return
			}
			hs[i] = holder{node: q[i], czxid: st.Czxid}
			if q[i].foreign {
				// Not the driver's data: name the node, as owner and
				// as the info that listings show.
				hs[i].owner, hs[i].info = q[i].name, q[i].name
				return
			}
			hs[i].owner, hs[i].info, hs[i].downgraded, _ = decodeData(data)
		})
	}
	wg.Wait()
	var out []holder
	for i, h := range hs {
		switch err := errs[i]; {
		case errors.Is(err, zk.ErrNoNode):
			continue
		case err != nil:
			return nil, err
		}
		if i == 0 && h.mode == driver.Exclusive && !h.downgraded {
			return []holder{h}, nil // a writer: the readers behind it wait
		}
		out = append(out, h)
	}
	return out, nil
}

// holding returns how many of the first nodes of the queue q may hold the
// key: the first node does; its kind says which of the next ones do (the
// readers behind a write node, if it has been downgraded).
func holding(q []node) int {
	n := 1
	switch q[0].mode {
	case driver.Shared, driver.Exclusive:
		for n < len(q) && q[n].mode == driver.Shared {
			n++
		}
	case driver.Semaphore:
		for n < len(q) && n < q[0].limit && q[n].mode == driver.Semaphore && q[n].limit == q[0].limit {
			n++
		}
	}
	return n
}

// heldMode returns the mode the holder holds the key in.
func (h holder) heldMode() driver.Mode {
	if h.downgraded {
		return driver.Shared
	}
	return h.mode
}
