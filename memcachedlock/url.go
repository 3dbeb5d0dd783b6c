package memcachedlock

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

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
	if p := strings.Trim(u.Path, "/"); p != "" {
		return nil, urlutil.Error(u, "has a path (%q); write memcached://host:port[,host:port]", u.Path)
	}
	hosts, err := urlutil.Hosts(u, defaultPort)
	if err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		return nil, urlutil.Error(u, "names no server")
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
	for k, vs := range u.Query() {
		v := vs[len(vs)-1]
		switch k {
		case "prefix":
			opts = append(opts, WithPrefix(v))
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, urlutil.Error(u, "timeout=%q is not a positive duration (write 500ms, 2s)", v)
			}
			mc.Timeout = d
		case urlutil.ParamConnectTimeout:
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, urlutil.Error(u, "%s=%q is not a positive duration (write 500ms, 5s)", k, v)
			}
			connect = d
		case "max_idle_conns":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, urlutil.Error(u, "max_idle_conns=%q is not a positive number", v)
			}
			mc.MaxIdleConns = n
		default:
			return nil, urlutil.Error(u, "unknown parameter %q (memcached URLs take prefix, timeout, %s and max_idle_conns)", k, urlutil.ParamConnectTimeout)
		}
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
