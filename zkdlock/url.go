package zkdlock

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/urlutil"
)

func init() {
	dlock.Register("zk", open, (*Driver)(nil)) // Permanent looks at the error alone
}

// defaultPort is ZooKeeper's client port.
const defaultPort = "2181"

// ACL choices of the acl URL parameter.
const (
	// aclOpen gives every permission to anyone (zk.WorldACL).
	aclOpen = "open"
	// aclCreator gives every permission to the session's identities
	// (zk.AuthACL), ZooKeeper's CREATOR_ALL_ACL.
	aclCreator = "creator"
)

// open opens zk://[user:password@]host:port[,host:port...][/chroot][?session=&linger=&curator=&prefix=&acl=&connect_timeout=&tls=&cacert=&cert=&key=&servername=&insecure_auth=]
// and waits until the server has answered a request, at most
// connect_timeout (a Go duration, 5s by default).
func open(ctx context.Context, u *url.URL) (driver.Driver, error) {
	hosts, err := urlutil.Hosts(u, defaultPort)
	if err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		return nil, urlutil.Error(u, "names no server")
	}
	chroot := strings.TrimSuffix(u.Path, "/")
	if chroot != "" {
		if why := checkPath(chroot); why != "" {
			return nil, urlutil.Error(u, "chroot %q %s", u.Path, why)
		}
	}
	q := u.Query()
	tlsCfg, err := urlutil.TLS(u, q, false)
	if err != nil {
		return nil, err
	}
	user, password, err := urlutil.Password(u, q, tlsCfg != nil)
	if err != nil {
		return nil, err
	}
	if strings.Contains(user, ":") {
		return nil, urlutil.Error(u, "user name %q has a colon, which digest authentication cannot carry", user)
	}
	prefix := DefaultPrefix
	acls := aclOpen
	if user != "" {
		acls = aclCreator
	}
	var opts []Option
	conn := urlutil.Connect{Endpoints: hosts, TLS: tlsCfg, Timeout: urlutil.DefaultConnectTimeout,
		TimeoutParam: urlutil.ParamConnectTimeout, TLSHint: "add tls=true or cacert= to the URL"}
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "session":
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Millisecond {
				return nil, urlutil.Error(u, "session=%q is not a positive duration (write 15s, 1m)", v)
			}
			opts = append(opts, WithSessionTTL(d))
		case "linger":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return nil, urlutil.Error(u, "linger=%q is not a duration of zero or more (write 1s, 500ms, 0)", v)
			}
			opts = append(opts, WithParentLinger(d))
		case "curator":
			switch v {
			case CuratorMutex.String():
				opts = append(opts, WithCuratorLayout(CuratorMutex))
			case CuratorReadWriteLock.String():
				opts = append(opts, WithCuratorLayout(CuratorReadWriteLock))
			default:
				return nil, urlutil.Error(u, "curator=%q is not a layout (write mutex or rwlock)", v)
			}
		case "prefix":
			if why := checkPath(v); why != "" {
				return nil, urlutil.Error(u, "prefix=%q %s", v, why)
			}
			prefix = v
		case "acl":
			if v != aclOpen && v != aclCreator {
				return nil, urlutil.Error(u, "acl=%q is not an ACL (write %s or %s)", v, aclOpen, aclCreator)
			}
			acls = v
		case urlutil.ParamConnectTimeout:
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, urlutil.Error(u, "%s=%q is not a positive duration (write 500ms, 5s)", k, v)
			}
			conn.Timeout = d
		default:
			return nil, urlutil.Error(u, "unknown parameter %q (zk URLs take session, linger, curator, prefix, acl, %s, %s, tls, cacert, cert, key and servername)", k, urlutil.ParamConnectTimeout, urlutil.ParamInsecureAuth)
		}
	}
	opts = append(opts, WithPrefix(chroot+prefix))
	switch {
	case acls == aclCreator && user == "" && (tlsCfg == nil || len(tlsCfg.Certificates) == 0):
		return nil, urlutil.Error(u, "acl=%s without user:password or a client certificate: the znodes would belong to no one", aclCreator)
	case acls == aclCreator:
		opts = append(opts, WithACL(zk.AuthACL(zk.PermAll)))
	}
	if user != "" {
		opts = append(opts, WithAuth("digest", []byte(user+":"+password)))
	}
	if tlsCfg != nil {
		opts = append(opts, WithDialer(tlsDialer(tlsCfg)))
	}
	d, err := New(hosts, opts...)
	if err != nil {
		return nil, err
	}
	err = conn.Do(ctx, func(ctx context.Context) error {
		if tlsCfg != nil {
			// A certificate that does not verify fails the Open at
			// once; go-zookeeper would dial again and again until the
			// connect timeout.
			if err := urlutil.CheckTLS(ctx, hosts, tlsCfg); err != nil {
				return err
			}
		}
		return call(ctx, d, func() error {
			_, _, err := d.conn.Exists("/")
			return err
		})
	})
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("zkdlock: connecting: %w", err)
	}
	return d, nil
}

// tlsDialer returns a zk.Dialer that connects over TLS with cfg, the
// handshake included in the timeout.
func tlsDialer(cfg *tls.Config) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: cfg}
		return d.Dial(network, address)
	}
}
