package check

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/etcddlock"
	"github.com/dlockhq/dlock/internal/redact"
	"github.com/dlockhq/dlock/internal/urlutil"
	"github.com/dlockhq/dlock/memcachedlock"
	"github.com/dlockhq/dlock/natsdlock"
	"github.com/dlockhq/dlock/quorum"
	"github.com/dlockhq/dlock/redisdlock"
	"github.com/dlockhq/dlock/sqldlock"
	"github.com/dlockhq/dlock/zkdlock"
)

// AuditReport is what `dlock check --audit` found in a deployment: the
// settings it read from each server and its findings (see findings.go for
// what makes one).
type AuditReport struct {
	Store    string   `json:"store"` // the URL, secrets redacted
	Promises Promises `json:"promises"`
	// Servers are the servers read, with the settings that matter.
	Servers []Server `json:"servers"`
	// MaxSkew is the clock difference between this host and a server
	// beyond which the audit reports it.
	MaxSkew  time.Duration `json:"max_skew_ns"`
	Findings []Finding     `json:"findings"`
	// OK reports that no finding breaks a promise of the backend.
	OK bool `json:"ok"`

	scheme string
	query  url.Values
}

// Server is what the audit read from one server.
type Server struct {
	Addr     string            `json:"addr"`
	Settings map[string]string `json:"settings,omitempty"`
	// Clock is the server's clock against this host's, if it has one the
	// audit can read.
	Clock *Skew `json:"clock,omitempty"`
	// Unreadable says what the audit could not read, and why.
	Unreadable string `json:"unreadable,omitempty"`
}

// Skew is a server's clock minus this host's clock, measured as the
// server's time against the midpoint of the request: the true offset is
// within Bound of Offset.
type Skew struct {
	Offset time.Duration `json:"offset_ns"`
	// Bound is half the round trip plus the resolution of the server's
	// clock.
	Bound time.Duration `json:"bound_ns"`
}

// clientClock is this host's clock, as the audit measures skew against it.
var clientClock = time.Now

// Audit reads the configuration of the deployment at rawURL and judges it.
// Errors are a *UsageError for a URL that does not parse or names an
// unknown store, or the store's error when it cannot be reached.
func Audit(ctx context.Context, rawURL string) (*AuditReport, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, &UsageError{redact.String(err.Error())}
	}
	c, err := dlock.Open(ctx, rawURL)
	if errors.Is(err, dlock.ErrInvalidArgument) {
		return nil, &UsageError{err.Error()}
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	rep := &AuditReport{Store: redact.String(rawURL), Promises: promises(c.Capabilities()), MaxSkew: maxSkew, scheme: u.Scheme, query: u.Query()}
	switch d := c.Driver().(type) {
	case *redisdlock.Driver:
		rep.Servers, err = readRedis(ctx, d.Client())
	case *quorum.Driver:
		rep.Servers, err = readRedlock(ctx, u)
	case *sqldlock.Driver:
		rep.Servers, err = readSQL(ctx, u, d.Dialect())
	case *etcddlock.Driver:
		rep.Servers, err = readEtcd(ctx, d.Client(), session(u, etcddlock.DefaultSessionTTL))
	case *zkdlock.Driver:
		rep.Servers, err = readZooKeeper(ctx, d, u)
	case *memcachedlock.Driver:
		rep.Servers, err = readMemcached(ctx, u)
	case *natsdlock.Driver:
		rep.Servers, err = readNATS(ctx, d)
	}
	if err != nil {
		return nil, err
	}
	rep.Findings = rep.judge()
	rep.OK = !slices.ContainsFunc(rep.Findings, func(f Finding) bool { return f.Severity == SeverityBreaks })
	return rep, nil
}

// session returns the session= of u, or def.
func session(u *url.URL, def time.Duration) time.Duration {
	d := def
	if v := u.Query().Get("session"); v != "" {
		urlutil.Duration(&d, time.Millisecond, "")(v)
	}
	return d
}

