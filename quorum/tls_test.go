package quorum_test

import (
	"context"
	"crypto/x509"
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
const tlsPassword = "quorum-tls-Pa55word"

// startTLSQuorum starts three TLS-only Redis servers that demand a client
// certificate and a password, stopped at the end of the test.
func startTLSQuorum(t *testing.T) *testsrv.Server {
	t.Helper()
	certs, err := testcert.New(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := testsrv.StartRedisQuorumTLS(ctx, 3, testsrv.RedisTLS{Certs: certs, AuthClients: true, Password: tlsPassword})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	return srv
}

// TestTLSQuorumLock takes a lock twice on three TLS nodes through
// redlocks:// and redlock://?tls=true, and checks that the fence round
// works over TLS: the tokens grow from one holder to the next.
func TestTLSQuorumLock(t *testing.T) {
	srv := startTLSQuorum(t)
	if !strings.HasPrefix(srv.URL, "redlocks://") {
		t.Fatalf("URL %s", srv.URL)
	}
	for _, raw := range []string{srv.URL, dlocktest.EditURL(t, srv.URL, "redlock", "", "tls", "true")} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c, err := dlock.Open(ctx, raw)
		if err != nil {
			cancel()
			t.Fatalf("Open: %v", err)
		}
		var last uint64
		for i := range 3 {
			l, err := c.TryLock(ctx, "tls-quorum", dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatalf("TryLock %d: %v", i, err)
			}
			if l.Token() <= last {
				t.Errorf("token %d after %d; want the fence round's increasing token", l.Token(), last)
			}
			last = l.Token()
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release %d: %v", i, err)
			}
		}
		c.Close()
		cancel()
	}
}

// TestTLSQuorumErrors checks the failures of every node: a wrong authority
// (a certificate error, at once), no TLS against TLS-only servers, a
// missing client certificate, a wrong password.
func TestTLSQuorumErrors(t *testing.T) {
	srv := startTLSQuorum(t)
	other, err := testcert.New(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("wrong CA", func(t *testing.T) {
		err := dlocktest.OpenFails(t, dlocktest.EditURL(t, srv.URL, "", "", "cacert", other.CA), tlsPassword)
		var ua x509.UnknownAuthorityError
		if !errors.As(err, &ua) || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
			t.Errorf("error %q; want an x509 unknown authority error", err)
		}
		if !strings.Contains(err.Error(), "of 3 servers answer") {
			t.Errorf("error %q; want the quorum to fail", err)
		}
	})
	t.Run("plain redlock", func(t *testing.T) {
		dlocktest.OpenFails(t, dlocktest.EditURL(t, srv.URL, "redlock", "", "cacert", "", "cert", "", "key", "", "dial_timeout", "2s", "read_timeout", "2s"), tlsPassword)
	})
	t.Run("no client certificate", func(t *testing.T) {
		err := dlocktest.OpenFails(t, dlocktest.EditURL(t, srv.URL, "", "", "cert", "", "key", ""), tlsPassword)
		if !strings.Contains(err.Error(), "tls: certificate required") {
			t.Errorf("error %q; want the server's demand for a certificate", err)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		const wrong = "not-the-Pa55word"
		err := dlocktest.OpenFails(t, strings.Replace(srv.URL, tlsPassword, wrong, 1), tlsPassword)
		if !strings.Contains(err.Error(), "WRONGPASS") || strings.Contains(err.Error(), wrong) {
			t.Errorf("error %q; want WRONGPASS, without the password", err)
		}
	})
	t.Run("bad parameter", func(t *testing.T) {
		_, err := dlock.Open(context.Background(), dlocktest.EditURL(t, srv.URL, "", "", "tls", "false"))
		if !errors.Is(err, dlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "tls=false with TLS parameters") {
			t.Errorf("error %v; want ErrInvalidArgument naming tls=false", err)
		}
	})
}
