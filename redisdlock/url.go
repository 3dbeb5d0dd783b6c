package redisdlock

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/ctxerr"
	"github.com/dlockhq/dlock/internal/urlutil"
)

func init() {
	// Permanent looks at the error alone: a nil driver classifies Open's.
	dlock.Register("redis", openRedis, (*Driver)(nil))
	dlock.Register("rediss", openRedis, (*Driver)(nil))
	dlock.Register("redis+sentinel", openSentinel, (*Driver)(nil))
	dlock.Register("redis+cluster", openCluster, (*Driver)(nil))
}

// The query parameters the driver takes for itself; the others go to
// go-redis.
const (
	paramPrefix       = "prefix"
	paramMode         = "mode"
	paramWaitReplicas = "wait_replicas"
	paramWaitTimeout  = "wait_timeout"
	paramLegacyUnit   = "legacy_unit"
	paramClient       = "client"
	paramAutoPipeline = "autopipeline"
)

// defaultWaitTimeout is the WAIT timeout when a URL sets wait_replicas
// without wait_timeout.
const defaultWaitTimeout = time.Second

// protocols are the values of the URL parameter mode.
var protocols = map[string]Protocol{"script": Script, "tx": Transaction, "transaction": Transaction, "legacy": Legacy}

// takeOptions removes the driver's own parameters from q and returns them
// as Options and the TLS configuration of the TLS parameters (nil without
// TLS). client, if given, must name go-redis, the only client.
func takeOptions(u *url.URL, q url.Values) (opts []Option, tc *tls.Config, _ error) {
	if c := q.Get(paramClient); c != "" && c != "go-redis" && c != "goredis" {
		return nil, nil, urlutil.Error(u, "client=%q: dlock runs on go-redis, with auto-pipelining (leave client out, or write client=go-redis)", c)
	}
	if err := urlutil.ConnectTimeout(u, q, "dial_timeout"); err != nil {
		return nil, nil, err
	}
	if q.Has(paramPrefix) {
		opts = append(opts, WithPrefix(q.Get(paramPrefix)))
	}
	if m := q.Get(paramMode); q.Has(paramMode) {
		p, ok := protocols[m]
		if !ok {
			return nil, nil, urlutil.Error(u, "unknown mode %q (want script, tx or legacy)", m)
		}
		opts = append(opts, WithProtocol(p))
	}
	if q.Has(paramWaitReplicas) || q.Has(paramWaitTimeout) {
		o, err := replicaAck(u, q)
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, o)
	}
	if q.Has(paramAutoPipeline) {
		on, err := strconv.ParseBool(q.Get(paramAutoPipeline))
		if err != nil {
			return nil, nil, urlutil.Error(u, "autopipeline=%q (want true or false)", q.Get(paramAutoPipeline))
		}
		opts = append(opts, WithAutoPipeline(on))
	}
	if q.Has(paramLegacyUnit) {
		switch s := q.Get(paramLegacyUnit); s {
		case "ms":
			opts = append(opts, WithLegacyUnit(time.Millisecond))
		case "s":
			opts = append(opts, WithLegacyUnit(time.Second))
		default:
			return nil, nil, urlutil.Error(u, "legacy_unit=%q (want ms or s)", s)
		}
	}
	for _, p := range []string{paramPrefix, paramMode, paramWaitReplicas, paramWaitTimeout, paramLegacyUnit, paramClient, paramAutoPipeline} {
		q.Del(p)
	}
	tc, err := urlutil.TLS(u, q, u.Scheme == "rediss")
	return opts, tc, err
}

// replicaAck reads wait_replicas and wait_timeout as WithReplicaAck.
func replicaAck(u *url.URL, q url.Values) (Option, error) {
	n := 0
	if q.Has(paramWaitReplicas) {
		v, err := strconv.Atoi(q.Get(paramWaitReplicas))
		if err != nil || v < 0 {
			return nil, urlutil.Error(u, "wait_replicas=%q is not a number of replicas", q.Get(paramWaitReplicas))
		}
		n = v
	}
	timeout := defaultWaitTimeout
	if q.Has(paramWaitTimeout) {
		s := q.Get(paramWaitTimeout)
		if v, err := strconv.ParseInt(s, 10, 64); err == nil {
			timeout = time.Duration(v) * time.Millisecond // WAIT's own unit
		} else if timeout, err = time.ParseDuration(s); err != nil {
			return nil, urlutil.Error(u, "wait_timeout=%q is not a duration (write 500ms, 2s, or milliseconds)", s)
		}
		if n == 0 {
			return nil, urlutil.Error(u, "wait_timeout without wait_replicas")
		}
	}
	return WithReplicaAck(n, timeout), nil
}

