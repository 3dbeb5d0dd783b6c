package cli

// The stores the dlock command can use, registered by URL scheme.
import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	_ "github.com/dlockhq/dlock/etcddlock"         // etcd
	_ "github.com/dlockhq/dlock/memcachedlock"     // memcached
	_ "github.com/dlockhq/dlock/natsdlock"         // nats
	_ "github.com/dlockhq/dlock/quorum"            // redlock, redlocks
	_ "github.com/dlockhq/dlock/redisdlock"        // redis, rediss, redis+sentinel, redis+cluster
	_ "github.com/dlockhq/dlock/sqldlock/mysql"    // mysql
	_ "github.com/dlockhq/dlock/sqldlock/postgres" // postgres, postgresql
	_ "github.com/dlockhq/dlock/sqldlock/sqlite"   // sqlite
	_ "github.com/dlockhq/dlock/zkdlock"           // zk
)

// routeStoreLogs sends what the store client libraries log on their own
// (go-redis prints every failed dial to stderr) to the --verbose log, so that
// a store that is down gives one clear message instead of a stream of lines.
func routeStoreLogs(l *slog.Logger) { redis.SetLogger(redisLog{l}) }

// redisLog adapts a slog.Logger to go-redis's logger interface.
type redisLog struct{ l *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.l.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}
