package redisdlock_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testcert"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
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

// TestTLSLockUnlock takes locks over TLS with a client certificate and a
// password, on rediss:// and on redis:// with tls=true.
func TestTLSLockUnlock(t *testing.T) {
	srv, _ := startTLS(t, testsrv.RedisTLS{AuthClients: true, Password: tlsPassword})
	if !strings.HasPrefix(srv.URL, "rediss://") {
		t.Fatalf("URL %s", srv.URL)
	}
	t.Run("rediss", func(t *testing.T) { dlocktest.LockTwice(t, srv.URL) })
	t.Run("redis+tls=true", func(t *testing.T) {
		dlocktest.LockTwice(t, dlocktest.EditURL(t, strings.Replace(srv.URL, "rediss://", "redis://", 1), "", "", "tls", "true"))
	})
	t.Run("no TLS", func(t *testing.T) {
		// The server speaks TLS only: a plain client must fail, which
		// shows that the subtests above did use TLS.
		raw := dlocktest.EditURL(t, strings.Replace(srv.URL, "rediss://", "redis://", 1), "", "", "cacert", "", "cert", "", "key", "", "dial_timeout", "2s", "read_timeout", "2s")
		dlocktest.OpenFails(t, raw, tlsPassword)
	})
}

// TestTLSACLUser authenticates as an ACL user over TLS, without a client
// certificate.
func TestTLSACLUser(t *testing.T) {
	srv, _ := startTLS(t, testsrv.RedisTLS{User: "locker", Password: tlsPassword})
	dlocktest.LockTwice(t, srv.URL)
	err := dlocktest.OpenFails(t, strings.Replace(srv.URL, "locker:", "nobody:", 1), tlsPassword)
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
		dlocktest.WantUnknownAuthority(t, dlocktest.OpenFails(t, dlocktest.EditURL(t, srv.URL, "", "", "cacert", other.CA), tlsPassword))
	})
	t.Run("system roots", func(t *testing.T) {
		dlocktest.WantUnknownAuthority(t, dlocktest.OpenFails(t, dlocktest.EditURL(t, srv.URL, "", "", "cacert", ""), tlsPassword))
	})
	t.Run("sentinel", func(t *testing.T) {
		// TLS reaches the Sentinel connections too.
		u := dlocktest.EditURL(t, "redis+sentinel://"+srv.Addr+"/mymaster", "", "", "cacert", other.CA)
		dlocktest.WantUnknownAuthority(t, dlocktest.OpenFails(t, u, tlsPassword))
	})
	t.Run("cluster", func(t *testing.T) {
		u := dlocktest.EditURL(t, "redis+cluster://:"+tlsPassword+"@"+srv.Addr, "", "", "cacert", other.CA)
		dlocktest.WantUnknownAuthority(t, dlocktest.OpenFails(t, u, tlsPassword))
	})
}

// TestTLSClientCertRequired checks that a server that demands a client
// certificate refuses a client without one, and that the TLS parameters
// reach Sentinel and Cluster connections: with the right authority and
// certificate, the server's own answer (not a TLS failure) ends the open.
func TestTLSClientCertRequired(t *testing.T) {
	srv, certs := startTLS(t, testsrv.RedisTLS{AuthClients: true})
	err := dlocktest.OpenFails(t, dlocktest.EditURL(t, srv.URL, "", "", "cert", "", "key", ""), tlsPassword)
	if !strings.Contains(err.Error(), "tls:") {
		t.Errorf("no client certificate: error %q, want a TLS error", err)
	}
	tlsParams := []string{"cacert", certs.CA, "cert", certs.ClientCert, "key", certs.ClientKey}
	err = dlocktest.OpenFails(t, dlocktest.EditURL(t, "redis+cluster://"+srv.Addr, "", "", tlsParams...), tlsPassword)
	if !strings.Contains(err.Error(), "cluster support disabled") {
		t.Errorf("redis+cluster over TLS to a standalone server: error %q, want the server's reply that it is no cluster", err)
	}
	err = dlocktest.OpenFails(t, dlocktest.EditURL(t, "redis+sentinel://"+srv.Addr+"/mymaster", "", "", tlsParams...), tlsPassword)
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
	err := dlocktest.OpenFails(t, raw, tlsPassword)
	if !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("error %q, want WRONGPASS", err)
	}
	if strings.Contains(err.Error(), wrong) {
		t.Errorf("the error quotes the password: %v", err)
	}
	err = dlocktest.OpenFails(t, strings.Replace(srv.URL, ":"+tlsPassword+"@", "@", 1), tlsPassword)
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
