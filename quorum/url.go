package quorum

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/ctxerr"
	"github.com/dlockhq/dlock/internal/errclass"
	"github.com/dlockhq/dlock/internal/redact"
	"github.com/dlockhq/dlock/internal/rueidisopt"
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
//   - client: go-redis (the default) or rueidis, every node's client
//     library (see redisdlock.NewRueidis);
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
	hosts, err := urlutil.Hosts(u, "6379")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		if seen[h] {
			return nil, urlutil.Error(u, "names %s twice; every node must be a separate server", h)
		}
		seen[h] = true
	}
	if len(hosts) == 0 {
		return nil, urlutil.Error(u, "names no server; write redlock://host:port,host:port,host:port")
	}
	q := u.Query()
	if err := urlutil.ConnectTimeout(u, q, "dial_timeout"); err != nil {
		return nil, err
	}
	tc, err := urlutil.TLS(u, q, u.Scheme == "redlocks")
	if err != nil {
		return nil, err
	}
	var opts []Option
	var nodeOpts []redisdlock.Option
	useRueidis, mode := false, "script"
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "client":
			switch v {
			case "go-redis", "goredis":
			case "rueidis":
				useRueidis = true
			default:
				return nil, urlutil.Error(u, "client=%q (want go-redis or rueidis)", v)
			}
		case "prefix":
			nodeOpts = append(nodeOpts, redisdlock.WithPrefix(v))
		case "mode":
			mode = v
			switch v {
			case "script":
				nodeOpts = append(nodeOpts, redisdlock.WithProtocol(redisdlock.Script))
			case "tx", "transaction":
				nodeOpts = append(nodeOpts, redisdlock.WithProtocol(redisdlock.Transaction))
			case "legacy":
				nodeOpts = append(nodeOpts, redisdlock.WithProtocol(redisdlock.Legacy))
			default:
				return nil, urlutil.Error(u, "unknown mode %q (want script, tx or legacy)", v)
			}
		case "drift_factor":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, urlutil.Error(u, "drift_factor=%q is not a number", v)
			}
			opts = append(opts, WithDriftFactor(f))
		case "drift_margin":
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, urlutil.Error(u, "drift_margin=%q is not a duration (write 2ms)", v)
			}
			opts = append(opts, WithDriftMargin(d))
		case "fence":
			switch v {
			case "on":
			case "off":
				opts = append(opts, WithoutFenceRound())
			default:
				return nil, urlutil.Error(u, "fence=%q (want on or off)", v)
			}
		default:
			continue
		}
		q.Del(k)
	}
	if useRueidis && mode != "script" {
		// Refused before any node is dialled: a usage error, whether the
		// nodes answer or not.
		return nil, urlutil.Error(u, "mode=%s needs client=go-redis: a rueidis client runs script mode", mode)
	}
	nodes := make([]driver.Driver, 0, len(hosts))
	closeAll := func() {
		for _, n := range nodes {
			n.Close()
		}
	}
	var ropts []rueidis.ClientOption // client=rueidis: every node's options
	hint := "use redlocks:// (or add cacert= to the URL)"
	if u.Scheme != "redlock" {
		hint = "add tls=true or cacert= to the URL"
	}
	conn := urlutil.Connect{Endpoints: hosts, TLS: tc, TimeoutParam: urlutil.ParamConnectTimeout, TLSHint: hint}
	for _, h := range hosts {
		ru := url.URL{Scheme: "redis", User: u.User, Host: h, Path: u.Path, RawQuery: q.Encode()}
		if tc != nil {
			ru.Scheme = "rediss" // go-redis then also takes skip_verify
		}
		o, err := redis.ParseURL(ru.String())
		if err != nil {
			closeAll()
			return nil, urlutil.Error(u, "%s", strings.TrimPrefix(err.Error(), "redis: "))
		}
		if tc != nil {
			// The node's own copy, without a server name unless
			// servername is given: the TLS dial then verifies each
			// node's certificate against the node's own host.
			skip := o.TLSConfig.InsecureSkipVerify
			o.TLSConfig = tc.Clone()
			o.TLSConfig.InsecureSkipVerify = skip
		}
		conn.Timeout = o.DialTimeout
		if o.ReadTimeout < 0 || o.WriteTimeout < 0 {
			closeAll()
			// go-redis watches deadlines, not cancellation: a call
			// cancelled on a hung server would never return.
			return nil, urlutil.Error(u, "read_timeout or write_timeout turns the network timeout off; a call on a hung server could then never return (give a positive duration)")
		}
		if useRueidis {
			ropts = append(ropts, rueidisopt.Single(o))
			continue
		}
		if !q.Has("max_retries") {
			o.MaxRetries = -1 // dlock retries; a retried release can misreport
		}
		o.ContextTimeoutEnabled = true
		// A node that is down must fail fast: the majority carries on, and
		// go-redis would otherwise try to connect five times, 100ms apart.
		o.DialerRetries = 1
		client := redis.NewClient(o)
		d, err := redisdlock.New(client, nodeOpts...)
		if err != nil {
			client.Close()
			closeAll()
			return nil, err
		}
		nodes = append(nodes, &redisNode{Driver: d, client: client})
	}
	if useRueidis {
		var err error
		if nodes, err = rueidisNodes(hosts, ropts, nodeOpts); err != nil {
			return nil, err
		}
	}
	// Every node gets a PING; a minority may be down or hung. Open
	// returns as soon as a majority answered (or can no longer answer): a
	// PING to a hung server ends at its read timeout, or when its client
	// is closed.
	majority := len(nodes)/2 + 1
	var failures []error
	err = conn.Do(ctx, func(ctx context.Context) error {
		pongs := make(chan pong, len(nodes))
		for i, n := range nodes {
			go func() { pongs <- pong{i, n.(pinger).ping(ctx)} }()
		}
		for up := 0; up < majority && len(nodes)-len(failures) >= majority; {
			if p := <-pongs; p.err != nil {
				failures = append(failures, fmt.Errorf("%s: %w", hosts[p.i], p.err))
			} else {
				up++
			}
		}
		if len(nodes)-len(failures) < majority {
			return &openError{nodes: len(nodes), failures: failures, err: ctxerr.Wrap(ctx, errors.Join(failures...))}
		}
		return nil
	})
	if err != nil {
		closeAll()
		return nil, err
	}
	if len(failures) > 0 {
		slog.Default().Warn("quorum: some servers do not answer; the majority carries on", "url", redact.URL(u), "err", errors.Join(failures...))
	}
	d, err := New(nodes, opts...)
	if err != nil {
		closeAll()
		return nil, err
	}
	return d, nil
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

