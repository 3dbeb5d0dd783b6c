package etcddlock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// queuePrefix returns the prefix of the entries of key's queue: the driver's
// prefix, the key and a slash, as etcd's concurrency.Mutex names the keys of a
// lock (its name followed by a slash and its session's lease in hex). The
// entries of a nested key ("a/b" under "a") share the prefix; entries names
// have no slash, so the driver tells them apart (see own).
func (d *Driver) queuePrefix(key string) string { return d.prefix + key + "/" }

// permitTag starts the names of permits after the queue prefix. No dlock key
// contains a NUL byte, so no nested key's entries fall in the range of
// permits: a transaction can compare it (see modeGuard).
const permitTag = "\x00s"

// entryName returns the etcd key of the exclusive or shared entry of key's
// queue that has slot n of lease: the queue prefix and the lease ID in hex,
// followed for a slot above 0 by a dot and the slot in hex. Slot 0 is the
// name concurrency.Mutex gives the lock of a session of that lease. Only the
// driver that holds the lease creates names with it.
func (d *Driver) entryName(key string, lease clientv3.LeaseID, n uint32) string {
	if n == 0 {
		return fmt.Sprintf("%s%x", d.queuePrefix(key), uint64(lease))
	}
	return fmt.Sprintf("%s%x.%x", d.queuePrefix(key), uint64(lease), n)
}

// permitName is entryName for a permit of a semaphore with limit n: the
// permits' prefix semPrefix(key, limit) followed by the lease and slot in
// hex. Permits of one limit share that prefix, and the permits of all limits
// the prefix queuePrefix(key)+permitTag, which no other entry of key or of a
// nested key has (see modeGuard).
func (d *Driver) permitName(key string, limit int, lease clientv3.LeaseID, n uint32) string {
	return fmt.Sprintf("%s%016x.%08x", d.semPrefix(key, limit), uint64(lease), n)
}

// semPrefix returns the prefix of the names of the permits of key's
// semaphore with the given limit.
func (d *Driver) semPrefix(key string, limit int) string {
	return fmt.Sprintf("%s%s%016x.", d.queuePrefix(key), permitTag, uint64(limit))
}

// own keeps, in place, the entries of kvs (read under key's queue prefix)
// that are entries of key's queue: those with no slash after the prefix. The
// others are entries of nested keys ("a/b/..." under "a/"), which the
// driver's key "a" does not wait for.
func (d *Driver) own(key string, kvs []*mvccpb.KeyValue) []*mvccpb.KeyValue {
	n := len(d.queuePrefix(key))
	return slices.DeleteFunc(kvs, func(kv *mvccpb.KeyValue) bool {
		return len(kv.Key) <= n || bytes.IndexByte(kv.Key[n:], '/') >= 0
	})
}

// shadowSuffix ends the name of an entry's shadow: a copy of an entry with a
// lock delay (Request.LockDelay), created in the transaction that creates
// the entry, hence with its CreateRevision and its place in the queue, and
// attached to a lease of the session that outlives the session lease by the
// delay (see Driver.delayLease). Every waiter, dlock's and etcd's
// concurrency.Mutex alike, waits for the shadow as it waits for the entry:
// a Release deletes both, while an entry that ends otherwise (its session
// ended, or its lease ran out: see expire) leaves the shadow to keep the
// key for the delay. No entry name ends with it (names end with hex digits).
const shadowSuffix = "~delay"

func shadowOf(name string) string { return name + shadowSuffix }

// merge keeps, in place, one entry of kvs (entries of one queue, in
// CreateRevision order) per CreateRevision: the shadow of an entry that has
// one, which lasts at least as long as the entry and stands for it in the
// queue.
func merge(kvs []*mvccpb.KeyValue) []*mvccpb.KeyValue {
	out := kvs[:0]
	for _, kv := range kvs {
		if n := len(out); n > 0 && out[n-1].CreateRevision == kv.CreateRevision {
			if bytes.HasSuffix(kv.Key, []byte(shadowSuffix)) {
				out[n-1] = kv
			}
			continue
		}
		out = append(out, kv)
	}
	return out
}

// holdID identifies the hold of the owner with dlock.OwnerID ownerID on key in
// the driver's table. Entry names are
// reused by later owners, so the driver keeps its records by owner.
func holdID(key, ownerID string) string { return key + "\x00" + ownerID }

func reqID(req driver.Request) string { return holdID(req.Key, dlock.OwnerID(req.Owner)) }

// parseEntry returns the dlock key of an entry's etcd key: what lies between
// the prefix and the last slash, which must be followed by an entry name.
func (d *Driver) parseEntry(k string) (key string, ok bool) {
	rest, ok := strings.CutPrefix(k, d.prefix)
	i := strings.LastIndexByte(rest, '/')
	if !ok || i <= 0 || i == len(rest)-1 {
		return "", false
	}
	return rest[:i], true
}

