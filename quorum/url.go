package quorum

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/ctxerr"
	"github.com/dlockhq/dlock/internal/errclass"
	"github.com/dlockhq/dlock/internal/redact"
	"github.com/dlockhq/dlock/internal/urlutil"
	"github.com/dlockhq/dlock/redisdlock"
)

func init() {
	dlock.Register("redlock", openRedlock, openClassifier{})
	dlock.Register("redlocks", openRedlock, openClassifier{})
}

// openRedlock opens redlock://[user:pass@]host:port,host:port,...[/db][?params]:
// one standalone Redis server per host, each through a redisdlock driver
// with a client of its own. redlocks:// is the same over TLS, as rediss://
// is to redis://. Parameters:
//
//   - prefix, mode: the redisdlock options, for every node;
//   - client: go-redis, every node's client (the only one; it may be left
//     out);
//   - drift_factor (a number), drift_margin (a Go duration), fence (on or
//     off): the quorum options;
//   - tls, cacert, cert, key, servername: TLS to every node, as on
//     rediss:// URLs (tls=true or any of the others turns TLS on for
//     redlock:// too);
//   - anything else goes to go-redis (redis.ParseURL) for every node:
//     dial_timeout, read_timeout, pool_size, ...
//
// Nodes that do not answer a PING are tolerated as long as a majority does.
func openRedlock(ctx context.Context, u *url.URL) (driver.Driver, error) {
	hosts, err := redlockHosts(u)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	if err := urlutil.ConnectTimeout(u, q, "dial_timeout"); err != nil {
		return nil, err
	}
	tc, err := urlutil.TLS(u, q, u.Scheme == "redlocks")
	if err != nil {
		return nil, err
	}
	var c redlockConfig
	for k, vs := range q {
		if set, ok := redlockParams[k]; ok {
			if err := set(&c, vs[len(vs)-1]); err != nil {
				return nil, urlutil.Error(u, "%v", err)
			}
			q.Del(k)
		}
	}
	ropts, err := redisOptions(u, hosts, q, tc)
	if err != nil {
		return nil, err
	}
	nodes, err := newNodes(ropts, c.nodeOpts)
	if err != nil {
		return nil, err
	}
	hint := "use redlocks:// (or add cacert= to the URL)"
	if u.Scheme != "redlock" {
		hint = "add tls=true or cacert= to the URL"
	}
	conn := urlutil.Connect{Endpoints: hosts, TLS: tc, Timeout: ropts[0].DialTimeout, TimeoutParam: urlutil.ParamConnectTimeout, TLSHint: hint}
	var d *Driver
	if err = pingMajority(ctx, u, conn, nodes); err == nil {
		d, err = New(nodes, c.opts...)
	}
	if err != nil {
		closeNodes(nodes)
		return nil, err
	}
	return d, nil
}

// redlockHosts returns the servers that a redlock URL names, each once.
func redlockHosts(u *url.URL) ([]string, error) {
	hosts, err := urlutil.Hosts(u, "6379")
	if err != nil {
		return nil, err
	}
	for i, h := range hosts {
		if slices.Contains(hosts[:i], h) {
			return nil, urlutil.Error(u, "names %s twice; every node must be a separate server", h)
		}
	}
	if len(hosts) == 0 {
		return nil, urlutil.Error(u, "names no server; write redlock://host:port,host:port,host:port")
	}
	return hosts, nil
}

// redlockConfig is what the parameters that a redlock URL takes for itself
// configure.
type redlockConfig struct {
	opts     []Option
	nodeOpts []redisdlock.Option
}

// redlockParams are the parameters that a redlock URL takes for itself
// (the others go to go-redis): each sets its value in c, or says what is
// wrong with it.
var redlockParams = map[string]func(c *redlockConfig, v string) error{
	"client": func(c *redlockConfig, v string) error {
		if v != "go-redis" && v != "goredis" {
			return fmt.Errorf("client=%q: dlock runs on go-redis (leave client out, or write client=go-redis)", v)
		}
		return nil
	},
	"prefix": func(c *redlockConfig, v string) error {
		c.nodeOpts = append(c.nodeOpts, redisdlock.WithPrefix(v))
		return nil
	},
	"mode": func(c *redlockConfig, v string) error {
		p, ok := map[string]redisdlock.Protocol{"script": redisdlock.Script, "tx": redisdlock.Transaction, "transaction": redisdlock.Transaction, "legacy": redisdlock.Legacy}[v]
		if !ok {
			return fmt.Errorf("unknown mode %q (want script, tx or legacy)", v)
		}
		c.nodeOpts = append(c.nodeOpts, redisdlock.WithProtocol(p))
		return nil
	},
	"drift_factor": func(c *redlockConfig, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("drift_factor=%q is not a number", v)
		}
		c.opts = append(c.opts, WithDriftFactor(f))
		return nil
	},
	"drift_margin": func(c *redlockConfig, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("drift_margin=%q is not a duration (write 2ms)", v)
		}
		c.opts = append(c.opts, WithDriftMargin(d))
		return nil
	},
	"fence": func(c *redlockConfig, v string) error {
		switch v {
		case "on":
		case "off":
			c.opts = append(c.opts, WithoutFenceRound())
		default:
			return fmt.Errorf("fence=%q (want on or off)", v)
		}
		return nil
	},
}

