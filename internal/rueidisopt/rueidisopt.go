// Package rueidisopt makes rueidis client options from go-redis's, so that
// a Redis URL parsed by go-redis (redis.ParseURL and its kin) configures a
// rueidis client the same way: addresses, credentials, database, client
// name, TLS and timeouts. go-redis's pool settings have no rueidis
// counterpart and are left out.
package rueidisopt

import (
	"net"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// Single returns the options of a client of the one server o names (no
// Cluster or Sentinel discovery). rueidis returns such a client even when
// the server cannot be reached yet, with the dial error.
func Single(o *redis.Options) rueidis.ClientOption {
	return settle(rueidis.ClientOption{
		InitAddress: []string{o.Addr}, ForceSingleClient: true,
		Username: o.Username, Password: o.Password, SelectDB: o.DB,
		ClientName: o.ClientName, TLSConfig: o.TLSConfig,
	}, o.DialTimeout, o.ReadTimeout)
}

// Sentinel returns the options of a client of the master that o's
// Sentinels name.
func Sentinel(o *redis.FailoverOptions) rueidis.ClientOption {
	return settle(rueidis.ClientOption{
		InitAddress: o.SentinelAddrs,
		Sentinel: rueidis.SentinelOption{
			MasterSet: o.MasterName, Username: o.SentinelUsername, Password: o.SentinelPassword,
			TLSConfig: o.TLSConfig, Dialer: net.Dialer{Timeout: o.DialTimeout},
		},
		Username: o.Username, Password: o.Password, SelectDB: o.DB,
		ClientName: o.ClientName, TLSConfig: o.TLSConfig,
	}, o.DialTimeout, o.ReadTimeout)
}

// Cluster returns the options of a client of the Cluster o's addresses
// belong to.
func Cluster(o *redis.ClusterOptions) rueidis.ClientOption {
	return settle(rueidis.ClientOption{
		InitAddress: o.Addrs, Username: o.Username, Password: o.Password,
		ClientName: o.ClientName, TLSConfig: o.TLSConfig,
	}, o.DialTimeout, o.ReadTimeout)
}

// settle sets what a dlock driver needs of its rueidis client (see
// redisdlock.NewRueidis): one pipelined connection per server, so that a
// release cannot overtake an acquisition its caller gave up on; no
// command retries, since dlock retries on its own; no client-side cache.
// go-redis's dial timeout becomes rueidis's, and its read timeout the
// longest a connection may leave a command unanswered before it is closed
// (ConnWriteTimeout). Zero keeps rueidis's defaults.
func settle(opt rueidis.ClientOption, dial, read time.Duration) rueidis.ClientOption {
	opt.Dialer.Timeout = dial
	opt.ConnWriteTimeout = read
	opt.PipelineMultiplex = -1
	opt.DisableRetry = true
	opt.DisableCache = true
	return opt
}