// redisNode is a redisdlock driver that owns its client. Embedding keeps
// the driver's optional interfaces (Notifier, Lister, ForceReleaser).
type redisNode struct {
	*redisdlock.Driver
	client *redis.Client
}

// String returns the server's address, which names the node in errors.
func (n *redisNode) String() string { return n.client.Options().Addr }

// Close closes the driver, then its client.
func (n *redisNode) Close() error {
	return errors.Join(n.Driver.Close(), n.client.Close())
}

func (n *redisNode) ping(ctx context.Context) error { return n.client.Ping(ctx).Err() }

// pinger is a node of a URL-opened quorum, which Open pings.
type pinger interface {
	ping(ctx context.Context) error
}

// rueidisNodes makes a driver over a rueidis client for each host, with
// the client options of the same index. The clients are made at once,
// since rueidis dials the server before it returns: a node that is down or
// hung costs Open one dial timeout, not one per node. It still gets its
// client, which connects once the node is back.
func rueidisNodes(hosts []string, ropts []rueidis.ClientOption, nodeOpts []redisdlock.Option) ([]driver.Driver, error) {
	clients := make([]rueidis.Client, len(hosts))
	var wg sync.WaitGroup
	for i := range hosts {
		wg.Go(func() { clients[i], _ = rueidis.NewClient(ropts[i]) })
	}
	wg.Wait()
	nodes := make([]driver.Driver, 0, len(hosts))
	var err error
	for i, c := range clients {
		if c == nil {
			err = errors.Join(err, fmt.Errorf("quorum: no rueidis client could be made for %s", hosts[i]))
			continue
		}
		if err != nil {
			c.Close()
			continue
		}
		d, derr := redisdlock.NewRueidis(c, nodeOpts...)
		if derr != nil {
			c.Close()
			err = derr
			continue
		}
		nodes = append(nodes, &rueidisNode{Driver: d, client: c, addr: hosts[i]})
	}
	if err != nil {
		for _, n := range nodes {
			n.Close()
		}
		return nil, err
	}
	return nodes, nil
}

// rueidisNode is redisNode over a rueidis client.
type rueidisNode struct {
	*redisdlock.Driver
	client rueidis.Client
	addr   string
}

// String returns the server's address, which names the node in errors.
func (n *rueidisNode) String() string { return n.addr }

// Close closes the driver, then its client.
func (n *rueidisNode) Close() error {
	err := n.Driver.Close()
	n.client.Close()
	return err
}

func (n *rueidisNode) ping(ctx context.Context) error {
	return n.client.Do(ctx, n.client.B().Ping().Build()).Error()
}