// redisOptions returns the go-redis options of the node on each host: the
// URL's user, database and remaining parameters q, and the TLS
// configuration tc.
func redisOptions(u *url.URL, hosts []string, q url.Values, tc *tls.Config) ([]*redis.Options, error) {
	all := make([]*redis.Options, len(hosts))
	for i, h := range hosts {
		ru := url.URL{Scheme: "redis", User: u.User, Host: h, Path: u.Path, RawQuery: q.Encode()}
		if tc != nil {
			ru.Scheme = "rediss" // go-redis then also takes skip_verify
		}
		o, err := redis.ParseURL(ru.String())
		switch {
		case err != nil:
			return nil, urlutil.Error(u, "%s", strings.TrimPrefix(err.Error(), "redis: "))
		case o.ReadTimeout < 0 || o.WriteTimeout < 0:
			// go-redis watches deadlines, not cancellation: a call
			// cancelled on a hung server would never return.
			return nil, urlutil.Error(u, "read_timeout or write_timeout turns the network timeout off; a call on a hung server could then never return (give a positive duration)")
		case tc != nil:
			// The node's own copy, without a server name unless
			// servername is given: the TLS dial then verifies each
			// node's certificate against the node's own host.
			skip := o.TLSConfig.InsecureSkipVerify
			o.TLSConfig = tc.Clone()
			o.TLSConfig.InsecureSkipVerify = skip
		}
		if !q.Has("max_retries") {
			o.MaxRetries = -1 // dlock retries; a retried release can misreport
		}
		o.ContextTimeoutEnabled = true
		// A node that is down must fail fast: the majority carries on, and
		// go-redis would otherwise try to connect five times, 100ms apart.
		o.DialerRetries = 1
		all[i] = o
	}
	return all, nil
}

// pingMajority sends every node a PING, and returns as soon as a majority
// answered, or an *openError once a majority can no longer answer: a
// minority may be down or hung (a PING to a hung server ends at its read
// timeout, or when its client is closed). It logs the nodes that failed
// before a majority answered.
func pingMajority(ctx context.Context, u *url.URL, conn urlutil.Connect, nodes []driver.Driver) error {
	majority := len(nodes)/2 + 1
	var failures []error
	err := conn.Do(ctx, func(ctx context.Context) error {
		pongs := make(chan pong, len(nodes))
		for i, n := range nodes {
			go func() { pongs <- pong{i, n.(*redisNode).client.Ping(ctx).Err()} }()
		}
		for up := 0; up < majority && len(nodes)-len(failures) >= majority; {
			if p := <-pongs; p.err != nil {
				failures = append(failures, fmt.Errorf("%s: %w", conn.Endpoints[p.i], p.err))
			} else {
				up++
			}
		}
		if len(nodes)-len(failures) < majority {
			return &openError{nodes: len(nodes), failures: failures, err: ctxerr.Wrap(ctx, errors.Join(failures...))}
		}
		return nil
	})
	if err == nil && len(failures) > 0 {
		slog.Default().Warn("quorum: some servers do not answer; the majority carries on", "url", redact.URL(u), "err", errors.Join(failures...))
	}
	return err
}

// pong is the answer of node i to Open's PING.
type pong struct {
	i   int
	err error
}

// openError is the failure of Open: fewer than a majority of the nodes
// answered. It unwraps to each node's error, which Classify counts.
type openError struct {
	nodes    int
	failures []error
	err      error // the failures, joined, with the context's error
}

func (e *openError) Error() string {
	return fmt.Sprintf("quorum: only %d of %d servers answer: %v", e.nodes-len(e.failures), e.nodes, e.err)
}

func (e *openError) Unwrap() error { return e.err }

// openClassifier classifies the errors of Open as Driver.Permanent does
// those of a quorum: permanent when more nodes failed permanently than a
// majority can spare.
type openClassifier struct{}

func (openClassifier) Permanent(err error) bool {
	var oe *openError
	if !errors.As(err, &oe) {
		return false
	}
	n := 0
	for _, e := range oe.failures {
		if errclass.Permanent((*redisdlock.Driver)(nil), e) {
			n++
		}
	}
	return n > oe.nodes-(oe.nodes/2+1)
}

// newNodes makes a driver for each of opts over a go-redis client of its
// own, which connects when it is first used. The nodes send every script
// as a command of its own: go-redis ends such a call at its context's
// deadline, the node timeout, and an auto-pipelined one only at the
// client's read timeout (see redisdlock.WithAutoPipeline).
func newNodes(opts []*redis.Options, nodeOpts []redisdlock.Option) ([]driver.Driver, error) {
	nodes := make([]driver.Driver, 0, len(opts))
	nodeOpts = append([]redisdlock.Option{redisdlock.WithAutoPipeline(false)}, nodeOpts...)
	for _, o := range opts {
		c := redis.NewClient(o)
		d, err := redisdlock.New(c, nodeOpts...)
		if err != nil {
			c.Close()
			closeNodes(nodes)
			return nil, err
		}
		nodes = append(nodes, &redisNode{Driver: d, client: c})
	}
	return nodes, nil
}

// closeNodes closes nodes that no Driver owns (nil ones are skipped).
func closeNodes(nodes []driver.Driver) {
	for _, n := range nodes {
		if n != nil {
			n.Close()
		}
	}
}

// redisNode is a redisdlock driver that owns its client, which Open pings.
// Embedding keeps the driver's optional interfaces (Notifier, Lister,
// ForceReleaser).
type redisNode struct {
	*redisdlock.Driver
	client *redis.Client
}

// String returns the server's address, which names the node in errors.
func (n *redisNode) String() string { return n.client.Options().Addr }

// Close closes the driver, then its client.
func (n *redisNode) Close() error { return errors.Join(n.Driver.Close(), n.client.Close()) }
