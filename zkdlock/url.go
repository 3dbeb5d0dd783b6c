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
	q := u.Query()
	tlsCfg, err := urlutil.TLS(u, q, false)
	if err != nil {
		return nil, err
	}
	conn := urlutil.Connect{Endpoints: hosts, TLS: tlsCfg, Timeout: urlutil.DefaultConnectTimeout,
		TimeoutParam: urlutil.ParamConnectTimeout, TLSHint: "add tls=true or cacert= to the URL"}
	cfg, err := urlConfig(u, q, tlsCfg, &conn.Timeout)
	if err != nil {
		return nil, err
	}
	d, err := New(hosts, func(c *config) { *c = cfg })
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

// urlConfig returns the driver's configuration by the URL u, whose query q
// has lost its TLS parameters to tlsCfg, and sets *timeout to its connect
// timeout, if it has one.
func urlConfig(u *url.URL, q url.Values, tlsCfg *tls.Config, timeout *time.Duration) (config, error) {
	cfg := defaults
	chroot := strings.TrimSuffix(u.Path, "/")
	if why := checkPath(chroot); chroot != "" && why != "" {
		return cfg, urlutil.Error(u, "chroot %q %s", u.Path, why)
	}
	user, password, err := urlutil.Password(u, q, tlsCfg != nil)
	if err != nil {
		return cfg, err
	}
	if strings.Contains(user, ":") {
		return cfg, urlutil.Error(u, "user name %q has a colon, which digest authentication cannot carry", user)
	}
	creator := user != ""
	err = urlutil.Params(u, q, map[string]func(string) string{
		"session":                   urlutil.Duration(&cfg.ttl, time.Millisecond, "15s, 1m"),
		"linger":                    urlutil.Duration(&cfg.linger, 0, "1s, 500ms, 0"),
		"curator":                   urlutil.OneOf(&cfg.layout, "a layout", map[string]Layout{CuratorMutex.String(): CuratorMutex, CuratorReadWriteLock.String(): CuratorReadWriteLock}),
		"prefix":                    func(v string) string { cfg.prefix = v; return checkPath(v) },
		"acl":                       urlutil.OneOf(&creator, "an ACL", map[string]bool{aclOpen: false, aclCreator: true}),
		urlutil.ParamConnectTimeout: urlutil.Duration(timeout, 1, "500ms, 5s"),
	}, "zk URLs take session, linger, curator, prefix, acl, "+urlutil.ParamConnectTimeout+", "+urlutil.ParamInsecureAuth+", tls, cacert, cert, key and servername")
	if err != nil {
		return cfg, err
	}
	cfg.prefix = chroot + cfg.prefix
	if user != "" {
		cfg.auth = []credential{{"digest", []byte(user + ":" + password)}}
	}
	if tlsCfg != nil {
		cfg.dial = tlsDialer(tlsCfg)
	}
	switch {
	case !creator:
	case user == "" && (tlsCfg == nil || len(tlsCfg.Certificates) == 0):
		return cfg, urlutil.Error(u, "acl=%s without user:password or a client certificate: the znodes would belong to no one", aclCreator)
	default:
		cfg.acl = zk.AuthACL(zk.PermAll)
	}
	return cfg, nil
}

// tlsDialer returns a zk.Dialer that connects over TLS with cfg, the
// handshake included in the timeout.
func tlsDialer(cfg *tls.Config) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: cfg}
		return d.Dial(network, address)
	}
}
