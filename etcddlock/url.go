package etcddlock

import (
	"context"
	"fmt"
	"net/url"
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
	if err := urlutil.NoPath(u, "etcd://host:port[,host:port] and give a key prefix with ?prefix="); err != nil {
		return nil, err
	}
	hosts, err := urlutil.Servers(u, defaultPort)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	if err := urlutil.ConnectTimeout(u, q, "dial-timeout"); err != nil {
		return nil, err
	}
	cfg := clientv3.Config{
		Endpoints:            hosts,
		DialTimeout:          defaultDialTimeout,
		DialKeepAliveTime:    keepAliveTime,
		DialKeepAliveTimeout: keepAliveTimeout,
		Logger:               zap.NewNop(),
	}
	if cfg.TLS, err = urlutil.TLS(u, q, false); err != nil {
		return nil, err
	}
	if cfg.Username, cfg.Password, err = urlutil.Password(u, q, cfg.TLS != nil); err != nil {
		return nil, err
	}
	opts, err := takeOptions(u, q, &cfg)
	if err != nil {
		return nil, err
	}
	conn := urlutil.Connect{Endpoints: hosts, TLS: cfg.TLS, Timeout: cfg.DialTimeout,
		TimeoutParam: urlutil.ParamConnectTimeout, TLSHint: "add tls=true or cacert= to the URL"}
	var d *Driver
	err = conn.Do(ctx, func(ctx context.Context) (err error) {
		d, err = dial(ctx, cfg, opts)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("etcddlock: connecting: %w", err)
	}
	return d, nil
}

// takeOptions reads the driver's parameters in q, and dial-timeout into
// cfg, and checks the options they make before anything is dialled.
func takeOptions(u *url.URL, q url.Values, cfg *clientv3.Config) ([]Option, error) {
	var opts []Option
	var session time.Duration
	err := urlutil.Params(u, q, map[string]func(string) string{
		"session":      urlutil.Duration(&session, 1, "15s, 1m"),
		"prefix":       func(v string) string { opts = append(opts, WithPrefix(v)); return "" },
		"dial-timeout": urlutil.Duration(&cfg.DialTimeout, 1, "500ms, 5s"),
	}, "etcd URLs take session, prefix, connect_timeout (or dial-timeout), "+urlutil.ParamInsecureAuth+", tls, cacert, cert, key and servername")
	if err != nil {
		return nil, err
	}
	if session > 0 {
		opts = append(opts, WithSessionTTL(session))
	}
	_, err = configure(opts)
	return opts, err
}

// dial makes a driver over a new client of cfg, and asks the cluster once:
// clientv3 dials in the background, and a bad address, certificate or
// credentials must fail the Open.
func dial(ctx context.Context, cfg clientv3.Config, opts []Option) (*Driver, error) {
	if cfg.TLS != nil {
		if err := urlutil.CheckTLS(ctx, cfg.Endpoints, cfg.TLS); err != nil {
			return nil, err
		}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, err
	}
	d, err := newDriver(cli, true, opts)
	if err != nil {
		cli.Close()
		return nil, err
	}
	if _, err := cli.Get(ctx, d.prefix, clientv3.WithCountOnly()); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}
