package memcachedlock

import (
	"fmt"
	"testing"

	"github.com/bradfitz/gomemcache/memcache"
)

func TestPermanentClassifies(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{memcache.ErrNoServers, true},
		{memcache.ErrMalformedKey, true},
		{memcache.ErrServerError, false},
		{memcache.ErrCASConflict, false},
		{memcache.ErrCacheMiss, false},
		{&memcache.ConnectTimeoutError{}, false},
	} {
		if got := permanent(fmt.Errorf("memcachedlock: acquire %q: %w", "k", tc.err)); got != tc.want {
			t.Errorf("permanent(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}