// measureSkew reads a server's clock (now, whose resolution is res) three
// times and keeps the tightest measurement.
func measureSkew(ctx context.Context, res time.Duration, now func(context.Context) (time.Time, error)) (*Skew, error) {
	var best *Skew
	for range 3 {
		t0 := clientClock()
		s, err := now(ctx)
		if err != nil {
			return nil, err
		}
		rtt := clientClock().Sub(t0)
		if sk := (Skew{Offset: s.Sub(t0.Add(rtt / 2)), Bound: rtt/2 + res}); best == nil || sk.Bound < best.Bound {
			best = &sk
		}
	}
	return best, nil
}

// redisSettings are the Redis settings the audit reads.
var redisSettings = []string{"appendonly", "appendfsync", "save", "maxmemory", "maxmemory-policy"}

// readRedis reads the Redis server of c (the master, through Sentinel), or
// every master of a Cluster, and the replicas each lists: one of them may
// become the master.
func readRedis(ctx context.Context, c redis.UniversalClient) ([]Server, error) {
	cc, ok := c.(*redis.ClusterClient)
	if rc, single := c.(*redis.Client); single {
		addr := "master"
		if ci, err := rc.ClientInfo(ctx).Result(); err == nil {
			addr = ci.LAddr // the server's end of the connection
		}
		return readRedisReplicated(ctx, rc, addr)
	} else if !ok {
		return nil, fmt.Errorf("cannot audit Redis through a %T", c)
	}
	var mu sync.Mutex
	var out []Server
	err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		s, err := readRedisReplicated(ctx, n, n.Options().Addr)
		mu.Lock()
		defer mu.Unlock()
		out = append(out, s...)
		return err
	})
	slices.SortFunc(out, func(a, b Server) int { return strings.Compare(a.Addr, b.Addr) })
	return out, err
}

// readRedisReplicated reads the server of c and, with clients of their own
// that authenticate as c does, its replicas.
func readRedisReplicated(ctx context.Context, c *redis.Client, addr string) ([]Server, error) {
	s, replicas, err := readRedisNode(ctx, c, addr)
	if err != nil {
		return nil, err
	}
	out := []Server{s}
	o := c.Options()
	for _, r := range replicas {
		rc := redis.NewClient(&redis.Options{Addr: r, Username: o.Username, Password: o.Password, DB: o.DB, TLSConfig: o.TLSConfig, ContextTimeoutEnabled: true})
		rs, _, err := readRedisNode(ctx, rc, r)
		rc.Close()
		if err != nil {
			rs = Server{Addr: r, Unreadable: "the replica: " + err.Error()}
		}
		out = append(out, rs)
	}
	return out, nil
}

// readRedisNode reads one Redis server: its persistence and eviction
// settings, its replication role and its clock; and it returns the
// addresses of its replicas. A server that refuses CONFIG (managed services
// rename it) is reported as unreadable.
func readRedisNode(ctx context.Context, c redis.Cmdable, addr string) (s Server, replicas []string, err error) {
	s = Server{Addr: addr, Settings: map[string]string{}}
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return s, nil, err
	}
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch {
		case k == "role" || k == "connected_slaves":
			s.Settings[k] = v
		case strings.HasPrefix(k, "slave") && strings.Contains(v, "ip="):
			// slave0:ip=10.0.0.2,port=6379,state=online,...
			var ip, port string
			for _, f := range strings.Split(v, ",") {
				switch name, val, _ := strings.Cut(f, "="); name {
				case "ip":
					ip = val
				case "port":
					port = val
				}
			}
			replicas = append(replicas, net.JoinHostPort(ip, port))
		}
	}
	if cfg, err := c.ConfigGet(ctx, "*").Result(); err != nil {
		s.Unreadable = "CONFIG GET: " + err.Error()
	} else {
		for _, k := range redisSettings {
			s.Settings[k] = cfg[k]
		}
	}
	s.Clock, err = measureSkew(ctx, time.Microsecond, func(ctx context.Context) (time.Time, error) { return c.Time(ctx).Result() })
	return s, replicas, err
}

// readRedlock reads every server of a Redlock URL with a client of its own.
func readRedlock(ctx context.Context, u *url.URL) ([]Server, error) {
	nodes, err := redlockNodes(u)
	if err != nil {
		return nil, err
	}
	out := make([]Server, len(nodes))
	for i, o := range nodes {
		c := redis.NewClient(o)
		out[i], _, err = readRedisNode(ctx, c, o.Addr)
		c.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.Addr, err)
		}
	}
	return out, nil
}

