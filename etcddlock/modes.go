package etcddlock

import (
	"fmt"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock/driver"
)

// modeGuard returns the comparisons that hold when key's queue has no entry
// that a new entry of mode m (and limit n) could not share the key with:
// for a lock (Exclusive or Shared) no permit; for a permit no lock entry and
// no permit of another limit. They compare the CreateRevision of name
// ranges (which is 0 for a range without keys), so they hold for an empty
// queue and cost the server a walk of ranges that are empty on a key used
// consistently.
func (d *Driver) modeGuard(key string, m driver.Mode, n int) []clientv3.Cmp {
	qp := d.queuePrefix(key)
	sem := qp + "s"
	if m != driver.Semaphore {
		return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(sem), "=", 0).WithPrefix()}
	}
	mine := d.semPrefix(key, n)
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(qp), "=", 0).WithRange(sem),
		clientv3.Compare(clientv3.CreateRevision(sem), "=", 0).WithRange(mine),
		clientv3.Compare(clientv3.CreateRevision(clientv3.GetPrefixRangeEnd(mine)), "=", 0).WithRange(clientv3.GetPrefixRangeEnd(sem)),
	}
}

// admitted reports whether the entry at index i of kvs, entries of one queue
// in CreateRevision order starting with its first, may hold the key: an
// exclusive entry if it is first, a shared one if no exclusive entry is
// ahead of it, a permit if fewer than its limit are.
func admitted(kvs []*mvccpb.KeyValue, i int) bool {
	v := decode(kvs[i])
	switch v.mode() {
	case driver.Shared:
		for _, kv := range kvs[:i] {
			if decode(kv).mode() == driver.Exclusive {
				return false
			}
		}
		return true
	case driver.Semaphore:
		return i < v.Limit
	}
	return i == 0
}

// holding returns the entries of a queue (all of it, in CreateRevision
// order) that hold the key: the first if it is exclusive, otherwise every
// one that admitted allows (they come first in the queue).
func holding(kvs []*mvccpb.KeyValue) []*mvccpb.KeyValue {
	n := 0
	for n < len(kvs) && admitted(kvs, n) {
		n++
	}
	return kvs[:n]
}

// compatible reports whether an entry allows a request of mode m and limit
// n on its key (see modeGuard); a nil entry (an empty queue) allows all.
func compatible(kv *mvccpb.KeyValue, m driver.Mode, n int) bool {
	if kv == nil {
		return true
	}
	v := decode(kv)
	if (v.mode() == driver.Semaphore) != (m == driver.Semaphore) {
		return false
	}
	return m != driver.Semaphore || v.Limit == n
}

func mismatch(key string, kv *mvccpb.KeyValue, m driver.Mode, n int) error {
	v := decode(kv)
	return fmt.Errorf("etcddlock: %q is in use as %s (limit %d), asked for %s (limit %d): %w",
		key, v.mode(), v.Limit, m, n, driver.ErrModeMismatch)
}

// firstOp reads the first entry of key's queue, with its value: the holder
// of an exclusive lock, and on any key the entry that shows which mode the
// key is in use as.
func (d *Driver) firstOp(key string) clientv3.Op {
	return clientv3.OpGet(d.queuePrefix(key), clientv3.WithFirstCreate()...)
}

// aheadOp reads, oldest first, the entries of key's queue that decide
// whether an entry of mode m (and limit n) created at revision rev is
// admitted: for an exclusive entry the first of the queue, for a permit the
// first n, and for a shared entry every entry up to its own, with their
// values (the reader is admitted if none of them is exclusive). A rev of 0
// reads the queue as a transaction that creates the entry sees it: the
// entry is then the last. keysOnly leaves out the values where admission
// does not need them.
func (d *Driver) aheadOp(key string, m driver.Mode, n int, rev int64, keysOnly bool) clientv3.Op {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}
	switch m {
	case driver.Exclusive:
		opts = append(opts, clientv3.WithLimit(1))
	case driver.Semaphore:
		opts = append(opts, clientv3.WithLimit(int64(n)))
	default:
		keysOnly = false
		if rev > 0 {
			opts = append(opts, clientv3.WithMaxCreateRev(rev))
		}
	}
	if keysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	return clientv3.OpGet(d.queuePrefix(key), opts...)
}

// rangeKVs returns the entries a range response read.
func rangeKVs(r *pb.ResponseOp) []*mvccpb.KeyValue { return r.GetResponseRange().GetKvs() }

// firstKV returns the entry a firstOp read, or nil if the queue was empty.
func firstKV(r *pb.ResponseOp) *mvccpb.KeyValue {
	if kvs := rangeKVs(r); len(kvs) > 0 {
		return kvs[0]
	}
	return nil
}

// admits reports whether the entries an aheadOp read for an entry of mode m
// admit the entry name.
func admits(kvs []*mvccpb.KeyValue, name string, m driver.Mode) bool {
	i := slices.IndexFunc(kvs, func(kv *mvccpb.KeyValue) bool { return string(kv.Key) == name })
	switch {
	case i < 0:
		return false // not among the first (exclusive) or the first n (permit)
	case m == driver.Shared:
		return !slices.ContainsFunc(kvs[:i], func(kv *mvccpb.KeyValue) bool { return decode(kv).mode() == driver.Exclusive })
	case m == driver.Exclusive:
		return i == 0
	}
	return true
}

// elsewhere returns an entry among kvs (read by an aheadOp, with values)
// other than name that belongs to owner and holds the key, or nil.
func elsewhere(kvs []*mvccpb.KeyValue, name, owner string) *mvccpb.KeyValue {
	for i, kv := range kvs {
		if string(kv.Key) != name && ownerOf(kv) == owner && admitted(kvs, i) {
			return kv
		}
	}
	return nil
}
