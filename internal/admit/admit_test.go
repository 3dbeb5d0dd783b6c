package admit

import (
	"testing"

	"github.com/dlockhq/dlock/driver"
)

func TestCount(t *testing.T) {
	mode := func(m driver.Mode) driver.Mode { return m }
	for _, tc := range []struct {
		rows []driver.Mode
		n    int
		excl bool
	}{
		{nil, 0, false},
		{[]driver.Mode{driver.Shared, driver.Shared}, 2, false},
		{[]driver.Mode{driver.Shared, driver.Exclusive, driver.Shared}, 3, true},
		{[]driver.Mode{driver.Semaphore}, 1, false},
	} {
		if n, excl := Count(tc.rows, mode); n != tc.n || excl != tc.excl {
			t.Errorf("Count(%v) = %d, %v; want %d, %v", tc.rows, n, excl, tc.n, tc.excl)
		}
	}
}

func TestAdmits(t *testing.T) {
	var (
		free      = Key{}
		readers   = Key{Holders: 2}
		writer    = Key{Holders: 1, HolderExclusive: true}
		queued    = Key{Ahead: 1}                       // a reader or permit waits ahead
		queuedW   = Key{Ahead: 1, AheadExclusive: true} // a writer waits ahead
		readersQW = Key{Holders: 2, Ahead: 1, AheadExclusive: true}
		permits   = Key{Holders: 2, Ahead: 1}
	)
	for _, tc := range []struct {
		name         string
		k            Key
		m            driver.Mode
		limit        int
		fair, unfair bool // the answers with fair set and not
	}{
		{"exclusive on a free key", free, driver.Exclusive, 0, true, true},
		{"exclusive behind readers", readers, driver.Exclusive, 0, false, false},
		{"exclusive behind a writer", writer, driver.Exclusive, 0, false, false},
		{"exclusive behind a waiter", queued, driver.Exclusive, 0, false, true},
		{"shared on a free key", free, driver.Shared, 0, true, true},
		{"shared beside readers", readers, driver.Shared, 0, true, true},
		{"shared behind a writer", writer, driver.Shared, 0, false, false},
		{"shared behind a waiting reader", queued, driver.Shared, 0, true, true},
		{"shared behind a waiting writer", queuedW, driver.Shared, 0, false, false},
		{"shared beside readers, a writer waiting", readersQW, driver.Shared, 0, false, false},
		{"semaphore with room", readers, driver.Semaphore, 3, true, true},
		{"semaphore with room but a waiter", permits, driver.Semaphore, 3, false, true},
		{"semaphore full", readers, driver.Semaphore, 2, false, false},
		{"semaphore of one on a free key", free, driver.Semaphore, 1, true, true},
	} {
		if got := tc.k.Admits(tc.m, tc.limit, true); got != tc.fair {
			t.Errorf("%s, fair: %v; want %v", tc.name, got, tc.fair)
		}
		if got := tc.k.Admits(tc.m, tc.limit, false); got != tc.unfair {
			t.Errorf("%s, not fair: %v; want %v", tc.name, got, tc.unfair)
		}
	}
}
