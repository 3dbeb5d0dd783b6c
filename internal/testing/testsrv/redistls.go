package testsrv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dlockhq/dlock/internal/testing/testcert"
)

// Names of the servers started by StartRedisTLS and StartRedisQuorumTLS.
const (
	// RedisTLSName is the Name of a server started by StartRedisTLS.
	RedisTLSName = "redis-tls"
	// RedisQuorumTLSName is the Name of the servers started by
	// StartRedisQuorumTLS.
	RedisQuorumTLSName = "redis-quorum-tls"
)

// RedisTLS describes the TLS and authentication of the Redis servers that
// StartRedisTLS and StartRedisQuorumTLS start.
type RedisTLS struct {
	// Certs holds the server's certificate and key, and the authority
	// that client certificates must chain to. Required.
	Certs *testcert.Set
	// AuthClients makes the server demand a client certificate signed by
	// Certs.CA (tls-auth-clients yes); without it the server asks for none
	// (tls-auth-clients no).
	AuthClients bool
	// Password, if set, is required of clients: the password of the
	// default user (requirepass), or of User if User is set.
	Password string
	// User, if set, is an ACL user with the password Password allowed
	// every command and key; the default user is then turned off.
	User string
}

// StartRedisTLS starts a standalone Redis server (as StartRedis does) that
// takes TLS connections only: no plain port (--port 0), --tls-port on a free
// port on 127.0.0.1, the certificate and key of cfg.Certs, and client
// certificates and a password as cfg asks. It waits until the server
// answers PING over TLS (authenticated, when cfg asks for a password).
//
// Server.URL is "rediss://[user:password@]127.0.0.1:port/0?cacert=CA", with
// cert and key (the client certificate of cfg.Certs) when cfg.AuthClients is
// set. The error wraps ErrMissing if redis-server cannot be found.
func StartRedisTLS(ctx context.Context, cfg RedisTLS) (*Server, error) {
	bin, err := findRedis()
	if err != nil {
		return nil, err
	}
	if cfg.Certs == nil {
		return nil, errors.New("testsrv: StartRedisTLS: RedisTLS.Certs is nil")
	}
	dir, err := makeTempDir(RedisTLSName, nil)
	if err != nil {
		return nil, err
	}
	s, err := startRedisTLSProcess(ctx, bin, RedisTLSName, dir, cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("testsrv: starting %s: %w", RedisTLSName, err)
	}
	s.URL = cfg.url("rediss", s.Addr, "/0")
	return s, nil
}

// StartRedisQuorumTLS starts n independent TLS Redis servers as
// StartRedisTLS does (in parallel), for Redlock-style quorum locks over TLS.
// The returned Server stands for all of them, as in StartRedisQuorum; its
// URL is "redlocks://[user:password@]a,b,c,...?cacert=CA" (with cert and key
// when cfg.AuthClients is set).
func StartRedisQuorumTLS(ctx context.Context, n int, cfg RedisTLS) (_ *Server, err error) {
	if n < 1 {
		return nil, fmt.Errorf("testsrv: StartRedisQuorumTLS: n = %d, want at least 1", n)
	}
	if cfg.Certs == nil {
		return nil, errors.New("testsrv: StartRedisQuorumTLS: RedisTLS.Certs is nil")
	}
	bin, err := findRedis()
	if err != nil {
		return nil, err
	}
	s, err := newGroup(RedisQuorumTLSName)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = s.Stop()
			err = fmt.Errorf("testsrv: starting %s: %w", RedisQuorumTLSName, err)
		}
	}()
	if err := s.startMembers(ctx, n, func(ctx context.Context, i int) (*Server, error) {
		name := "node" + strconv.Itoa(i)
		dir := filepath.Join(s.Dir, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		m, err := startRedisTLSProcess(ctx, bin, s.Name+"/"+name, dir, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return m, nil
	}); err != nil {
		return nil, err
	}
	s.URL = cfg.url("redlocks", strings.Join(s.Addrs, ","), "")
	return s, nil
}

// startRedisTLSProcess starts one TLS redis-server in dir (which exists).
func startRedisTLSProcess(ctx context.Context, bin, name, dir string, cfg RedisTLS) (*Server, error) {
	client, err := cfg.Certs.ClientConfig()
	if err != nil {
		return nil, err
	}
	if !cfg.AuthClients {
		client.Certificates = nil // the server must do without
	}
	extra := func(port int) ([]string, error) {
		auth := "no"
		if cfg.AuthClients {
			auth = "yes"
		}
		args := []string{
			"--port", "0", // overrides the plain port of redisBaseArgs
			"--tls-port", strconv.Itoa(port),
			"--tls-cert-file", cfg.Certs.ServerCert,
			"--tls-key-file", cfg.Certs.ServerKey,
			"--tls-ca-cert-file", cfg.Certs.CA,
			"--tls-auth-clients", auth,
		}
		switch {
		case cfg.User != "":
			// Each word of an option is an argument of its own.
			args = append(args, "--user", "default", "off",
				"--user", cfg.User, "on", ">"+cfg.Password, "~*", "&*", "+@all")
		case cfg.Password != "":
			args = append(args, "--requirepass", cfg.Password)
		}
		return args, nil
	}
	return startRedisProcessReady(ctx, bin, name, dir, nil, extra, func(ctx context.Context, port int) error {
		return pingRedis(ctx, port, client, cfg.User, cfg.Password)
	})
}

// url returns the URL of servers at hosts with the given scheme and path.
func (cfg RedisTLS) url(scheme, hosts, path string) string {
	q := url.Values{"cacert": {cfg.Certs.CA}}
	if cfg.AuthClients {
		q.Set("cert", cfg.Certs.ClientCert)
		q.Set("key", cfg.Certs.ClientKey)
	}
	u := url.URL{Scheme: scheme, Host: hosts, Path: path, RawQuery: q.Encode()}
	switch {
	case cfg.User != "":
		u.User = url.UserPassword(cfg.User, cfg.Password)
	case cfg.Password != "":
		u.User = url.UserPassword("", cfg.Password)
	}
	return u.String()
}
