package check

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/etcddlock"
	"github.com/dlockhq/dlock/internal/urlutil"
	"github.com/dlockhq/dlock/memcachedlock"
	"github.com/dlockhq/dlock/natsdlock"
	"github.com/dlockhq/dlock/quorum"
	"github.com/dlockhq/dlock/redisdlock"
	"github.com/dlockhq/dlock/sqldlock"
	_ "github.com/dlockhq/dlock/sqldlock/mysql"    // the mysql:// store
	_ "github.com/dlockhq/dlock/sqldlock/postgres" // the postgres:// store and the "pgx" database/sql driver
	_ "github.com/dlockhq/dlock/sqldlock/sqlite"   // the sqlite:// store and the "sqlite" database/sql driver
	"github.com/dlockhq/dlock/zkdlock"
)

// resourceName names the protected data in the store: a Redis hash and
// memcached items (after the URL's prefix), a row of the table
// resourceTable. On etcd and ZooKeeper the data sits beside the driver's
// prefix, as PREFIX-check-resource; on NATS it is the keys
// dlock-check-resource.counter and .fence of the driver's bucket.
const (
	resourceName  = "dlock-check-resource"
	resourceTable = "dlock_check"
)

// resource is what the workload protects: a counter that workers update by
// a deliberately non-atomic read and write (two holders at once lose an
// update), and a fenced register that accepts a token only if it is higher
// than every token it accepted before, checked atomically by the store.
type resource interface {
	// reset sets the counter and the register to zero, creating them.
	reset(ctx context.Context) error
	read(ctx context.Context) (int64, error)
	write(ctx context.Context, v int64) error
	// fence writes token to the register and reports whether the
	// register accepted it.
	fence(ctx context.Context, token uint64) (bool, error)
	// state returns the counter and the register.
	state(ctx context.Context) (counter int64, fence uint64, err error)
	// remove deletes the counter and the register.
	remove(ctx context.Context) error
	// close closes the connections the resource opened itself.
	close() error
}

// openResource returns the resource kept in the store at rawURL, whose
// driver (opened by dlock.Open on rawURL) is drv. It uses the driver's own
// client where the driver exposes it, so that the resource's requests take
// the same path (and proxy) as the lock's.
func openResource(ctx context.Context, rawURL string, drv driver.Driver) (resource, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	prefix := func(def string) string {
		if p := u.Query().Get("prefix"); p != "" {
			return p
		}
		return def
	}
	switch d := drv.(type) {
	case *redisdlock.Driver:
		return &redisResource{c: d.Client(), key: prefix(redisdlock.DefaultPrefix) + resourceName}, nil
	case *quorum.Driver:
		// The nodes' clients are the driver's own: keep the resource on
		// the first server.
		return openRedlockResource(u, prefix(redisdlock.DefaultPrefix)+resourceName)
	case *etcddlock.Driver:
		// Beside the driver's prefix, not under it: /dlock-check-resource/.
		return &etcdResource{c: d.Client(), key: strings.TrimSuffix(prefix(etcddlock.DefaultPrefix), "/") + "-check-resource/"}, nil
	case *zkdlock.Driver:
		// Beside the driver's znode: /dlock-check-resource.
		return &zkResource{c: d.Conn(), path: strings.TrimSuffix(u.Path, "/") + prefix(zkdlock.DefaultPrefix) + "-check-resource"}, nil
	case *memcachedlock.Driver:
		return &memcachedResource{c: d.Client(), key: prefix(memcachedlock.DefaultPrefix) + resourceName}, nil
	case *sqldlock.Driver:
		return openSQLResource(ctx, u, d.Dialect())
	case *natsdlock.Driver:
		// In the driver's bucket, under a key with a dot, which no lock has.
		return &natsResource{kv: d.KeyValue(), key: resourceName + "."}, nil
	}
	return nil, fmt.Errorf("%s stores cannot keep the checked resource; give --resource URL", u.Scheme)
}

// fenceScript is the fenced write on Redis: the register takes the token
// only if it is higher than the one it holds.
var fenceScript = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) > cur then
	redis.call('HSET', KEYS[1], 'fence', ARGV[1])
	return 1
