package zkdlock

import (
	"errors"

	"github.com/go-zookeeper/zk"
)

// Permanent implements driver.Classifier. A ZooKeeper error is permanent
// when asking again cannot change the answer while the ensemble stays as
// it is: the server refused the client's authentication, the ACL of the
// lock's nodes (or of their parent path) does not let the client in, or a
// foreign lock recipe that does not see the driver's nodes uses the key's
// znode (see the package documentation, Foreign clients).
// A lost connection or an expired session is transient.
func (d *Driver) Permanent(err error) bool { return permanent(err) }

func permanent(err error) bool {
	return errors.Is(err, zk.ErrNoAuth) || errors.Is(err, zk.ErrAuthFailed) || errors.Is(err, zk.ErrInvalidACL) || errors.Is(err, errForeignRecipe)
}