// connectOf describes how a client connects to addrs, with TLS if tc is
// not nil, for urlutil.Connect: within dial_timeout (dial, TLS handshake,
// authentication and a PING).
func connectOf(u *url.URL, addrs []string, tc *tls.Config, timeout time.Duration) urlutil.Connect {
	hint := "add tls=true or cacert= to the URL"
	if u.Scheme == "redis" {
		hint = "use rediss:// (or add cacert= to the URL)"
	}
	return urlutil.Connect{Endpoints: addrs, TLS: tc, Timeout: timeout, TimeoutParam: urlutil.ParamConnectTimeout, TLSHint: hint}
}

// checkTimeouts refuses read and write timeouts that a URL turned off
// (zero or negative values): go-redis watches a call's deadline but not
// its cancellation, so on a hung server a call cancelled without a
// deadline returns only when the network timeout ends, and would never
// return without one.
func checkTimeouts(u *url.URL, read, write time.Duration) error {
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"read_timeout", read}, {"write_timeout", write}} {
		if t.d < 0 {
			return urlutil.Error(u, "%s turns the network timeout off; a call on a hung server could then never return (give a positive duration)", t.name)
		}
	}
	return nil
}

// redisError turns a go-redis URL parsing error into an *ArgError, naming
// the parameters neither the driver nor go-redis knows.
func redisError(u *url.URL, err error) error {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "redis: unexpected option: "); ok {
		return urlutil.Error(u, "unknown parameter(s) %s (the driver takes %s, %s, %s, %s, %s, %s, %s, %s and the TLS parameters %s, %s, %s, %s and %s; others go to go-redis)",
			rest, paramPrefix, paramMode, paramWaitReplicas, paramWaitTimeout, paramLegacyUnit, paramAutoPipeline, paramClient, urlutil.ParamConnectTimeout,
			urlutil.ParamTLS, urlutil.ParamCACert, urlutil.ParamCert, urlutil.ParamKey, urlutil.ParamServerName)
	}
	return urlutil.Error(u, "%s", strings.TrimPrefix(msg, "redis: "))
}

// openRedis opens redis://[user:pass@]host:port[/db] and rediss:// (TLS):
// go-redis's ParseURL with the driver's own parameters and the TLS
// parameters (tls, cacert, cert, key, servername; see the package
// documentation) taken out.
func openRedis(ctx context.Context, u *url.URL) (driver.Driver, error) {
	q := u.Query()
	opts, tc, err := takeOptions(u, q)
	if err != nil {
		return nil, err
	}
	ru := *u
	ru.Scheme = tlsScheme(tc)
	ru.RawQuery = q.Encode()
	o, err := redis.ParseURL(ru.String())
	if err != nil {
		return nil, redisError(u, err)
	}
	o.TLSConfig = withSkipVerify(tc, o.TLSConfig)
	if !q.Has("max_retries") {
		o.MaxRetries = -1
	}
	if err := checkTimeouts(u, o.ReadTimeout, o.WriteTimeout); err != nil {
		return nil, err
	}
	o.ContextTimeoutEnabled = true
	return finishOpen(ctx, connectOf(u, []string{o.Addr}, o.TLSConfig, o.DialTimeout), redis.NewClient(o), opts)
}

