package memcachedlock

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/urlutil"
)

func init() {
	dlock.Register("memcached", open, (*Driver)(nil)) // Permanent looks at the error alone
}

// Defaults of clients opened from a URL.
const (
	defaultPort         = "11211"
	defaultMaxIdleConns = 64
)

// open opens memcached://host:port[,host:port...][?prefix=&timeout=&connect_timeout=&max_idle_conns=]:
// timeout bounds each request (500ms by default), connect_timeout the
// first (5s by default, and at least timeout).
func open(ctx context.Context, u *url.URL) (driver.Driver, error) {
	if u.User != nil {
		return nil, urlutil.Error(u, "has user information; memcached's text protocol has no authentication")
	}
	if err := urlutil.NoPath(u, "memcached://host:port[,host:port]"); err != nil {
		return nil, err
	}
	hosts, err := urlutil.Servers(u, defaultPort)
	if err != nil {
		return nil, err
	}
	// Resolve the addresses now: memcache.New drops the error.
	sl := new(memcache.ServerList)
	if err := sl.SetServers(hosts...); err != nil {
		return nil, urlutil.Error(u, "%v", err)
	}
	mc := memcache.NewFromSelector(sl)
	mc.MaxIdleConns = defaultMaxIdleConns
	var opts []Option
	connect := urlutil.DefaultConnectTimeout
	err = urlutil.Params(u, u.Query(), map[string]func(string) string{
		"prefix":                    func(v string) string { opts = append(opts, WithPrefix(v)); return "" },
		"timeout":                   urlutil.Duration(&mc.Timeout, 1, "500ms, 2s"),
		urlutil.ParamConnectTimeout: urlutil.Duration(&connect, 1, "500ms, 5s"),
		"max_idle_conns": func(v string) string {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return "is not a positive number"
			}
			mc.MaxIdleConns = n
			return ""
		},
	}, "memcached URLs take prefix, timeout, "+urlutil.ParamConnectTimeout+" and max_idle_conns")
	if err != nil {
		return nil, err
	}
	d, err := newDriver(mc, true, opts)
	if err != nil {
		mc.Close()
		return nil, err
	}
	conn := urlutil.Connect{Endpoints: hosts, Timeout: max(mc.Timeout, connect), TimeoutParam: urlutil.ParamConnectTimeout,
		TLSHint: "memcached URLs do not support TLS"}
	if err := conn.Do(ctx, func(ctx context.Context) error { return d.run(ctx, mc.Ping) }); err != nil {
		d.Close()
		return nil, fmt.Errorf("memcachedlock: connecting: %w", err)
	}
	return d, nil
}
