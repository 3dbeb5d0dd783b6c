package zkdlock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testcert"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// connect opens a ZooKeeper connection of the test's own to addr, over TLS
// with cfg if it is not nil, with the digest credentials userPass if not
// empty, and waits for its session. It is closed when t ends.
func connect(t *testing.T, addr string, cfg *tls.Config, userPass string) *zk.Conn {
	t.Helper()
	dialer := zk.Dialer(net.DialTimeout)
	if cfg != nil {
		dialer = tlsDialer(cfg)
	}
	c, events, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(discard{}), zk.WithDialer(dialer))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		c.Close()
		<-done
	})
	session := make(chan struct{})
	go func() {
		defer close(done)
		first := session
		for ev := range events {
			if ev.State == zk.StateHasSession && first != nil {
				close(first)
				first = nil
			}
		}
	}()
	wait(t, session, "a session")
	if userPass != "" {
		if err := c.AddAuth("digest", []byte(userPass)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// protect creates the znode p, readable and writable by the digest user
// user:password alone, through c.
func protect(t *testing.T, c *zk.Conn, p, user, password string) {
	t.Helper()
	if _, err := c.Create(p, nil, zk.FlagPersistent, zk.DigestACL(zk.PermAll, user, password)); err != nil {
		t.Fatal(err)
	}
}

// zkURL returns zk://[user:password@]addr with the query q.
func zkURL(addr string, user *url.Userinfo, q url.Values) string {
	return (&url.URL{Scheme: "zk", Host: addr, User: user, RawQuery: q.Encode()}).String()
}

// lockUnder opens u, takes the lock k, checks through admin that its
// znodes are under root with the ACL want, releases it, closes the client
// and checks that the driver deleted them.
func lockUnder(t *testing.T, u string, admin *zk.Conn, root, k string, want []zk.ACL) {
	t.Helper()
	c, err := dlock.Open(ctx(t), u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryLock(ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	parent := root + "/" + escape(k)
	names, _, err := admin.Children(parent)
	if err != nil || len(names) != 1 {
		t.Fatalf("children of %s = %q, %v; want the lock's node", parent, names, err)
	}
	for _, p := range []string{parent, parent + "/" + names[0]} {
		got, _, err := admin.GetACL(p)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("ACL of %s = %v, %v; want %v", p, got, err, want)
		}
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := admin.Exists(parent); ok || err != nil {
		t.Errorf("%s after Close: exists %v, %v; want it deleted", parent, ok, err)
	}
}

// noAuth opens u and checks that locking k fails at once with ZooKeeper's
// NoAuth, and that no error shows secret.
func noAuth(t *testing.T, u, k, secret string) {
	t.Helper()
	c, err := dlock.Open(ctx(t), u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryLock(ctx(t), k)
	if err == nil {
		l.Release(ctx(t))
		t.Fatalf("TryLock with other credentials succeeded")
	}
	if !errors.Is(err, zk.ErrNoAuth) || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "not authenticated: the znode's ACL does not admit this client's credentials") {
		t.Errorf("TryLock = %v; want ZooKeeper's NoAuth at once", err)
	}
	if secret != "" && strings.Contains(err.Error(), secret) {
		t.Errorf("TryLock = %v; shows the password", err)
	}
}

// TestAuth checks digest authentication from zk:// URLs under a znode that
// only the URL's user may use.
func TestAuth(t *testing.T) {
	const user, password, wrong = "owner", "s3cret-pw", "wr0ng-pw"
	srv := testsrv.Get(t, testsrv.ZooKeeper)
	admin := connect(t, srv.Addr, nil, user+":"+password)
	root := "/" + key(t)
	protect(t, admin, root, user, password)
	locks := root + "/locks"
	q := url.Values{"prefix": {locks}, "insecure_auth": {"true"}, "linger": {"0"}}
	creds := url.UserPassword(user, password)

	t.Run("Creator", func(t *testing.T) {
		// The default ACL with credentials: the user's alone.
		lockUnder(t, zkURL(srv.Addr, creds, q), admin, locks, key(t), zk.DigestACL(zk.PermAll, user, password))
	})
	t.Run("Open", func(t *testing.T) {
		oq := url.Values{"prefix": {locks}, "insecure_auth": {"true"}, "linger": {"0"}, "acl": {"open"}}
		lockUnder(t, zkURL(srv.Addr, creds, oq), admin, locks, key(t), zk.WorldACL(zk.PermAll))
	})
	t.Run("Foreign", func(t *testing.T) {
		k := key(t)
		// The user's lock, with the key's znode in place.
		c, err := dlock.Open(ctx(t), zkURL(srv.Addr, creds, q))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		l, err := c.TryLock(ctx(t), k)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx(t))
		// Other credentials and none may neither queue under the key's
		// znode nor make new keys.
		for _, u := range []string{
			zkURL(srv.Addr, url.UserPassword(user, wrong), q),
			zkURL(srv.Addr, nil, url.Values{"prefix": {locks}}),
		} {
			noAuth(t, u, k, wrong)
			noAuth(t, u, key(t)+"-new", wrong)
		}
	})
	t.Run("NewSession", func(t *testing.T) {
		// A session the server expired is replaced by one with the
		// same credentials.
		p := startProxy(t, srv.Addr)
		sq := url.Values{"session": {"2s"}}
		for k, v := range q {
			sq[k] = v
		}
		c, err := dlock.Open(ctx(t), zkURL(p.Addr(), creds, sq))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		d := c.Driver().(*Driver)
		k := key(t)
		l, err := c.TryLock(ctx(t), k)
		if err != nil {
			t.Fatal(err)
		}
		sid := d.conn.SessionID()
		parent := locks + "/" + escape(k)
		names, _, err := admin.Children(parent)
		if err != nil || len(names) != 1 {
			t.Fatalf("children of %s = %q, %v; want the lock's node", parent, names, err)
		}
		_, _, gone, err := admin.ExistsW(parent + "/" + names[0])
		if err != nil {
			t.Fatal(err)
		}
		p.Block()
		wait(t, gone, "the server expiring the session")
		p.Unblock()
		waitSession(t, d, func(id int64) bool { return id != sid })
		<-l.Context().Done()
		l2, err := c.TryLock(ctx(t), k)
		if err != nil {
			t.Fatalf("TryLock in the new session: %v", err)
		}
		if err := l2.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("BadURL", func(t *testing.T) {
		for _, tc := range []struct{ url, names string }{
			{zkURL(srv.Addr, creds, nil), "insecure_auth=true"},
			{zkURL(srv.Addr, creds, url.Values{"insecure_auth": {"false"}}), "insecure_auth=true"},
			{zkURL(srv.Addr, url.User(user), url.Values{"insecure_auth": {"true"}}), "without a user name and a password"},
			{zkURL(srv.Addr, url.UserPassword("a:b", password), url.Values{"insecure_auth": {"true"}}), "colon"},
			{zkURL(srv.Addr, nil, url.Values{"acl": {"creator"}}), "acl=creator without user:password or a client certificate"},
			{zkURL(srv.Addr, creds, url.Values{"acl": {"mine"}, "insecure_auth": {"true"}}), `acl="mine"`},
		} {
			dlocktest.RejectURL(t, tc.url, "url", tc.names)
			if _, err := dlock.Open(ctx(t), tc.url); err == nil || strings.Contains(err.Error(), password) {
				t.Errorf("Open(%q) = %v; want an error without the password", tc.url, err)
			}
		}
	})
}

// TestTLS checks zk:// URLs with TLS parameters against a server that
// serves TLS and asks for client certificates.
func TestTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper")
	}
	certs, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := testsrv.StartZooKeeperTLS(ctx(t), certs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	cfg, err := certs.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	tlsq := func() url.Values {
		return url.Values{"cacert": {certs.CA}, "cert": {certs.ClientCert}, "key": {certs.ClientKey}, "linger": {"0"}}
	}

	t.Run("Lock", func(t *testing.T) {
		admin := connect(t, srv.Addr, cfg, "")
		lockUnder(t, srv.URL+"&linger=0", admin, DefaultPrefix, key(t), zk.WorldACL(zk.PermAll))
	})
	t.Run("Auth", func(t *testing.T) {
		// Over TLS a password needs no insecure_auth.
		const user, password = "owner", "s3cret-pw"
		admin := connect(t, srv.Addr, cfg, user+":"+password)
		root := "/" + escape(key(t))
		protect(t, admin, root, user, password)
		q := tlsq()
		q.Set("prefix", root)
		// The znodes belong to every identity of the session: the
		// client certificate's and the user's.
		want := append([]zk.ACL{{Perms: zk.PermAll, Scheme: "x509", ID: "CN=dlock-test"}}, zk.DigestACL(zk.PermAll, user, password)...)
		lockUnder(t, zkURL(srv.Addr, url.UserPassword(user, password), q), admin, root, key(t), want)
	})
	t.Run("CertificateOnly", func(t *testing.T) {
		// acl=creator with a client certificate and no password: the
		// znodes belong to the certificate's subject.
		admin := connect(t, srv.Addr, cfg, "")
		q := tlsq()
		q.Set("acl", "creator")
		lockUnder(t, zkURL(srv.Addr, nil, q), admin, DefaultPrefix, key(t), []zk.ACL{{Perms: zk.PermAll, Scheme: "x509", ID: "CN=dlock-test"}})
	})
	t.Run("Refused", func(t *testing.T) {
		other, err := testcert.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			q    url.Values
			want []string
		}{
			{"wrong CA", url.Values{"cacert": {other.CA}, "cert": {certs.ClientCert}, "key": {certs.ClientKey}},
				[]string{"server's certificate is not trusted", "x509: certificate signed by unknown authority"}},
			{"system roots", url.Values{"tls": {"true"}}, []string{"x509: certificate signed by unknown authority"}},
			{"no client certificate", url.Values{"cacert": {certs.CA}}, []string{"server rejected the client certificate", "bad certificate"}},
		} {
			c, err := dlock.Open(ctx(t), zkURL(srv.Addr, nil, tc.q))
			if err == nil {
				c.Close()
				t.Errorf("%s: Open succeeded", tc.name)
				continue
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: Open = %v; want a failure without waiting for the context to end", tc.name, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: Open = %v; want %q in it", tc.name, err, w)
				}
			}
		}
	})
}
