package etcddlock

import (
	"errors"
	"slices"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/status"
)

// Permanent implements driver.Classifier. An etcd error is permanent when
// asking again cannot change the answer while the cluster stays as it is:
// the server refused the user or password, the user or its role does not
// exist, the user lacks the permission, or the client sends credentials to
// a cluster without authentication. An expired auth token (which the
// client renews), a missing leader, a timeout or an unreachable member are
// transient.
func (d *Driver) Permanent(err error) bool { return permanent(err) }

// permanentErrs are etcd's permanent errors, as the client returns them.
var permanentErrs = []error{
	rpctypes.ErrAuthFailed,
	rpctypes.ErrPermissionDenied,
	rpctypes.ErrUserEmpty,
	rpctypes.ErrUserNotFound,
	rpctypes.ErrRoleNotFound,
	rpctypes.ErrAuthNotEnabled,
}

func permanent(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return slices.Contains(permanentErrs, error(ee))
	}
	// A gRPC status the client did not turn into an EtcdError.
	var gs interface {
		error
		GRPCStatus() *status.Status
	}
	if errors.As(err, &gs) {
		ee, ok := rpctypes.Error(gs).(rpctypes.EtcdError)
		return ok && slices.Contains(permanentErrs, error(ee))
	}
	return false
}
