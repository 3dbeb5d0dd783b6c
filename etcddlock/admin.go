package etcddlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// List implements driver.Lister. It reads every entry under the prefix in one
// linearizable request and reports the entries that hold their key (the
// first entry of an exclusive lock; every reader ahead of the first writer of
// a read-write lock; the first Limit permits of a semaphore; waiters are not
// listed), with mode, limit, Info and the raw owner from the entry's value
// and, as TTL, the time left on its session lease as the server sees it (one
// LeaseTimeToLive per distinct lease). A hold with a lock delay lists once,
// through its shadow (see merge), with the time left on the shadow's lease,
// delay included, and so does a shadow whose entry has gone.
func (d *Driver) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	resp, err := d.cli.Get(ctx, d.prefix+prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("etcddlock: list %q: %w", prefix, err)
	}
	queues := map[string][]*mvccpb.KeyValue{}
	for _, kv := range resp.Kvs {
		if key, ok := d.parseEntry(string(kv.Key)); ok {
			queues[key] = append(queues[key], kv)
		}
	}
	left := map[int64]time.Duration{}
	var hs []driver.Holder
	for key, q := range queues {
		for _, kv := range holding(merge(q)) {
			ttl, ok := left[kv.Lease]
			if !ok && kv.Lease != 0 { // an entry without a lease (written by hand) lists with TTL 0
				t, err := d.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
				if err != nil && !isLeaseNotFound(err) {
					return nil, fmt.Errorf("etcddlock: list %q: %w", prefix, err)
				}
				if err == nil && t.TTL >= 0 {
					ttl = time.Duration(t.TTL) * time.Second
				} else {
					ttl = -1 // expired meanwhile
				}
				left[kv.Lease] = ttl
			}
			if ttl < 0 {
				continue
			}
			v := decode(kv)
			if v.Owner == "" {
				// A foreign entry (concurrency.Mutex, etcdctl lock)
				// lists with its etcd key as Info.
				v.Info = string(kv.Key)
			}
			if v.TTLms > 0 {
				// The session may last longer than the hold's lease,
				// which its holder renews.
				ttl = min(ttl, time.Duration(v.TTLms)*time.Millisecond)
			}
			h := driver.Holder{
				Key:   key,
				Owner: v.Owner,
				Mode:  v.mode(),
				Token: uint64(kv.CreateRevision),
				Info:  v.Info,
				TTL:   ttl,
			}
			if h.Mode == driver.Semaphore {
				h.Limit = v.Limit
			}
			hs = append(hs, h)
		}
	}
	slices.SortFunc(hs, func(a, b driver.Holder) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Token, b.Token))
	})
	return hs, nil
}

// ForceRelease implements driver.ForceReleaser: it reads the entries of key's
// queue (holders and waiters, foreign ones included, but not the entries of
// nested keys) and deletes them newest first, each if it is still the
// incarnation read, so that no waiter is admitted on the way; the holders
// among them are counted. The holders find their locks lost at their next
// renewal, and the waiters at their next attempt (a foreign client such as
// concurrency.Mutex is not told).
func (d *Driver) ForceRelease(ctx context.Context, key string) (int, error) {
	if err := d.check(); err != nil {
		return 0, err
	}
	resp, err := d.get(ctx, d.queuePrefix(key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return 0, fmt.Errorf("etcddlock: force release %q: %w", key, err)
	}
	kvs := d.own(key, resp.Kvs)
	held, n := map[int64]bool{}, 0 // the holders' CreateRevisions: whether counted
	for _, kv := range holding(merge(slices.Clone(kvs))) {
		held[kv.CreateRevision] = false
	}
	for _, kv := range slices.Backward(kvs) {
		// One transaction each (an entry and its shadow alike): etcd
		// bounds the operations of one, and a queue may be longer.
		r, _, err := d.txn(ctx, isEntry(string(kv.Key), kv.CreateRevision), clientv3.OpDelete(string(kv.Key)))
		if err != nil {
			return n, fmt.Errorf("etcddlock: force release %q: %w", key, err)
		}
		if counted, ok := held[kv.CreateRevision]; ok && !counted && r.Succeeded {
			held[kv.CreateRevision] = true
			n++
		}
	}
	return n, nil
}

// IsOwner returns a comparison that holds while l still holds its lock:
// the lock's entry exists and is the incarnation whose CreateRevision is the
// lock's token. Put it in the If of a transaction that writes the data the
// lock protects, so that the write happens only while the lock is held, in
// the same atomic step:
//
//	resp, err := cli.Txn(ctx).If(d.IsOwner(l)).Then(clientv3.OpPut(k, v)).Commit()
//	// !resp.Succeeded: the lock was lost; nothing was written
//
// This fences the write without trusting the holder's clock: a holder that
// was paused past its lease cannot write once its entry is gone, even before
// it notices the loss. Entry names are reused by later holders, so the
// comparison is on the token, never on the name alone.
//
// l must have been acquired through this driver, which knows the name of its
// entry. For a lock the driver does not know, or no longer holds by its
// records (released, expired, lost, or acquired through another driver),
// IsOwner returns a comparison that never holds: a CreateRevision below
// zero, of a key the driver never creates.
func (d *Driver) IsOwner(l *dlock.Lock) clientv3.Cmp {
	rec, ok := d.table.Get(holdID(l.Key(), l.OwnerID()))
	if !ok || rec.lost || !rec.held || uint64(rec.rev) != l.Token() {
		return clientv3.Compare(clientv3.CreateRevision(d.queuePrefix("")), "<", 0)
	}
	return clientv3.Compare(clientv3.CreateRevision(rec.name), "=", rec.rev)
}
