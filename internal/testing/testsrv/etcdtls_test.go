package testsrv

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock/internal/testing/testcert"
)

// TestEtcdTLS checks that StartEtcdTLS's member serves its client port over
// TLS only, to clients with a certificate of the set's authority.
func TestEtcdTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	certs, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := StartEtcdTLS(ctx, certs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	if want := "etcd://" + s.Addr + "?cacert="; !strings.HasPrefix(s.URL, want) || !strings.Contains(s.URL, "&key=") {
		t.Errorf("URL = %q, want %s...&cert=...&key=...", s.URL, want)
	}
	base := "https://" + s.Addr
	cfg, err := certs.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := etcdHealth(ctx, base, cfg); err != nil {
		t.Errorf("health over TLS with the client certificate: %v", err)
	}
	if err := etcdHealth(ctx, "http://"+s.Addr, nil); err == nil {
		t.Error("health in clear text succeeded")
	}
	noCert := &tls.Config{RootCAs: cfg.RootCAs}
	if err := etcdHealth(ctx, base, noCert); err == nil {
		t.Error("health over TLS without a client certificate succeeded")
	}
	other, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := other.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := etcdHealth(ctx, base, wrong); err == nil || !strings.Contains(err.Error(), "x509") {
		t.Errorf("health over TLS trusting another authority: %v; want a certificate error", err)
	}
}
