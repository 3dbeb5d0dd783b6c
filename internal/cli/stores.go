package cli

// The stores the dlock command can use, registered by URL scheme.
import (
	_ "github.com/dlockhq/dlock/memcachedlock" // memcached
	_ "github.com/dlockhq/dlock/quorum"        // redlock
	_ "github.com/dlockhq/dlock/redisdlock"    // redis, rediss, redis+sentinel, redis+cluster
	_ "github.com/dlockhq/dlock/sqldlock"      // sqlite, postgres, postgresql, mysql
)