// sqlReads are, per dialect, the settings the audit reads (as the driver's
// sessions see them) and the query of the server's clock in seconds since
// the epoch.
var sqlReads = map[sqldlock.Dialect]struct {
	settings map[string]string
	clock    string
}{
	sqldlock.Postgres: {map[string]string{"synchronous_commit": "SHOW synchronous_commit", "fsync": "SHOW fsync"},
		"SELECT extract(epoch FROM clock_timestamp())::text"},
	sqldlock.MySQL: {map[string]string{"innodb_flush_log_at_trx_commit": "SELECT @@innodb_flush_log_at_trx_commit",
		"log_bin": "SELECT @@log_bin", "sync_binlog": "SELECT @@sync_binlog"},
		"SELECT CAST(UNIX_TIMESTAMP(NOW(6)) AS CHAR)"},
}

// readSQL reads a PostgreSQL or MySQL server through a pool of its own on
// the driver's database. SQLite has nothing to read: it is a file on this
// host.
func readSQL(ctx context.Context, u *url.URL, d sqldlock.Dialect) ([]Server, error) {
	r, ok := sqlReads[d]
	if !ok {
		return nil, nil
	}
	db, err := openSQL(u, d)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	s := Server{Addr: u.Host, Settings: map[string]string{}}
	for k, q := range r.settings {
		var v string
		if err := db.QueryRowContext(ctx, q).Scan(&v); err != nil {
			return nil, fmt.Errorf("reading %s: %w", k, err)
		}
		s.Settings[k] = v
	}
	if d == sqldlock.Postgres {
		if s.Settings["pooling"], err = pgPooling(ctx, db); err != nil {
			return nil, fmt.Errorf("probing for a pooler: %w", err)
		}
	}
	s.Clock, err = measureSkew(ctx, time.Microsecond, func(ctx context.Context) (time.Time, error) { return epoch(ctx, db, r.clock) })
	return []Server{s}, err
}

// pgPooling tells whether a pooler in front of PostgreSQL hands one
// client's successive transactions to different server sessions
// ("transaction", as PgBouncer's transaction and statement modes do) or not
// ("session"). Client a holds a server session in a transaction while
// client b takes another; a then ends its transaction, and b asks again:
// a pooler gives b the session released last (PgBouncer's default), a
// session of its own never changes.
func pgPooling(ctx context.Context, db *sql.DB) (string, error) {
	a, err := db.Conn(ctx)
	if err != nil {
		return "", err
	}
	defer a.Close()
	b, err := db.Conn(ctx)
	if err != nil {
		return "", err
	}
	defer b.Close()
	tx, err := a.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer tx.Rollback()
	var held, before, after int
	// Three texts: a driver that caches prepared statements per client
	// connection would not find one on another server session.
	if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid() AS held").Scan(&held); err != nil {
		return "", err
	}
	if err := b.QueryRowContext(ctx, "SELECT pg_backend_pid() AS before").Scan(&before); err != nil {
		return "", err
	}
	if err := tx.Commit(); err != nil {
		return "", err
	}
	if err := b.QueryRowContext(ctx, "SELECT pg_backend_pid() AS after").Scan(&after); err != nil {
		return "", err
	}
	if after != before {
		return "transaction", nil
	}
	return "session", nil
}

// epoch runs query, which returns seconds since the epoch as text.
func epoch(ctx context.Context, db *sql.DB, query string) (time.Time, error) {
	var v string
	if err := db.QueryRowContext(ctx, query).Scan(&v); err != nil {
		return time.Time{}, err
	}
	sec, frac, _ := strings.Cut(v, ".")
	s, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("the server's clock reads %q", v)
	}
	ns, _ := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
	return time.Unix(s, ns), nil
}

