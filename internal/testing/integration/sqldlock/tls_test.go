package sqldlock_test

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

// tlsCerts returns a fresh authority with its server and client
// certificates, and an unrelated authority.
func tlsCerts(t *testing.T) (certs, other *testcert.Set) {
	t.Helper()
	certs, err := testcert.New(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	other, err = testcert.New(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	return certs, other
}

// stopAtEnd stops srv when the test ends.
func stopAtEnd(t *testing.T, srv *testsrv.Server) {
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
}

// TestTLSPostgres takes locks on a PostgreSQL server that accepts TCP
// connections over TLS with a client certificate only, with pgx's
// sslmode=verify-full, sslrootcert, sslcert and sslkey, and checks the
// failures: a wrong authority, no TLS, no client certificate.
func TestTLSPostgres(t *testing.T) {
	certs, other := tlsCerts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := testsrv.StartPostgresTLS(ctx, testsrv.PostgresTLS{Certs: certs, ClientCerts: true})
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, srv)
	if !strings.Contains(srv.URL, "sslmode=verify-full") {
		t.Fatalf("URL %s", srv.URL)
	}
	t.Run("verify-full", func(t *testing.T) { dlocktest.LockTwice(t, srv.URL) })
	t.Run("localhost", func(t *testing.T) { dlocktest.LockTwice(t, dlocktest.EditURL(t, srv.URL, "", "localhost")) })
	t.Run("wrong CA", func(t *testing.T) {
		dlocktest.WantUnknownAuthority(t, dlocktest.OpenFails(t, dlocktest.EditURL(t, srv.URL, "", "", "sslrootcert", other.CA), ""))
	})
	t.Run("no TLS", func(t *testing.T) {
		err := dlocktest.OpenFails(t, dlocktest.EditURL(t, srv.URL, "", "", "sslmode", "disable", "sslrootcert", "", "sslcert", "", "sslkey", ""), "")
		if !strings.Contains(err.Error(), "no encryption") {
			t.Errorf("error %q; want the server's refusal of a connection without TLS", err)
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		err := dlocktest.OpenFails(t, dlocktest.EditURL(t, srv.URL, "", "", "sslcert", "", "sslkey", ""), "")
		if !strings.Contains(err.Error(), "certificate") {
			t.Errorf("error %q; want the server's demand for a client certificate", err)
		}
	})
}

// TestTLSMySQL takes locks on a MariaDB account that must connect over TLS
// with a client certificate, with the TLS parameters cacert, cert and key,
// and checks the failures: a wrong authority, no TLS, and tls= values that
// contradict the parameters.
func TestTLSMySQL(t *testing.T) {
	certs, other := tlsCerts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := testsrv.StartMariaDBTLS(ctx, testsrv.MariaDBTLS{Certs: certs, ClientCerts: true})
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, srv)
	pw := testsrv.MariaDBTLSPassword
	t.Run("cacert", func(t *testing.T) { dlocktest.LockTwice(t, srv.URL) })
	t.Run("localhost tls=true", func(t *testing.T) {
		// The certificate is verified against the URL's host.
		dlocktest.LockTwice(t, dlocktest.EditURL(t, srv.URL, "", "localhost", "tls", "true"))
	})
	t.Run("servername", func(t *testing.T) {
		err := dlocktest.OpenFails(t, dlocktest.EditURL(t, srv.URL, "", "", "servername", "db.example"), pw)
		if !strings.Contains(err.Error(), "x509: certificate is valid for") {
			t.Errorf("error %q; want a name mismatch", err)
		}
	})
	t.Run("wrong CA", func(t *testing.T) {
		dlocktest.WantUnknownAuthority(t, dlocktest.OpenFails(t, dlocktest.EditURL(t, srv.URL, "", "", "cacert", other.CA), pw))
	})
	t.Run("no TLS", func(t *testing.T) {
		err := dlocktest.OpenFails(t, dlocktest.EditURL(t, srv.URL, "", "", "cacert", "", "cert", "", "key", ""), pw)
		if !strings.Contains(err.Error(), "Access denied") {
			t.Errorf("error %q; want the server's refusal of an account that must use TLS", err)
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		err := dlocktest.OpenFails(t, dlocktest.EditURL(t, srv.URL, "", "", "cert", "", "key", ""), pw)
		if !strings.Contains(err.Error(), "Access denied") {
			t.Errorf("error %q; want the server's refusal of an account that must show a certificate", err)
		}
	})
	for _, v := range []string{"skip-verify", "preferred", "false"} {
		t.Run("tls="+v, func(t *testing.T) {
			_, err := dlock.Open(context.Background(), dlocktest.EditURL(t, srv.URL, "", "", "tls", v))
			if !errors.Is(err, dlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "tls="+v) || strings.Contains(err.Error(), pw) {
				t.Errorf("error %v; want ErrInvalidArgument naming tls=%s", err, v)
			}
		})
	}
}
