package redisdlock_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testcert"
	"github.com/dlockhq/dlock/internal/testsrv"
)

// tlsPassword is the password of the TLS servers of these tests; no error
// may quote it.
const tlsPassword = "tls-test-Pa55word"

// startTLS starts a TLS-only Redis server with a fresh authority, stopped at
// the end of the test.
func startTLS(t *testing.T, cfg testsrv.RedisTLS) (*testsrv.Server, *testcert.Set) {
	t.Helper()
	certs, err := testcert.New(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Certs = certs
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := testsrv.StartRedisTLS(ctx, cfg)
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

// withParams returns raw with the query parameters set (replacing any of
// the same name).
func setParams(t *testing.T, raw string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			q.Del(kv[i])
		} else {
			q.Set(kv[i], kv[i+1])
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// lockOnce opens a client from raw, takes and releases a lock twice, and
// checks that the fencing tokens increase.
func lockOnce(t *testing.T, raw string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dlock.Open(ctx, raw)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer c.Close()
	var last uint64
	for i := range 2 {
		l, err := c.TryLock(ctx, "tls-key", dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatalf("TryLock %d: %v", i, err)
		}
		if l.Token() <= last {
			t.Errorf("token %d after %d; want an increasing fencing token", l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release %d: %v", i, err)
		}
	}
}

// openErr opens raw, which must fail, and returns the error. The open must
// fail by itself, not by running into the context's deadline.
func openErr(t *testing.T, raw string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dlock.Open(ctx, raw)
	if err == nil {
		c.Close()
		t.Fatalf("Open(%s) succeeded, want an error", raw)
	}
	t.Logf("Open: %v", err)
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("Open ran into its deadline instead of failing: %v", err)
	}
	if strings.Contains(err.Error(), tlsPassword) {
		t.Errorf("the error quotes the password: %v", err)
	}
	return err
}

// wantUnknownAuthority checks that err is a certificate verification error
// naming an unknown authority.
func wantUnknownAuthority(t *testing.T, err error) {
	t.Helper()
	var ua x509.UnknownAuthorityError
	if !errors.As(err, &ua) || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("error %q (%T); want an x509 unknown authority error", err, err)
	}
}

// TestTLSLockUnlock takes locks over TLS with a client certificate and a
// password, on rediss:// and on redis:// with tls=true.
func TestTLSLockUnlock(t *testing.T) {
	srv, _ := startTLS(t, testsrv.RedisTLS{AuthClients: true, Password: tlsPassword})
	if !strings.HasPrefix(srv.URL, "rediss://") {
		t.Fatalf("URL %s", srv.URL)
	}
	t.Run("rediss", func(t *testing.T) { lockOnce(t, srv.URL) })
	t.Run("redis+tls=true", func(t *testing.T) {
		lockOnce(t, setParams(t, strings.Replace(srv.URL, "rediss://", "redis://", 1), "tls", "true"))
	})
	t.Run("no TLS", func(t *testing.T) {
		// The server speaks TLS only: a plain client must fail, which
		// shows that the subtests above did use TLS.
		raw := setParams(t, strings.Replace(srv.URL, "rediss://", "redis://", 1), "cacert", "", "cert", "", "key", "", "dial_timeout", "2s", "read_timeout", "2s")
		openErr(t, raw)
	})
}

// TestTLSACLUser authenticates as an ACL user over TLS, without a client
// certificate.
func TestTLSACLUser(t *testing.T) {
	srv, _ := startTLS(t, testsrv.RedisTLS{User: "locker", Password: tlsPassword})
	lockOnce(t, srv.URL)
	err := openErr(t, strings.Replace(srv.URL, "locker:", "nobody:", 1))
	if !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("unknown user: error %q, want WRONGPASS", err)
	}
}

// TestTLSWrongCA checks that a server whose certificate does not chain to
// cacert is refused at once, with the certificate error.
func TestTLSWrongCA(t *testing.T) {
	srv, _ := startTLS(t, testsrv.RedisTLS{AuthClients: true, Password: tlsPassword})
	other, err := testcert.New(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("cacert", func(t *testing.T) {
		wantUnknownAuthority(t, openErr(t, setParams(t, srv.URL, "cacert", other.CA)))
	})
	t.Run("system roots", func(t *testing.T) {
		wantUnknownAuthority(t, openErr(t, setParams(t, srv.URL, "cacert", "")))
	})
	t.Run("sentinel", func(t *testing.T) {
		// TLS reaches the Sentinel connections too.
		u := setParams(t, "redis+sentinel://"+srv.Addr+"/mymaster", "cacert", other.CA)
		wantUnknownAuthority(t, openErr(t, u))
	})
	t.Run("cluster", func(t *testing.T) {
		u := setParams(t, "redis+cluster://:"+tlsPassword+"@"+srv.Addr, "cacert", other.CA)
		wantUnknownAuthority(t, openErr(t, u))
	})
}

// TestTLSClientCertRequired checks that a server that demands a client
// certificate refuses a client without one, and that the TLS parameters
// reach Sentinel and Cluster connections: with the right authority and
// certificate, the server's own answer (not a TLS failure) ends the open.
func TestTLSClientCertRequired(t *testing.T) {
	srv, certs := startTLS(t, testsrv.RedisTLS{AuthClients: true})
	err := openErr(t, setParams(t, srv.URL, "cert", "", "key", ""))
	if !strings.Contains(err.Error(), "tls:") {
		t.Errorf("no client certificate: error %q, want a TLS error", err)
	}
	tlsParams := []string{"cacert", certs.CA, "cert", certs.ClientCert, "key", certs.ClientKey}
	err = openErr(t, setParams(t, "redis+cluster://"+srv.Addr, tlsParams...))
	if !strings.Contains(err.Error(), "cluster support disabled") {
		t.Errorf("redis+cluster over TLS to a standalone server: error %q, want the server's reply that it is no cluster", err)
	}
	err = openErr(t, setParams(t, "redis+sentinel://"+srv.Addr+"/mymaster", tlsParams...))
	if strings.Contains(err.Error(), "tls") || strings.Contains(err.Error(), "x509") || strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "reset") {
		t.Errorf("redis+sentinel over TLS to a plain server: error %q, want the server's own reply", err)
	}
}

// TestTLSWrongPassword checks that a wrong password over TLS fails with
// Redis's WRONGPASS, and that neither password appears in the error.
func TestTLSWrongPassword(t *testing.T) {
	srv, _ := startTLS(t, testsrv.RedisTLS{AuthClients: true, Password: tlsPassword})
	const wrong = "not-the-Pa55word"
	raw := strings.Replace(srv.URL, tlsPassword, wrong, 1)
	err := openErr(t, raw)
	if !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("error %q, want WRONGPASS", err)
	}
	if strings.Contains(err.Error(), wrong) {
		t.Errorf("the error quotes the password: %v", err)
	}
	err = openErr(t, strings.Replace(srv.URL, ":"+tlsPassword+"@", "@", 1))
	if !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("no password: error %q, want NOAUTH", err)
	}
}

// TestTLSParamErrors checks that bad TLS parameters are argument errors
// naming the parameter, without the password.
func TestTLSParamErrors(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"rediss://:" + tlsPassword + "@127.0.0.1:1/0?cacert=/nonexistent/ca.pem", "cacert: open /nonexistent/ca.pem"},
		{"redis://:" + tlsPassword + "@127.0.0.1:1/0?tls=maybe", `tls="maybe"`},
		{"redis+sentinel://127.0.0.1:1/m?cert=/x.pem", "cert=/x.pem without key"},
		{"redis+cluster://:" + tlsPassword + "@127.0.0.1:1?key=/x.pem", "key without cert"},
	} {
		_, err := dlock.Open(context.Background(), tc.raw)
		if !errors.Is(err, dlock.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want ErrInvalidArgument saying %q", tc.raw, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), tlsPassword) {
			t.Errorf("%s: the error quotes the password: %v", tc.raw, err)
		}
	}
}
