package etcddlock

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

func TestPermanentClassifies(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("etcddlock: acquire %q: %w", "k", err) }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{rpctypes.ErrAuthFailed, true},
		{rpctypes.ErrGRPCAuthFailed, true},
		{rpctypes.ErrPermissionDenied, true},
		{rpctypes.ErrGRPCPermissionDenied, true},
		{rpctypes.ErrUserEmpty, true},
		{rpctypes.ErrAuthNotEnabled, true},
		{rpctypes.ErrInvalidAuthToken, false},
		{rpctypes.ErrGRPCInvalidAuthToken, false},
		{rpctypes.ErrNoLeader, false},
		{rpctypes.ErrGRPCNoLeader, false},
		{rpctypes.ErrTimeout, false},
		{context.DeadlineExceeded, false},
		{errors.New("etcdserver: authentication failed, invalid user ID or password"), false},
	} {
		if got := permanent(wrap(tc.err)); got != tc.want {
			t.Errorf("permanent(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}