// readEtcd reads the version of every member of the cluster (those the
// URL does not name too), and the lease the cluster grants for a session of
// ttl (etcd raises a lease shorter than its election timeout allows).
func readEtcd(ctx context.Context, c *clientv3.Client, ttl time.Duration) ([]Server, error) {
	ml, err := c.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	var out []Server
	for _, m := range ml.Members {
		if len(m.ClientURLs) == 0 {
			continue // a member added and not yet started
		}
		ep := m.ClientURLs[0]
		st, err := c.Status(ctx, ep)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ep, err)
		}
		out = append(out, Server{Addr: ep, Settings: map[string]string{"version": st.Version}})
	}
	asked := int64((ttl + time.Second - 1) / time.Second)
	g, err := c.Grant(ctx, asked)
	if err != nil {
		return nil, err
	}
	if _, err := c.Revoke(ctx, g.ID); err != nil {
		return nil, err
	}
	out[0].Settings["session_asked"] = (time.Duration(asked) * time.Second).String()
	out[0].Settings["session_granted"] = (time.Duration(g.TTL) * time.Second).String()
	return out, nil
}

// readZooKeeper reads the server's clock (see zkClock) and then, the
// session being set up, the session timeout the server negotiated against
// the one asked.
func readZooKeeper(ctx context.Context, d *zkdlock.Driver, u *url.URL) ([]Server, error) {
	prefix := zkdlock.DefaultPrefix
	if p := u.Query().Get("prefix"); p != "" {
		prefix = p
	}
	s := Server{Addr: u.Host, Settings: map[string]string{"session_asked": session(u, zkdlock.DefaultSessionTTL).String()}}
	var err error
	if s.Clock, err = zkClock(ctx, d.Conn(), strings.TrimSuffix(u.Path, "/")+prefix+"-audit-clock-"); errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrNoAuth) {
		s.Unreadable = "the clock: creating a znode: " + err.Error()
	} else if err != nil {
		return nil, err
	}
	if t := d.SessionTimeout(); t > 0 {
		s.Settings["session_negotiated"] = t.String()
	}
	return []Server{s}, nil
}

// zkClock reads the server's clock as the mtime it gives an ephemeral
// sequential znode at path, which it sets and then deletes.
func zkClock(ctx context.Context, c *zk.Conn, path string) (*Skew, error) {
	node, err := callCtx(ctx, func() (string, error) {
		return c.Create(path, nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	})
	if err != nil {
		return nil, err
	}
	defer c.Delete(node, -1)
	return measureSkew(ctx, time.Millisecond, func(ctx context.Context) (time.Time, error) {
		st, err := callCtx(ctx, func() (*zk.Stat, error) { return c.Set(node, nil, -1) })
		if err != nil {
			return time.Time{}, err
		}
		return time.UnixMilli(st.Mtime), nil
	})
}

// readMemcached reads every server's eviction and flush_all settings and
// its clock (whole seconds) with "stats settings" and "stats" over connections of its own:
// the driver's client has no stats requests.
func readMemcached(ctx context.Context, u *url.URL) ([]Server, error) {
	hosts, err := urlutil.Hosts(u, "11211")
	if err != nil {
		return nil, err
	}
	var out []Server
	for _, h := range hosts {
		conn, err := new(net.Dialer).DialContext(ctx, "tcp", h)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		if dl, ok := ctx.Deadline(); ok {
			conn.SetDeadline(dl)
		}
		r := bufio.NewReader(conn)
		stats := func(which string) (map[string]string, error) {
			if _, err := fmt.Fprintf(conn, "stats%s\r\n", which); err != nil {
				return nil, err
			}
			m := map[string]string{}
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return nil, err
				}
				f := strings.Fields(line)
				switch {
				case len(f) >= 2 && f[0] == "STAT":
					m[f[1]] = strings.Join(f[2:], " ")
				case len(f) == 1 && f[0] == "END":
					return m, nil
				default:
					return nil, fmt.Errorf("stats%s: %q", which, strings.TrimSpace(line))
				}
			}
		}
		set, err := stats(" settings")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", h, err)
		}
		s := Server{Addr: h, Settings: map[string]string{}}
		for _, k := range []string{"evictions", "maxbytes", "temp_lru", "temporary_ttl", "flush_enabled"} {
			s.Settings[k] = set[k]
		}
		s.Clock, err = measureSkew(ctx, time.Second, func(context.Context) (time.Time, error) {
			m, err := stats("")
			if err != nil {
				return time.Time{}, err
			}
			sec, err := strconv.ParseInt(m["time"], 10, 64)
			return time.Unix(sec, 0), err
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", h, err)
		}
		out = append(out, s)
	}
	return out, nil
}
