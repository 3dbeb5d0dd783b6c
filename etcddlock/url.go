package etcddlock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/redact"
	"github.com/dlockhq/dlock/internal/urlutil"
)

func init() {
	dlock.Register("etcd", open)
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

// paramInsecureAuth is the URL parameter that allows a password in an
// etcd:// URL without TLS ("insecure_auth=true"): etcd's Authenticate call
// would carry it in clear text.
const paramInsecureAuth = "insecure_auth"

// open opens etcd://[user:password@]host:port[,host:port...][?session=&prefix=&dial-timeout=&tls=&cacert=&cert=&key=&servername=&insecure_auth=].
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
	insecureAuth := false
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
		case paramInsecureAuth:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, urlutil.Error(u, "%s=%q: want true or false", paramInsecureAuth, v)
			}
			insecureAuth = b
		default:
			return nil, urlutil.Error(u, "unknown parameter %q (etcd URLs take session, prefix, dial-timeout, %s, tls, cacert, cert, key and servername)", k, paramInsecureAuth)
		}
	}
	if u.User != nil {
		password, ok := u.User.Password()
		switch {
		case u.User.Username() == "" || !ok || password == "":
			return nil, urlutil.Error(u, "has user information without a user name and a password (write etcd://user:password@host)")
		case tlsCfg == nil && !insecureAuth:
			return nil, urlutil.Error(u, "would send the password of user %q in clear text: connect over TLS (tls=true, or cacert=) or allow it with %s=true", u.User.Username(), paramInsecureAuth)
		}
		cfg.Username, cfg.Password = u.User.Username(), password
	}
	// Check the options before dialing.
	if _, err := configure(opts); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if tlsCfg != nil {
		if err := checkTLS(cctx, hosts, tlsCfg); err != nil {
			return nil, fmt.Errorf("etcddlock: connecting to %s: %w", redact.URL(u), err)
		}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcddlock: connecting to %s: %w", redact.URL(u), err)
	}
	d, err := newDriver(cli, true, opts)
	if err != nil {
		cli.Close()
		return nil, err
	}
	// clientv3 dials in the background: ask once, so that a bad address or
	// bad credentials fail the Open.
	if _, err := cli.Get(cctx, d.prefix, clientv3.WithCountOnly()); err != nil {
		d.Close()
		return nil, fmt.Errorf("etcddlock: connecting to %s: %w", redact.URL(u), err)
	}
	return d, nil
}

// checkTLS completes a TLS handshake with each endpoint, in parallel, before
// the client dials them. gRPC retries a handshake that fails until the dial
// timeout and then reports the timeout alone, while a certificate that does
// not verify now will not verify on the next attempt either: checkTLS turns
// that into an error that says why, at once. It returns nil as soon as one
// endpoint completes a handshake, and also when no endpoint gave a definite
// answer (refused, silent: the client reports those as it always does);
// otherwise, the error of an endpoint whose certificate does not verify,
// that rejected the client's certificate, or that does not speak TLS.
//
// The handshake is TLS 1.2 at most, in which a server that rejects the
// client's certificate says so within the handshake; a server that refuses
// TLS 1.2 gives no definite answer.
func checkTLS(ctx context.Context, endpoints []string, cfg *tls.Config) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan error, len(endpoints))
	for _, ep := range endpoints {
		go func() { results <- handshake(ctx, ep, cfg) }()
	}
	var found error
	for i := range endpoints {
		err := <-results
		if err == nil {
			cancel()
			// The others end at once; none outlives the call.
			for range len(endpoints) - i - 1 {
				<-results
			}
			return nil
		}
		if why := definite(err); found == nil && why != "" {
			found = fmt.Errorf("%s: %w", why, err)
		}
	}
	return found
}

// handshake dials ep and completes a TLS handshake of version 1.2 at most.
func handshake(ctx context.Context, ep string, cfg *tls.Config) error {
	cfg = cfg.Clone()
	cfg.MaxVersion = tls.VersionTLS12
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(ep)
	}
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(ctx, "tcp", ep)
	if err != nil {
		return fmt.Errorf("TLS handshake with %s: %w", ep, err)
	}
	return c.Close()
}

// definite says why a handshake failed if trying again will not change it:
// the server's certificate does not verify, the server rejected the
// client's certificate (or the lack of one), or the server does not speak
// TLS. Otherwise it returns "".
func definite(err error) string {
	var verify *tls.CertificateVerificationError
	var header tls.RecordHeaderError
	var remote *net.OpError
	switch {
	case errors.As(err, &verify):
		return fmt.Sprintf("the server's certificate is not trusted (see %s and %s)", urlutil.ParamCACert, urlutil.ParamServerName)
	case errors.As(err, &header):
		return "the server does not speak TLS"
	case errors.As(err, &remote) && remote.Op == "remote error" &&
		// An alert from the server: crypto/tls gives it no type of its
		// own over TCP, only its description.
		certificateAlerts[strings.TrimPrefix(remote.Err.Error(), "tls: ")]:
		return fmt.Sprintf("the server rejected the client certificate (see %s and %s)", urlutil.ParamCert, urlutil.ParamKey)
	}
	return ""
}

// certificateAlerts are the descriptions crypto/tls gives the TLS alerts by
// which a server rejects a client's certificate (RFC 8446, section 6.2).
var certificateAlerts = map[string]bool{
	"bad certificate":               true,
	"unsupported certificate":       true,
	"revoked certificate":           true,
	"expired certificate":           true,
	"unknown certificate":           true,
	"unknown certificate authority": true,
	"access denied":                 true,
	"certificate required":          true,
}