// openSentinel opens
// redis+sentinel://[user:pass@]host:port[,host:port...]/mastername[/db]: the
// addresses are the Sentinels'; user and password authenticate to the master
// (and replicas); sentinel_username and sentinel_password to the Sentinels.
// Other parameters are go-redis's FailoverOptions (ParseFailoverURL).
func openSentinel(ctx context.Context, u *url.URL) (driver.Driver, error) {
	q := u.Query()
	opts, tc, err := takeOptions(u, q)
	if err != nil {
		return nil, err
	}
	hosts, err := urlutil.Servers(u, "26379")
	if err != nil {
		return nil, err
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if parts[0] == "" || len(parts) > 2 {
		return nil, urlutil.Error(u, "write redis+sentinel://host:port[,host:port]/mastername[/db]")
	}
	if q.Has("master_name") {
		return nil, urlutil.Error(u, "give the master name in the path, not as master_name")
	}
	sentinelUser, sentinelPass := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	q.Set("master_name", parts[0])
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	fu := url.URL{Scheme: tlsScheme(tc), Host: hosts[0], RawQuery: q.Encode()}
	if len(parts) == 2 {
		fu.Path = "/" + parts[1]
	}
	o, err := redis.ParseFailoverURL(fu.String())
	if err != nil {
		return nil, redisError(u, err)
	}
	o.TLSConfig = withSkipVerify(tc, o.TLSConfig)
	if u.User != nil {
		if q.Has("password") || q.Has("username") {
			return nil, urlutil.Error(u, "give the master's credentials either before the host or as parameters, not both")
		}
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
	}
	o.SentinelUsername, o.SentinelPassword = sentinelUser, sentinelPass
	if !q.Has("max_retries") {
		o.MaxRetries = -1
	}
	if err := checkTimeouts(u, o.ReadTimeout, o.WriteTimeout); err != nil {
		return nil, err
	}
	o.ContextTimeoutEnabled = true
	if !q.Has("dialer_retries") {
		// Each of go-redis's dial attempts asks the Sentinels, which
		// may each take a read timeout: one attempt keeps Open within
		// the connect timeout, and dlock retries what fails.
		o.DialerRetries = 1
	}
	return finishOpen(ctx, connectOf(u, hosts, o.TLSConfig, o.DialTimeout), redis.NewFailoverClient(o), opts)
}

// openCluster opens redis+cluster://[user:pass@]host:port[,host:port...]:
// the addresses are seed nodes. Other parameters are go-redis's
// ClusterOptions (ParseClusterURL).
func openCluster(ctx context.Context, u *url.URL) (driver.Driver, error) {
	q := u.Query()
	opts, tc, err := takeOptions(u, q)
	if err != nil {
		return nil, err
	}
	if err := urlutil.NoPath(u, "redis+cluster://host:port[,host:port] (a Cluster has database 0 only)"); err != nil {
		return nil, err
	}
	hosts, err := urlutil.Servers(u, "6379")
	if err != nil {
		return nil, err
	}
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	cu := url.URL{Scheme: tlsScheme(tc), User: u.User, Host: hosts[0], RawQuery: q.Encode()}
	o, err := redis.ParseClusterURL(cu.String())
	if err != nil {
		return nil, redisError(u, err)
	}
	o.TLSConfig = withSkipVerify(tc, o.TLSConfig)
	if err := checkTimeouts(u, o.ReadTimeout, o.WriteTimeout); err != nil {
		return nil, err
	}
	o.ContextTimeoutEnabled = true
	o.ClusterStateReloadInterval = clusterReloadInterval
	c := redis.NewClusterClient(o)
	c.AddHook(reloadOnConnError{c})
	return finishOpen(ctx, connectOf(u, hosts, o.TLSConfig, o.DialTimeout), c, opts)
}

// tlsScheme is the scheme of the URL handed to go-redis: rediss when the
// connections use TLS, so that go-redis also takes its skip_verify
// parameter, else redis.
func tlsScheme(tc *tls.Config) string {
	if tc != nil {
		return "rediss"
	}
	return "redis"
}

// withSkipVerify returns tc, the TLS configuration of the URL's TLS
// parameters, in place of parsed, the one go-redis made of a rediss URL
// (which names the first host as the server for every node, and trusts the
// system's roots only), keeping go-redis's skip_verify=true.
func withSkipVerify(tc, parsed *tls.Config) *tls.Config {
	if tc != nil && parsed != nil {
		tc.InsecureSkipVerify = parsed.InsecureSkipVerify
	}
	return tc
}

// finishOpen makes a driver that owns client, after checking that the
// server answers within the connect timeout.
func finishOpen(ctx context.Context, conn urlutil.Connect, client redis.UniversalClient, opts []Option) (driver.Driver, error) {
	d, err := newDriver(client, true, opts)
	if err != nil {
		client.Close()
		return nil, err
	}
	if err := conn.Do(ctx, func(ctx context.Context) error { return ctxerr.Wrap(ctx, client.Ping(ctx).Err()) }); err != nil {
		d.Close()
		return nil, fmt.Errorf("redisdlock: connecting: %w", err)
	}
	return d, nil
}