end
return 0`)

// redisResource is a hash with the fields counter and fence (one key, so
// that it works on Redis Cluster too).
type redisResource struct {
	c     redis.UniversalClient
	key   string
	owned bool
}

func openRedlockResource(u *url.URL, key string) (resource, error) {
	nodes, err := redlockNodes(u)
	if err != nil {
		return nil, err
	}
	return &redisResource{c: redis.NewClient(nodes[0]), key: key, owned: true}, nil
}

// redlockNodes returns the go-redis options of every server of a Redlock
// URL.
func redlockNodes(u *url.URL) ([]*redis.Options, error) {
	hosts, err := urlutil.Hosts(u, "6379")
	if err != nil || len(hosts) == 0 {
		return nil, fmt.Errorf("redlock URL names no server")
	}
	q := u.Query()
	for _, k := range []string{"prefix", "mode", "drift_factor", "drift_margin", "fence"} {
		q.Del(k)
	}
	nodes := make([]*redis.Options, len(hosts))
	for i, h := range hosts {
		ru := url.URL{Scheme: "redis", User: u.User, Host: h, Path: u.Path, RawQuery: q.Encode()}
		o, err := redis.ParseURL(ru.String())
		if err != nil {
			return nil, errors.New(strings.TrimPrefix(err.Error(), "redis: "))
		}
		o.ContextTimeoutEnabled = true
		nodes[i] = o
	}
	return nodes, nil
}

func (r *redisResource) reset(ctx context.Context) error {
	return r.c.HSet(ctx, r.key, "counter", 0, "fence", 0).Err()
}

func (r *redisResource) read(ctx context.Context) (int64, error) {
	v, err := r.c.HGet(ctx, r.key, "counter").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil // the store lost it: start again from zero
	}
	return v, err
}

func (r *redisResource) write(ctx context.Context, v int64) error {
	return r.c.HSet(ctx, r.key, "counter", v).Err()
}

func (r *redisResource) fence(ctx context.Context, token uint64) (bool, error) {
	n, err := fenceScript.Run(ctx, r.c, []string{r.key}, token).Int()
	return n == 1, err
}

func (r *redisResource) state(ctx context.Context) (int64, uint64, error) {
	vs, err := r.c.HMGet(ctx, r.key, "counter", "fence").Result()
	if err != nil {
		return 0, 0, err
	}
	c, _ := vs[0].(string)
	f, _ := vs[1].(string)
	return parseState(c, f)
}

func (r *redisResource) remove(ctx context.Context) error { return r.c.Del(ctx, r.key).Err() }

func (r *redisResource) close() error {
	if r.owned {
		return r.c.Close()
	}
	return nil
}

// parseState parses a counter and a register kept as decimal text; missing
// values (a store that lost them) count as zero.
func parseState(counter, fence string) (int64, uint64, error) {
	var c int64
	var f uint64
	var err error
	if counter != "" {
		if c, err = strconv.ParseInt(strings.TrimSpace(counter), 10, 64); err != nil {
			return 0, 0, fmt.Errorf("bad counter %q", counter)
		}
	}
	if fence != "" {
		if f, err = strconv.ParseUint(strings.TrimSpace(fence), 10, 64); err != nil {
			return 0, 0, fmt.Errorf("bad register %q", fence)
		}
	}
	return c, f, nil
}

// padded writes a token so that etcd's and memcached's byte comparisons
// order tokens as numbers.
func padded(token uint64) string { return fmt.Sprintf("%020d", token) }

// etcdResource is two keys; the fenced write is a Txn comparing the
// register's value.
type etcdResource struct {
	c   *clientv3.Client
	key string // prefix of the two keys
}

func (r *etcdResource) reset(ctx context.Context) error {
	_, err := r.c.Txn(ctx).Then(clientv3.OpPut(r.key+"counter", "0"), clientv3.OpPut(r.key+"fence", padded(0))).Commit()
	return err
}

func (r *etcdResource) get(ctx context.Context, name string) (string, error) {
	resp, err := r.c.Get(ctx, r.key+name)
	if err != nil || len(resp.Kvs) == 0 {
		return "", err
	}
	return string(resp.Kvs[0].Value), nil
}

func (r *etcdResource) read(ctx context.Context) (int64, error) {
	s, err := r.get(ctx, "counter")
	if err != nil {
		return 0, err
	}
	c, _, err := parseState(s, "")
	return c, err
}

func (r *etcdResource) write(ctx context.Context, v int64) error {
	_, err := r.c.Put(ctx, r.key+"counter", strconv.FormatInt(v, 10))
	return err
}

func (r *etcdResource) fence(ctx context.Context, token uint64) (bool, error) {
	k := r.key + "fence"
	resp, err := r.c.Txn(ctx).If(clientv3.Compare(clientv3.Value(k), "<", padded(token))).Then(clientv3.OpPut(k, padded(token))).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

func (r *etcdResource) state(ctx context.Context) (int64, uint64, error) {
	c, err := r.get(ctx, "counter")
	if err != nil {
		return 0, 0, err
	}
	f, err := r.get(ctx, "fence")
	if err != nil {
		return 0, 0, err
	}
	return parseState(c, f)
}

func (r *etcdResource) remove(ctx context.Context) error {
	_, err := r.c.Delete(ctx, r.key, clientv3.WithPrefix())
	return err
}

func (r *etcdResource) close() error { return nil }

// zkResource is a znode with the children counter and fence; the fenced
// write is a set conditional on the register's version.
type zkResource struct {
	c    *zk.Conn
	path string
}

// callCtx runs a call of a client library that takes no context
// (go-zookeeper, gomemcache), returning when ctx ends (the call goes on and
// may still land, as a request on the wire does).
func callCtx[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

func (r *zkResource) reset(ctx context.Context) error {
	_, err := callCtx(ctx, func() (struct{}, error) {
		acl := zk.WorldACL(zk.PermAll)
		for _, p := range []string{r.path, r.path + "/counter", r.path + "/fence"} {
			if _, err := r.c.Create(p, []byte("0"), 0, acl); errors.Is(err, zk.ErrNodeExists) {
				_, err = r.c.Set(p, []byte("0"), -1)
				if err != nil {
					return struct{}{}, err
				}
			} else if err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	return err
}

func (r *zkResource) get(ctx context.Context, name string) (string, int32, error) {
	type got struct {
		b   []byte
		ver int32
	}
	g, err := callCtx(ctx, func() (got, error) {
		b, st, err := r.c.Get(r.path + "/" + name)
		if err != nil {
			return got{}, err
		}
		return got{b, st.Version}, nil
	})
	return string(g.b), g.ver, err
}

func (r *zkResource) read(ctx context.Context) (int64, error) {
	s, _, err := r.get(ctx, "counter")
	if err != nil {
		return 0, err
	}
	c, _, err := parseState(s, "")
	return c, err
}

func (r *zkResource) write(ctx context.Context, v int64) error {
	_, err := callCtx(ctx, func() (*zk.Stat, error) {
		return r.c.Set(r.path+"/counter", []byte(strconv.FormatInt(v, 10)), -1)
	})
	return err
}

func (r *zkResource) fence(ctx context.Context, token uint64) (bool, error) {
	for {
		s, ver, err := r.get(ctx, "fence")
		if err != nil {
			return false, err
		}
		_, cur, err := parseState("", s)
		if err != nil || token <= cur {
			return false, err
		}
		_, err = callCtx(ctx, func() (*zk.Stat, error) {
			return r.c.Set(r.path+"/fence", []byte(strconv.FormatUint(token, 10)), ver)
		})
		if !errors.Is(err, zk.ErrBadVersion) {
			return err == nil, err
		}
	}
}

func (r *zkResource) state(ctx context.Context) (int64, uint64, error) {
	c, _, err := r.get(ctx, "counter")
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return 0, 0, err
	}
	f, _, err := r.get(ctx, "fence")
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return 0, 0, err
	}
	return parseState(c, f)
}

func (r *zkResource) remove(ctx context.Context) error {
	_, err := callCtx(ctx, func() (struct{}, error) {
		for _, p := range []string{r.path + "/counter", r.path + "/fence", r.path} {
			if err := r.c.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	return err
}

func (r *zkResource) close() error { return nil }

// memcachedResource is two items; the fenced write is a cas.
type memcachedResource struct {
	c   *memcache.Client
	key string
}

func (r *memcachedResource) reset(ctx context.Context) error {
	_, err := callCtx(ctx, func() (struct{}, error) {
		return struct{}{}, errors.Join(
			r.c.Set(&memcache.Item{Key: r.key + ":counter", Value: []byte("0")}),
			r.c.Set(&memcache.Item{Key: r.key + ":fence", Value: []byte(padded(0))}))
	})
	return err
}

func (r *memcachedResource) get(ctx context.Context, name string) (*memcache.Item, error) {
	return callCtx(ctx, func() (*memcache.Item, error) { return r.c.Get(r.key + ":" + name) })
}

func (r *memcachedResource) read(ctx context.Context) (int64, error) {
	it, err := r.get(ctx, "counter")
	if errors.Is(err, memcache.ErrCacheMiss) {
		return 0, nil // evicted or lost: start again from zero
	}
	if err != nil {
		return 0, err
	}
	c, _, err := parseState(string(it.Value), "")
	return c, err
}

func (r *memcachedResource) write(ctx context.Context, v int64) error {
	_, err := callCtx(ctx, func() (struct{}, error) {
		return struct{}{}, r.c.Set(&memcache.Item{Key: r.key + ":counter", Value: []byte(strconv.FormatInt(v, 10))})
	})
	return err
}

func (r *memcachedResource) fence(ctx context.Context, token uint64) (bool, error) {
	for {
		it, err := r.get(ctx, "fence")
		if errors.Is(err, memcache.ErrCacheMiss) {
			// Evicted or lost: the register starts again.
			_, err = callCtx(ctx, func() (struct{}, error) {
				return struct{}{}, r.c.Add(&memcache.Item{Key: r.key + ":fence", Value: []byte(padded(token))})
			})
			if !errors.Is(err, memcache.ErrNotStored) {
				return err == nil, err
			}
			continue
		}
		if err != nil {
			return false, err
		}
		_, cur, err := parseState("", string(it.Value))
		if err != nil || token <= cur {
			return false, err
		}
		it.Value = []byte(padded(token))
		_, err = callCtx(ctx, func() (struct{}, error) { return struct{}{}, r.c.CompareAndSwap(it) })
		if !errors.Is(err, memcache.ErrCASConflict) && !errors.Is(err, memcache.ErrCacheMiss) {
			return err == nil, err
		}
	}
}

func (r *memcachedResource) state(ctx context.Context) (int64, uint64, error) {
	var vals [2]string
	for i, name := range []string{"counter", "fence"} {
		it, err := r.get(ctx, name)
		switch {
		case errors.Is(err, memcache.ErrCacheMiss):
		case err != nil:
			return 0, 0, err
		default:
			vals[i] = string(it.Value)
		}
	}
	return parseState(vals[0], vals[1])
}

func (r *memcachedResource) remove(ctx context.Context) error {
	_, err := callCtx(ctx, func() (struct{}, error) {
		var errs []error
		for _, name := range []string{"counter", "fence"} {
			if err := r.c.Delete(r.key + ":" + name); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
				errs = append(errs, err)
			}
		}
		return struct{}{}, errors.Join(errs...)
	})
	return err
}

func (r *memcachedResource) close() error { return nil }

// natsResource is two keys of a NATS key-value bucket; the fenced write
// is an update conditional on the register's revision.
type natsResource struct {
	kv  jetstream.KeyValue
	key string // prefix of the two keys
}

func (r *natsResource) reset(ctx context.Context) error {
	_, err1 := r.kv.PutString(ctx, r.key+"counter", "0")
	_, err2 := r.kv.PutString(ctx, r.key+"fence", "0")
	return errors.Join(err1, err2)
}

// get returns the value of one of the keys ("" if it has none) and its
// revision.
func (r *natsResource) get(ctx context.Context, name string) (string, uint64, error) {
	e, err := r.kv.Get(ctx, r.key+name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, err
	}
	return string(e.Value()), e.Revision(), nil
}

func (r *natsResource) read(ctx context.Context) (int64, error) {
	v, _, err := r.get(ctx, "counter")
	if err != nil {
		return 0, err
	}
	c, _, err := parseState(v, "")
	return c, err
}

func (r *natsResource) write(ctx context.Context, v int64) error {
	_, err := r.kv.PutString(ctx, r.key+"counter", strconv.FormatInt(v, 10))
	return err
}

func (r *natsResource) fence(ctx context.Context, token uint64) (bool, error) {
	for {
		v, rev, err := r.get(ctx, "fence")
		if err != nil {
			return false, err
		}
		_, cur, err := parseState("", v)
		if err != nil || token <= cur {
			return false, err
		}
		if rev == 0 {
			_, err = r.kv.Create(ctx, r.key+"fence", []byte(strconv.FormatUint(token, 10)))
		} else {
			_, err = r.kv.Update(ctx, r.key+"fence", []byte(strconv.FormatUint(token, 10)), rev)
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return err == nil, err
		}
	}
}

func (r *natsResource) state(ctx context.Context) (int64, uint64, error) {
	c, _, err1 := r.get(ctx, "counter")
	f, _, err2 := r.get(ctx, "fence")
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, err
	}
	return parseState(c, f)
}

// remove purges the two keys; their purge markers expire after a second.
func (r *natsResource) remove(ctx context.Context) error {
	return errors.Join(r.kv.Purge(ctx, r.key+"counter", jetstream.PurgeTTL(time.Second)),
		r.kv.Purge(ctx, r.key+"fence", jetstream.PurgeTTL(time.Second)))
}

func (r *natsResource) close() error { return nil }

// sqlResource is a row of the table dlock_check; the fenced write is an
// UPDATE conditional on the register's value.
type sqlResource struct {
	db      *sql.DB
	dialect sqldlock.Dialect
}

// openSQLResource opens its own connection pool on the database of u.
func openSQLResource(ctx context.Context, u *url.URL, d sqldlock.Dialect) (resource, error) {
	db, err := openSQL(u, d)
	if err != nil {
		return nil, err
	}
	return &sqlResource{db: db, dialect: d}, nil
}

// openSQL opens a connection pool of its own on the database of u, as the
// driver of dialect d reaches it.
func openSQL(u *url.URL, d sqldlock.Dialect) (*sql.DB, error) {
	q := u.Query()
	q.Del("table")
	q.Del("fair")
	var db *sql.DB
	switch d {
	case sqldlock.SQLite:
		p := u.Path
		if u.Opaque != "" {
			p, _ = url.PathUnescape(u.Opaque)
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		file := url.URL{Scheme: "file", Path: abs}
		db, err = sql.Open("sqlite", file.String()+"?_busy_timeout=10000&_journal_mode=WAL&_txlock=immediate")
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(1)
	case sqldlock.Postgres:
		pu := *u
		pu.RawQuery = q.Encode()
		var err error
		if db, err = sql.Open("pgx", pu.String()); err != nil {
			return nil, err
		}
	case sqldlock.MySQL:
		cfg, err := mysql.ParseDSN("/?" + q.Encode())
		if err != nil {
			return nil, err
		}
		host, port := u.Hostname(), u.Port()
		if host == "" {
			host = "127.0.0.1"
		}
		if port == "" {
			port = "3306"
		}
		cfg.Net, cfg.Addr, cfg.DBName = "tcp", net.JoinHostPort(host, port), strings.TrimPrefix(u.Path, "/")
		if u.User != nil {
			cfg.User = u.User.Username()
			cfg.Passwd, _ = u.User.Password()
		}
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, err
		}
		db = sql.OpenDB(conn)
	default:
		return nil, fmt.Errorf("unknown SQL dialect %v", d)
	}
	return db, nil
}

// q rewrites the ? placeholders of query for PostgreSQL.
func (r *sqlResource) q(query string) string {
	if r.dialect != sqldlock.Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (r *sqlResource) reset(ctx context.Context) error {
	if _, err := r.db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+resourceTable+
		" (name VARCHAR(191) PRIMARY KEY, counter BIGINT NOT NULL, fence BIGINT NOT NULL)"); err != nil {
		return err
	}
	if err := r.remove(ctx); err != nil {
		return err
	}
	_, err := r.db.ExecContext(ctx, r.q("INSERT INTO "+resourceTable+" (name, counter, fence) VALUES (?, 0, 0)"), resourceName)
	return err
}

func (r *sqlResource) read(ctx context.Context) (int64, error) {
	var v int64
	err := r.db.QueryRowContext(ctx, r.q("SELECT counter FROM "+resourceTable+" WHERE name = ?"), resourceName).Scan(&v)
	return v, err
}

func (r *sqlResource) write(ctx context.Context, v int64) error {
	_, err := r.db.ExecContext(ctx, r.q("UPDATE "+resourceTable+" SET counter = ? WHERE name = ?"), v, resourceName)
	return err
}

func (r *sqlResource) fence(ctx context.Context, token uint64) (bool, error) {
	res, err := r.db.ExecContext(ctx, r.q("UPDATE "+resourceTable+" SET fence = ? WHERE name = ? AND fence < ?"), int64(token), resourceName, int64(token))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func (r *sqlResource) state(ctx context.Context) (int64, uint64, error) {
	var c, f int64
	err := r.db.QueryRowContext(ctx, r.q("SELECT counter, fence FROM "+resourceTable+" WHERE name = ?"), resourceName).Scan(&c, &f)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, nil
	}
	return c, uint64(f), err
}

func (r *sqlResource) remove(ctx context.Context) error {
	_, err := r.db.ExecContext(ctx, r.q("DELETE FROM "+resourceTable+" WHERE name = ?"), resourceName)
	return err
}

func (r *sqlResource) close() error { return r.db.Close() }
