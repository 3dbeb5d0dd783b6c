package etcddlock

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/urlutil"
)

func init() {
	dlock.Register("etcd", open, (*Driver)(nil)) // Permanent looks at the error alone
}

// Defaults of clients opened from a URL.
const (
	defaultPort        = "2379"
	defaultDialTimeout = 5 * time.Second
	// keepAliveTime and keepAliveTimeout are the gRPC keepalive of the
	// client's connections: a connection with requests in flight that
	// has received nothing for keepAliveTime is pinged, and closed if the
	// ping goes unanswered for keepAliveTimeout, so that a member that
	// hangs loses its requests and streams (the lessor's keep-alive, the
	// watches) to the other members. keepAliveTime is gRPC's minimum.
	keepAliveTime    = 10 * time.Second
	keepAliveTimeout = 3 * time.Second
)

// open opens etcd://[user:password@]host:port[,host:port...][?session=&prefix=&connect_timeout=&tls=&cacert=&cert=&key=&servername=&insecure_auth=].
func open(ctx context.Context, u *url.URL) (driver.Driver, error) {
	if p := strings.Trim(u.Path, "/"); p != "" {
		return nil, urlutil.Error(u, "has a path (%q); write etcd://host:port[,host:port] and give a key prefix with ?prefix=", u.Path)
	}
	hosts, err := urlutil.Hosts(u, defaultPort)
	if err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		return nil, urlutil.Error(u, "names no server")
	}
	q := u.Query()
	if err := urlutil.ConnectTimeout(u, q, "dial-timeout"); err != nil {
		return nil, err
	}
	tlsCfg, err := urlutil.TLS(u, q, false)
	if err != nil {
		return nil, err
	}
	cfg := clientv3.Config{
		Endpoints:            hosts,
		DialTimeout:          defaultDialTimeout,
		DialKeepAliveTime:    keepAliveTime,
		DialKeepAliveTimeout: keepAliveTimeout,
		Logger:               zap.NewNop(),
		TLS:                  tlsCfg,
	}
	user, password, err := urlutil.Password(u, q, tlsCfg != nil)
	if err != nil {
		return nil, err
	}
	cfg.Username, cfg.Password = user, password
	var opts []Option
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "session":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, urlutil.Error(u, "session=%q is not a positive duration (write 15s, 1m)", v)
			}
			opts = append(opts, WithSessionTTL(d))
		case "prefix":
			opts = append(opts, WithPrefix(v))
		case "dial-timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, urlutil.Error(u, "dial-timeout=%q is not a positive duration (write 500ms, 5s)", v)
			}
			cfg.DialTimeout = d
		default:
			return nil, urlutil.Error(u, "unknown parameter %q (etcd URLs take session, prefix, connect_timeout (or dial-timeout), %s, tls, cacert, cert, key and servername)", k, urlutil.ParamInsecureAuth)
		}
	}
	// Check the options before dialing.
	if _, err := configure(opts); err != nil {
		return nil, err
	}
	conn := urlutil.Connect{Endpoints: hosts, TLS: tlsCfg, Timeout: cfg.DialTimeout,
		TimeoutParam: urlutil.ParamConnectTimeout, TLSHint: "add tls=true or cacert= to the URL"}
	var d *Driver
	err = conn.Do(ctx, func(ctx context.Context) error {
		if tlsCfg != nil {
			if err := urlutil.CheckTLS(ctx, hosts, tlsCfg); err != nil {
				return err
			}
		}
		cli, err := clientv3.New(cfg)
		if err != nil {
			return err
		}
		if d, err = newDriver(cli, true, opts); err != nil {
			cli.Close()
			return err
		}
		// clientv3 dials in the background: ask once, so that a bad
		// address or bad credentials fail the Open.
		_, err = cli.Get(ctx, d.prefix, clientv3.WithCountOnly())
		return err
	})
	if err != nil {
		if d != nil {
			d.Close()
		}
		return nil, fmt.Errorf("etcddlock: connecting: %w", err)
	}
	return d, nil
}
