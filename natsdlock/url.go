package natsdlock

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/urlutil"
)

func init() {
	dlock.Register("nats", open, (*Driver)(nil)) // Permanent looks at the error alone
}

const defaultPort = "4222"

// open opens nats://[user:password@]host:port[,host:port...][/BUCKET][?replicas=&discovery=&creds=&nkey=&token=&connect_timeout=&tls=&cacert=&cert=&key=&servername=&insecure_auth=].
func open(ctx context.Context, u *url.URL) (driver.Driver, error) {
	hosts, err := urlutil.Servers(u, defaultPort)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	tlsCfg, err := urlutil.TLS(u, q, false)
	if err != nil {
		return nil, err
	}
	insecure := q.Get(urlutil.ParamInsecureAuth) == "true"
	user, password, err := urlutil.Password(u, q, tlsCfg != nil)
	if err != nil {
		return nil, err
	}
	var opts []Option
	if b := strings.Trim(u.Path, "/"); b != "" {
		opts = append(opts, WithBucket(b))
	}
	nopts := []nats.Option{nats.Name("dlock"), nats.MaxReconnects(-1)}
	if tlsCfg != nil {
		nopts = append(nopts, nats.Secure(tlsCfg))
	}
	if user != "" {
		nopts = append(nopts, nats.UserInfo(user, password))
	}
	if q.Has("token") { // read here: Params would show its value in errors
		if tlsCfg == nil && !insecure {
			return nil, urlutil.Error(u, "would send the token in clear text: connect over TLS (%s=true, or %s=) or allow it with %s=true",
				urlutil.ParamTLS, urlutil.ParamCACert, urlutil.ParamInsecureAuth)
		}
		nopts = append(nopts, nats.Token(q.Get("token")))
		q.Del("token")
	}
	connect := urlutil.DefaultConnectTimeout
	err = urlutil.Params(u, q, map[string]func(string) string{
		"replicas": func(v string) string {
			n, err := strconv.Atoi(v)
			if err != nil {
				return "is not a number"
			}
			opts = append(opts, WithReplicas(n))
			return ""
		},
		"discovery": func(v string) string {
			on, err := strconv.ParseBool(v)
			if err != nil {
				return "is not true or false"
			}
			if !on {
				nopts = append(nopts, nats.IgnoreDiscoveredServers())
			}
			return ""
		},
		"creds": func(v string) string { nopts = append(nopts, nats.UserCredentials(v)); return "" },
		"nkey": func(v string) string {
			o, err := nats.NkeyOptionFromSeed(v)
			if err != nil {
				return err.Error()
			}
			nopts = append(nopts, o)
			return ""
		},
		urlutil.ParamConnectTimeout: urlutil.Duration(&connect, time.Millisecond, "500ms, 5s"),
	}, "nats URLs take replicas, discovery, creds, nkey, token, "+urlutil.ParamConnectTimeout+", "+urlutil.ParamInsecureAuth+", tls, cacert, cert, key and servername")
	if err != nil {
		return nil, err
	}
	if _, err := configure(opts); err != nil {
		return nil, err
	}
	nopts = append(nopts, nats.Timeout(connect))
	servers := make([]string, len(hosts))
	for i, h := range hosts {
		servers[i] = "nats://" + h
	}
	conn := urlutil.Connect{Endpoints: hosts, Timeout: connect, TimeoutParam: urlutil.ParamConnectTimeout,
		TLSHint: "add tls=true or cacert= to the URL"}
	var d *Driver
	err = conn.Do(ctx, func(ctx context.Context) error {
		nc, err := nats.Connect(strings.Join(servers, ","), nopts...)
		if err != nil {
			return err
		}
		if d, err = newDriver(ctx, nc, true, opts); err != nil {
			nc.Close()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("natsdlock: connecting: %w", err)
	}
	return d, nil
}