// slot is an entry name of a session, in use by one owner of the driver from
// claim until the driver knows that the entry is gone from the store (it was
// released, or expired and deleted, or found missing, or the Acquire that
// claimed it created nothing). A driver normally has one owner per key at a
// time, so it creates the same name, slot 0 of its session, over and over:
// etcd then keeps one key in its index per session and lock rather than one
// per acquisition (deleted keys stay in the index, and range reads of the
// queue walk them, until the next compaction).
type slot struct {
	name  string
	key   string
	n     uint32
	sess  *session
	freed atomic.Bool
}

// claim returns the lowest slot of key on s that no owner of the driver uses,
// named for an entry of mode m (and limit n, for a semaphore).
func (d *Driver) claim(s *session, key string, m driver.Mode, limit int) *slot {
	s.slotMu.Lock()
	defer s.slotMu.Unlock()
	if s.slots == nil {
		s.slots = map[string][]uint64{}
	}
	used := s.slots[key]
	i := 0
	for i < len(used) && used[i] == ^uint64(0) {
		i++
	}
	if i == len(used) {
		used = append(used, 0)
	}
	b := bits.TrailingZeros64(^used[i])
	used[i] |= 1 << b
	s.slots[key] = used
	n := uint32(i*64 + b)
	name := d.entryName(key, s.id, n)
	if m == driver.Semaphore {
		name = d.permitName(key, limit, s.id, n)
	}
	return &slot{name: name, key: key, n: n, sess: s}
}

// free hands the slot back for reuse; only the first call counts. A nil slot
// (of a tombstone) is ignored.
func (sl *slot) free() {
	if sl == nil || !sl.freed.CompareAndSwap(false, true) {
		return
	}
	s := sl.sess
	s.slotMu.Lock()
	defer s.slotMu.Unlock()
	used := s.slots[sl.key]
	used[sl.n/64] &^= 1 << (sl.n % 64)
	for len(used) > 0 && used[len(used)-1] == 0 {
		used = used[:len(used)-1]
	}
	if len(used) == 0 {
		delete(s.slots, sl.key)
	} else {
		s.slots[sl.key] = used
	}
}

// value is an entry's value: the raw owner (Lister reports it), the
// holder's Info, the mode of the entry: "shared" or "semaphore" (with its
// limit), or nothing for an exclusive entry, and the lease the hold was
// acquired with. A downgrade rewrites it.
type value struct {
	Owner string `json:"owner"`
	Info  string `json:"info,omitempty"`
	Mode  string `json:"mode,omitempty"`
	Limit int    `json:"limit,omitempty"`
	// TTLms is the lease the hold was acquired with, in milliseconds (zero
	// in entries of older drivers): Lister reports no more than it.
	TTLms int64 `json:"ttl_ms,omitempty"`
}

func encodeValue(owner, info string, m driver.Mode, limit int, ttl time.Duration) string {
	v := value{Owner: owner, Info: info, TTLms: ttl.Milliseconds()}
	if m != driver.Exclusive {
		v.Mode = m.String()
	}
	if m == driver.Semaphore {
		v.Limit = limit
	}
	b, _ := json.Marshal(v) // strings always marshal
	return string(b)
}

// decode returns an entry's value. A foreign value (concurrency.Mutex's and
// etcdctl lock's are empty; anything without an owner is foreign) decodes as
// an exclusive entry of nobody: it keeps readers and permits out rather than
// letting them in.
func decode(kv *mvccpb.KeyValue) value {
	var v value
	if kv != nil && json.Unmarshal(kv.Value, &v) == nil && v.Owner != "" {
		return v
	}
	return value{}
}

// mode returns the mode the value records.
func (v value) mode() driver.Mode {
	switch v.Mode {
	case driver.Shared.String():
		return driver.Shared
	case driver.Semaphore.String():
		return driver.Semaphore
	}
	return driver.Exclusive
}

// ownerOf returns the raw owner in an entry's value ("" for a foreign value
// or a nil entry).
func ownerOf(kv *mvccpb.KeyValue) string { return decode(kv).Owner }

// isEntry compares an entry with one incarnation of it: the entry name exists
// and was created at revision rev.
//
// Names are reused, so a name alone does not say whose entry it is: after an
// owner's entry is gone, a later owner of the same driver and key may create
// the same name again. Every transaction that checks, refreshes or deletes an
// entry on behalf of an owner therefore compares its CreateRevision, the
// incarnation: etcd gives each creation of a key the revision of its
// transaction, so no two incarnations of a name share one, and a late
// Release, Refresh or expiry of an earlier owner finds the newer entry
// different and leaves it alone. (The value, which names the owner, is not
// compared: a downgrade rewrites it within one incarnation.)
func isEntry(name string, rev int64) []clientv3.Cmp {
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(name), "=", rev)}
}
