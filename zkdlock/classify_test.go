package zkdlock

import (
	"fmt"
	"testing"

	"github.com/go-zookeeper/zk"
)

func TestPermanentClassifies(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{zk.ErrNoAuth, true},
		{zk.ErrAuthFailed, true},
		{zk.ErrInvalidACL, true},
		{zk.ErrConnectionClosed, false},
		{zk.ErrSessionExpired, false},
		{zk.ErrNoServer, false},
		{zk.ErrNodeExists, false},
	} {
		if got := permanent(fmt.Errorf("zkdlock: acquire %q: %w", "k", tc.err)); got != tc.want {
			t.Errorf("permanent(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}
