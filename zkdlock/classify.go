package zkdlock

import (
	"errors"

	"github.com/go-zookeeper/zk"
)

// Permanent implements driver.Classifier. A ZooKeeper error is permanent
// when asking again cannot change the answer while the ensemble stays as
// it is: the server refused the client's authentication, or the ACL of
// the lock's nodes (or of their parent path) does not let the client in.
// A lost connection or an expired session is transient.
func (d *Driver) Permanent(err error) bool { return permanent(err) }

func permanent(err error) bool {
	return errors.Is(err, zk.ErrNoAuth) || errors.Is(err, zk.ErrAuthFailed) || errors.Is(err, zk.ErrInvalidACL)
}
