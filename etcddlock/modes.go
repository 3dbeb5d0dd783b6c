package etcddlock

import (
	"fmt"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock/driver"
)

// modeGuard returns the comparisons that hold when key's queue has no permit
// that a new entry of mode m (and limit n) could not share the key with: for
// a lock (Exclusive or Shared) no permit at all, for a permit none of another
// limit. They compare the CreateRevision of name ranges that hold only
// permits (which is 0 for a range without keys; see permitTag), so they hold
// for an empty queue and cost the server a walk of ranges that are empty on
// a key used consistently. A permit's clash with a lock entry ahead of it is
// found by the read of the transaction that creates it (see clash).
func (d *Driver) modeGuard(key string, m driver.Mode, n int) []clientv3.Cmp {
	sem := d.queuePrefix(key) + permitTag
	if m != driver.Semaphore {
		return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(sem), "=", 0).WithPrefix()}
	}
	mine := d.semPrefix(key, n)
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(sem), "=", 0).WithRange(mine),
		clientv3.Compare(clientv3.CreateRevision(clientv3.GetPrefixRangeEnd(mine)), "=", 0).WithRange(clientv3.GetPrefixRangeEnd(sem)),
	}
}

// admitted reports whether the entry at index i of kvs, entries of one queue
// in CreateRevision order starting with its first, may hold the key: an
// exclusive entry if it is first, a shared one if no exclusive entry is
// ahead of it, a permit if fewer than its limit are ahead and all of them are
// permits. A foreign entry counts as exclusive (see decode).
func admitted(kvs []*mvccpb.KeyValue, i int) bool {
	v := decode(kvs[i])
	switch v.mode() {
	case driver.Shared:
		return !slices.ContainsFunc(kvs[:i], isExclusive)
	case driver.Semaphore:
		return i < v.Limit && !slices.ContainsFunc(kvs[:i], isLock)
	}
	return i == 0
}

func isExclusive(kv *mvccpb.KeyValue) bool { return decode(kv).mode() == driver.Exclusive }
func isLock(kv *mvccpb.KeyValue) bool      { return decode(kv).mode() != driver.Semaphore }

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

// clash returns an entry of this driver's format among kvs that a request of
// mode m and limit n cannot share the key with (a permit for a lock; a lock
// entry or a permit of another limit for a permit), or nil. Foreign entries
// clash with nothing: they are exclusive contenders.
func clash(kvs []*mvccpb.KeyValue, m driver.Mode, n int) *mvccpb.KeyValue {
	for _, kv := range kvs {
		v := decode(kv)
		if v.Owner != "" && ((v.mode() == driver.Semaphore) != (m == driver.Semaphore) || m == driver.Semaphore && v.Limit != n) {
			return kv
		}
	}
	return nil
}

func mismatch(key string, kv *mvccpb.KeyValue, m driver.Mode, n int) error {
	v := decode(kv)
	return fmt.Errorf("etcddlock: %q is in use as %s (limit %d), asked for %s (limit %d): %w",
		key, v.mode(), v.Limit, m, n, driver.ErrModeMismatch)
}

// aheadOp reads, oldest first, the entries of key's queue created up to
// revision rev, which decide whether the entry created at rev is admitted
// (with a rev of 0, the whole queue, as a transaction that creates the entry
// sees it: the entry is then the last). The read covers the entries of
// nested keys too, which own drops: etcd cannot filter them out, nor does a
// limit help, since the server sorts the whole range by CreateRevision
// anyway. keysOnly leaves out the values, for an exclusive entry, whose
// admission does not need them.
func (d *Driver) aheadOp(key string, rev int64, keysOnly bool) clientv3.Op {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}
	if rev > 0 {
		opts = append(opts, clientv3.WithMaxCreateRev(rev))
	}
	if keysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	return clientv3.OpGet(d.queuePrefix(key), opts...)
}

// queue returns the entries of key's queue among those a range response
// read (see own), one per place in the queue (see merge).
func (d *Driver) queue(key string, r *pb.ResponseOp) []*mvccpb.KeyValue {
	return merge(d.own(key, r.GetResponseRange().GetKvs()))
}

// admits reports whether the entries an aheadOp read (see queue) admit the
// entry created at revision rev (whose value they must hold, unless it is
// exclusive).
func admits(kvs []*mvccpb.KeyValue, rev int64) bool {
	i := slices.IndexFunc(kvs, func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision == rev })
	return i >= 0 && admitted(kvs, i)
}

// elsewhere returns an entry among kvs (read by an aheadOp, with values)
// other than the one created at rev that belongs to owner and holds the
// key, or nil.
func elsewhere(kvs []*mvccpb.KeyValue, rev int64, owner string) *mvccpb.KeyValue {
	for i, kv := range kvs {
		if kv.CreateRevision != rev && ownerOf(kv) == owner && admitted(kvs, i) {
			return kv
		}
	}
	return nil
}
