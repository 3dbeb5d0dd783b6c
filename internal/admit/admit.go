// Package admit is the rule by which a driver that keeps a key's holders and
// wait queue itself (memdlock; sqldlock's holds table) decides whether a
// request may hold the key now. The drivers read the key's state, decide
// with Key.Admits, and then write what the decision calls for.
package admit

import "github.com/dlockhq/dlock/driver"

// Key is what the decision depends on, seen from one request: the key's live
// holders other than the requester, and the live waiters queued ahead of it.
type Key struct {
	// Holders is the number of holders; HolderExclusive reports that one
	// of them holds the key Exclusive.
	Holders         int
	HolderExclusive bool
	// Ahead is the number of waiters ahead; AheadExclusive reports that
	// one of them waits for an Exclusive hold.
	Ahead          int
	AheadExclusive bool
}

// Count returns how many rows there are and whether one of them, whose mode
// mode returns, is Exclusive: the Holders and HolderExclusive (or Ahead and
// AheadExclusive) of a Key.
func Count[T any](rows []T, mode func(T) driver.Mode) (n int, exclusive bool) {
	for _, r := range rows {
		if mode(r) == driver.Exclusive {
			exclusive = true
		}
	}
	return len(rows), exclusive
}

// Admits reports whether a request of mode m (and, for a semaphore, limit)
// may hold the key now. Readers do not wait for readers, but no reader
// passes a writer, holding or waiting (writer preference). With fair set,
// the queue's order binds the other modes too: an Exclusive request waits
// for the waiters ahead of it, and a semaphore's waiters ahead count against
// its limit. Without it, they only wait for the holders.
func (k Key) Admits(m driver.Mode, limit int, fair bool) bool {
	switch m {
	case driver.Exclusive:
		return k.Holders == 0 && (!fair || k.Ahead == 0)
	case driver.Shared:
		return !k.HolderExclusive && !k.AheadExclusive
	default:
		if fair {
			return k.Holders+k.Ahead < limit
		}
		return k.Holders < limit
	}
}
