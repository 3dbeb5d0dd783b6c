package zkdlock

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/redact"
	"github.com/dlockhq/dlock/internal/urlutil"
)

func init() {
	dlock.Register("zk", open)
}

// defaultPort is ZooKeeper's client port.
const defaultPort = "2181"

func urlError(u *url.URL, format string, args ...any) error {
	return urlutil.Error(u, format, args...)
}

// open opens zk://host:port[,host:port...][/chroot][?session=&linger=&prefix=] and
// waits until the server has answered a request.
func open(ctx context.Context, u *url.URL) (driver.Driver, error) {
	if u.User != nil {
		return nil, urlError(u, "has user information; the driver does not authenticate to ZooKeeper")
	}
	hosts, err := urlutil.Hosts(u, defaultPort)
	if err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		return nil, urlError(u, "names no server")
	}
	chroot := strings.TrimSuffix(u.Path, "/")
	if chroot != "" {
		if why := checkPath(chroot); why != "" {
			return nil, urlError(u, "chroot %q %s", u.Path, why)
		}
	}
	prefix := DefaultPrefix
	var opts []Option
	for k, vs := range u.Query() {
		v := vs[len(vs)-1]
		switch k {
		case "session":
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Millisecond {
				return nil, urlError(u, "session=%q is not a positive duration (write 15s, 1m)", v)
			}
			opts = append(opts, WithSessionTTL(d))
		case "linger":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return nil, urlError(u, "linger=%q is not a duration of zero or more (write 1s, 500ms, 0)", v)
			}
			opts = append(opts, WithParentLinger(d))
		case "curator":
			switch v {
			case CuratorMutex.String():
				opts = append(opts, WithCuratorLayout(CuratorMutex))
			case CuratorReadWriteLock.String():
				opts = append(opts, WithCuratorLayout(CuratorReadWriteLock))
			default:
				return nil, urlError(u, "curator=%q is not a layout (write mutex or rwlock)", v)
			}
		case "prefix":
			if why := checkPath(v); why != "" {
				return nil, urlError(u, "prefix=%q %s", v, why)
			}
			prefix = v
		default:
			return nil, urlError(u, "unknown parameter %q (zk URLs take session, linger, curator and prefix)", k)
		}
	}
	opts = append(opts, WithPrefix(chroot+prefix))
	d, err := New(hosts, opts...)
	if err != nil {
		return nil, err
	}
	err = call(ctx, d, func() error {
		_, _, err := d.conn.Exists("/")
		return err
	})
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("zkdlock: connecting to %s: %w", redact.URL(u), err)
	}
	return d, nil
}
