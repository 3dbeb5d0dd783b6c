package sqldlock

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

// editURL returns raw with its host replaced by host (if not empty) and the
// query parameters set, or removed where the value is empty.
func editURL(t *testing.T, raw, host string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		u.Host = host + ":" + u.Port()
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

// lockOverTLS opens raw, takes and releases a lock twice, and checks that
// the fencing tokens increase.
func lockOverTLS(t *testing.T, raw string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dlock.Open(ctx, raw)
	if err != nil {
		t.Fatalf("Open(%s): %v", raw, err)
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

// openFails opens raw, which must fail by itself, not at the context's
// deadline, and without quoting secret, and returns the error.
func openFails(t *testing.T, raw, secret string) error {
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
	if secret != "" && strings.Contains(err.Error(), secret) {
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
	t.Run("verify-full", func(t *testing.T) { lockOverTLS(t, srv.URL) })
	t.Run("localhost", func(t *testing.T) { lockOverTLS(t, editURL(t, srv.URL, "localhost")) })
	t.Run("wrong CA", func(t *testing.T) {
		wantUnknownAuthority(t, openFails(t, editURL(t, srv.URL, "", "sslrootcert", other.CA), ""))
	})
	t.Run("no TLS", func(t *testing.T) {
		err := openFails(t, editURL(t, srv.URL, "", "sslmode", "disable", "sslrootcert", "", "sslcert", "", "sslkey", ""), "")
		if !strings.Contains(err.Error(), "no encryption") {
			t.Errorf("error %q; want the server's refusal of a connection without TLS", err)
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		err := openFails(t, editURL(t, srv.URL, "", "sslcert", "", "sslkey", ""), "")
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
	t.Run("cacert", func(t *testing.T) { lockOverTLS(t, srv.URL) })
	t.Run("localhost tls=true", func(t *testing.T) {
		// The certificate is verified against the URL's host.
		lockOverTLS(t, editURL(t, srv.URL, "localhost", "tls", "true"))
	})
	t.Run("servername", func(t *testing.T) {
		err := openFails(t, editURL(t, srv.URL, "", "servername", "db.example"), pw)
		if !strings.Contains(err.Error(), "x509: certificate is valid for") {
			t.Errorf("error %q; want a name mismatch", err)
		}
	})
	t.Run("wrong CA", func(t *testing.T) {
		wantUnknownAuthority(t, openFails(t, editURL(t, srv.URL, "", "cacert", other.CA), pw))
	})
	t.Run("no TLS", func(t *testing.T) {
		err := openFails(t, editURL(t, srv.URL, "", "cacert", "", "cert", "", "key", ""), pw)
		if !strings.Contains(err.Error(), "Access denied") {
			t.Errorf("error %q; want the server's refusal of an account that must use TLS", err)
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		err := openFails(t, editURL(t, srv.URL, "", "cert", "", "key", ""), pw)
		if !strings.Contains(err.Error(), "Access denied") {
			t.Errorf("error %q; want the server's refusal of an account that must show a certificate", err)
		}
	})
	for _, v := range []string{"skip-verify", "preferred", "false"} {
		t.Run("tls="+v, func(t *testing.T) {
			_, err := dlock.Open(context.Background(), editURL(t, srv.URL, "", "tls", v))
			if !errors.Is(err, dlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "tls="+v) || strings.Contains(err.Error(), pw) {
				t.Errorf("error %v; want ErrInvalidArgument naming tls=%s", err, v)
			}
		})
	}
}
