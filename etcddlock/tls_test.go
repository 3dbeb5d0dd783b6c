package etcddlock

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/drivertest"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testcert"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// startTLS starts an etcd member of its own serving TLS with client
// certificates (see testsrv.StartEtcdTLS), stopped when t ends.
func startTLS(t *testing.T) (*testsrv.Server, *testcert.Set) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts etcd")
	}
	certs, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := testsrv.StartEtcdTLS(ctx(t), certs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	return srv, certs
}

// tlsClient returns a client of the member srv started with certs, over TLS
// with certs' client certificate and, if user is not empty, etcd's
// authentication. It is closed when t ends.
func tlsClient(t *testing.T, srv *testsrv.Server, certs *testcert.Set, user, password string) *clientv3.Client {
	t.Helper()
	cfg, err := certs.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{srv.Addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: cfg, Username: user, Password: password,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// withQuery returns the URL of srv with the query q instead of its own.
func withQuery(srv *testsrv.Server, user *url.Userinfo, q url.Values) string {
	u := &url.URL{Scheme: "etcd", Host: srv.Addr, User: user, RawQuery: q.Encode()}
	return u.String()
}

// tlsQuery returns the TLS parameters of a URL trusting ca and presenting
// certs' client certificate.
func tlsQuery(ca string, certs *testcert.Set) url.Values {
	return url.Values{"cacert": {ca}, "cert": {certs.ClientCert}, "key": {certs.ClientKey}}
}

// lockOnce opens u, takes a lock, checks its entry through cli while it is
// held, releases it and closes the client.
func lockOnce(t *testing.T, u string, cli *clientv3.Client) {
	t.Helper()
	c, err := dlock.Open(ctx(t), u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k := key(t)
	l, err := c.TryLock(ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := count(ctx(t), cli, k); err != nil || n != 1 {
		t.Errorf("%d entries of the held lock (%v); want 1", n, err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if n, err := count(ctx(t), cli, k); err != nil || n != 0 {
		t.Errorf("%d entries after the release (%v); want none", n, err)
	}
}

// refused opens u, which must fail at once (the URL waits a minute to dial)
// with an error containing each of want.
func refused(t *testing.T, u string, want ...string) {
	t.Helper()
	c, err := dlock.Open(ctx(t), u)
	if err == nil {
		c.Close()
		t.Fatalf("Open(%q) succeeded", u)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Open(%q) = %v; want a failure without waiting out the dial timeout", u, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Open(%q) = %v; want %q in the error", u, err, w)
		}
	}
}

// TestTLS checks etcd:// URLs with TLS parameters against a member that
// serves TLS and asks for client certificates.
func TestTLS(t *testing.T) {
	srv, certs := startTLS(t)
	cli := tlsClient(t, srv, certs, "", "")
	t.Run("Lock", func(t *testing.T) { lockOnce(t, srv.URL, cli) })

	t.Run("Refused", func(t *testing.T) {
		other, err := testcert.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		wait := url.Values{"dial-timeout": {"1m"}}
		with := func(q url.Values) url.Values {
			for k, v := range wait {
				q[k] = v
			}
			return q
		}
		// The server's certificate is not signed by the authority the
		// client trusts, nor by a system root.
		refused(t, withQuery(srv, nil, with(tlsQuery(other.CA, certs))),
			"x509: certificate signed by unknown authority", "server's certificate is not trusted")
		refused(t, withQuery(srv, nil, with(url.Values{"tls": {"true"}})),
			"x509: certificate signed by unknown authority")
		// The server rejects a client without a certificate, or with one
		// of another authority.
		refused(t, withQuery(srv, nil, with(url.Values{"cacert": {certs.CA}})),
			"bad certificate", "server rejected the client certificate")
		refused(t, withQuery(srv, nil, with(tlsQuery(certs.CA, other))),
			"bad certificate", "server rejected the client certificate")
	})

	t.Run("Conformance", func(t *testing.T) {
		drivertest.Run(t, drivertest.Config{
			NewDriver: func(t testing.TB) driver.Driver { return openDriver(t, srv.URL) },
			NewHungDriver: func(t testing.TB) (driver.Driver, func()) {
				p, err := testsrv.StartProxy(srv.Addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { p.Close() })
				u, _ := url.Parse(srv.URL)
				u.Host = p.Addr()
				return openDriver(t, u.String()), p.Block
			},
			Residue: func(ctx context.Context, prefix string) (int, error) { return count(ctx, cli, prefix) },
		})
	})
}

// openDriver returns the driver of the etcd:// URL u.
func openDriver(t testing.TB, u string) driver.Driver {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	d, err := open(ctx(t), pu)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// enableAuth turns etcd's authentication on through cli: user root with
// rootPassword, and user with password and a role that may read and write
// the keys under DefaultPrefix.
func enableAuth(t *testing.T, cli *clientv3.Client, rootPassword, user, password string) {
	t.Helper()
	c := ctx(t)
	steps := []func() error{
		func() error { _, err := cli.UserAdd(c, "root", rootPassword); return err },
		func() error { _, err := cli.UserGrantRole(c, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(c, "locker"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(c, "locker", DefaultPrefix, clientv3.GetPrefixRangeEnd(DefaultPrefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(c, user, password); return err },
		func() error { _, err := cli.UserGrantRole(c, user, "locker"); return err },
		func() error { _, err := cli.AuthEnable(c); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("enabling auth, step %d: %v", i+1, err)
		}
	}
}

// TestAuth checks user and password in etcd:// URLs against members with
// authentication enabled.
func TestAuth(t *testing.T) {
	const rootPassword, user, password = "r00t-pw", "locker", "s3cret-pw"
	srv, certs := startTLS(t)
	enableAuth(t, tlsClient(t, srv, certs, "", ""), rootPassword, user, password)
	cli := tlsClient(t, srv, certs, "root", rootPassword)
	tlsq := tlsQuery(certs.CA, certs)

	t.Run("Password", func(t *testing.T) {
		lockOnce(t, withQuery(srv, url.UserPassword(user, password), tlsq), cli)
	})
	t.Run("WrongPassword", func(t *testing.T) {
		const wrong = "wr0ng-pw"
		u := withQuery(srv, url.UserPassword(user, wrong), tlsq)
		refused(t, u, "authentication failed")
		_, err := dlock.Open(ctx(t), u)
		if err == nil || strings.Contains(err.Error(), wrong) {
			t.Errorf("Open = %v; want an error without the password", err)
		}
	})
	t.Run("CertificateOnly", func(t *testing.T) {
		// Without a password, etcd takes the certificate's common name
		// (dlock-test) for the user, who has no permission.
		_, err := dlock.Open(ctx(t), srv.URL)
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("Open without a password = %v; want permission denied", err)
		}
	})

	t.Run("ClearText", func(t *testing.T) {
		// A password is not sent without TLS unless the URL says so.
		plain := testsrv.Get(t, testsrv.Etcd)
		for _, u := range []string{
			withQuery(plain, url.UserPassword(user, password), nil),
			withQuery(plain, url.UserPassword(user, password), url.Values{"insecure_auth": {"false"}}),
		} {
			dlocktest.RejectURL(t, u, "url", "insecure_auth=true")
			_, err := dlock.Open(ctx(t), u)
			if err == nil || strings.Contains(err.Error(), password) {
				t.Errorf("Open(%q) = %v; want an error without the password", u, err)
			}
		}
		dlocktest.RejectURL(t, withQuery(plain, url.UserPassword(user, password), url.Values{"insecure_auth": {"maybe"}}), "url", "maybe")
		dlocktest.RejectURL(t, withQuery(plain, url.User(user), tlsq), "url", "without a user name and a password")

		// insecure_auth=true sends it, to a member without TLS.
		clear, err := testsrv.StartEtcd(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := clear.Stop(); err != nil {
				t.Error(err)
			}
		})
		setup := newClient(t, clear.Addr)
		defer setup.Close()
		enableAuth(t, setup, rootPassword, user, password)
		root, err := clientv3.New(clientv3.Config{Endpoints: []string{clear.Addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), Username: "root", Password: rootPassword})
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		insecure := url.Values{"insecure_auth": {"true"}}
		lockOnce(t, withQuery(clear, url.UserPassword(user, password), insecure), root)
		refused(t, withQuery(clear, url.UserPassword(user, "wr0ng-pw"), insecure), "authentication failed")
	})
}
