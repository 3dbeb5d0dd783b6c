package testsrv

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/internal/testing/testcert"
)

func newCerts(t *testing.T) *testcert.Set {
	t.Helper()
	certs, err := testcert.New(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	return certs
}

func stopLater(t *testing.T, s *Server) {
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
}

// redisTLSClient returns a go-redis client of the harness's kind that
// speaks TLS with cfg's client certificate (if the server demands one) and
// password.
func redisTLSClient(t *testing.T, addr string, cfg RedisTLS) *redis.Client {
	t.Helper()
	tc, err := cfg.Certs.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.AuthClients {
		tc.Certificates = nil
	}
	o := redisOptions(addr)
	o.TLSConfig = tc
	o.Username, o.Password = cfg.User, cfg.Password
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRedisTLS checks a TLS Redis server: it answers over TLS with the
// client certificate and password, has no plain port, and comes back over
// TLS after a restart.
func TestRedisTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := RedisTLS{Certs: newCerts(t), AuthClients: true, Password: "pw"}
	s, err := StartRedisTLS(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopLater(t, s)
	wantURL := "rediss://:pw@" + s.Addr + "/0?" + url.Values{"cacert": {cfg.Certs.CA}, "cert": {cfg.Certs.ClientCert}, "key": {cfg.Certs.ClientKey}}.Encode()
	if s.Name != RedisTLSName || s.URL != wantURL {
		t.Errorf("Name %q, URL %q; want %q, %q", s.Name, s.URL, RedisTLSName, wantURL)
	}
	c := redisTLSClient(t, s.Addr, cfg)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET over TLS: %v", err)
	}
	if err := pingRedisPort(ctx, s.port); err == nil {
		t.Error("a plain PING got PONG; want TLS only")
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Errorf("PING over TLS after Restart: %v", err)
	}
}

// TestRedisQuorumTLS checks the TLS quorum servers: every one answers as
// the ACL user, and none as the default user.
func TestRedisQuorumTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := RedisTLS{Certs: newCerts(t), User: "locker", Password: "pw"}
	s, err := StartRedisQuorumTLS(ctx, 3, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopLater(t, s)
	if len(s.Addrs) != 3 || s.URL != "redlocks://locker:pw@"+strings.Join(s.Addrs, ",")+"?cacert="+url.QueryEscape(cfg.Certs.CA) {
		t.Errorf("Addrs %q, URL %q", s.Addrs, s.URL)
	}
	for _, a := range s.Addrs {
		if err := redisTLSClient(t, a, cfg).Ping(ctx).Err(); err != nil {
			t.Errorf("%s: PING as locker: %v", a, err)
		}
		def := cfg
		def.User = ""
		if err := redisTLSClient(t, a, def).Ping(ctx).Err(); err == nil {
			t.Errorf("%s: PING as the default user succeeded; want it off", a)
		}
	}
}

// TestPostgresTLS checks that a TLS PostgreSQL server's databases are
// reached over TLS and never without.
func TestPostgresTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := StartPostgresTLS(ctx, PostgresTLS{Certs: newCerts(t), ClientCerts: true})
	if err != nil {
		t.Fatal(err)
	}
	stopLater(t, s)
	u, _, err := s.NewDatabase(ctx, "tls_db")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("%s: %v", u, err)
	}
	var ssl bool
	err = conn.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl)
	conn.Close(ctx)
	if err != nil || !ssl {
		t.Errorf("pg_stat_ssl.ssl = %v, %v; want a TLS connection", ssl, err)
	}
	if c, err := pgx.Connect(ctx, pgURLParams(s.port, "tls_db", "sslmode=disable")); err == nil {
		c.Close(ctx)
		t.Error("a connection without TLS was accepted")
	}
}

// TestMariaDBTLS checks that the TLS account of a MariaDB server connects
// over TLS through its DSN, and not without TLS.
func TestMariaDBTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	certs := newCerts(t)
	s, err := StartMariaDBTLS(ctx, MariaDBTLS{Certs: certs})
	if err != nil {
		t.Fatal(err)
	}
	stopLater(t, s)
	client, err := certs.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	client.Certificates = nil
	if err := mysql.RegisterTLSConfig(MariaDBTLSName, client); err != nil {
		t.Fatal(err)
	}
	_, dsn, err := s.NewDatabase(ctx, "tls_db")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var name, cipher string
	if err := db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher); err != nil || cipher == "" {
		t.Errorf("Ssl_cipher %q, %v; want a TLS connection", cipher, err)
	}
	plain := MariaDBTLSUser + ":" + MariaDBTLSPassword + "@tcp(" + s.Addr + ")/tls_db"
	if err := pingMySQL(ctx, plain); err == nil {
		t.Error("the TLS account connected without TLS")
	}
}
