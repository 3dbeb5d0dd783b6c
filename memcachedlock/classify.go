package memcachedlock

import (
	"errors"

	"github.com/bradfitz/gomemcache/memcache"
)

// Permanent implements driver.Classifier. memcached has no authentication
// or schema to refuse, so few of its errors are permanent: the client has
// no server to talk to (its server list is empty), or it refused a key as
// malformed. A server that does not answer, a full cache and a CAS
// conflict are transient.
func (d *Driver) Permanent(err error) bool { return permanent(err) }

func permanent(err error) bool {
	return errors.Is(err, memcache.ErrNoServers) || errors.Is(err, memcache.ErrMalformedKey)
}
