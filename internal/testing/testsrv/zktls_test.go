package testsrv

import (
	"context"
	"crypto/tls"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock/internal/testing/testcert"
)

// TestZooKeeperTLS checks that StartZooKeeperTLS's server answers on its
// TLS port, to clients with a certificate of the set's authority only.
func TestZooKeeperTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	certs, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := StartZooKeeperTLS(ctx, certs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	if want := "zk://" + s.Addr + "?cacert="; !strings.HasPrefix(s.URL, want) || !strings.Contains(s.URL, "&key=") || s.Addr == loopbackAddr(s.port) {
		t.Errorf("Addr = %q, URL = %q; want the TLS port and zk://127.0.0.1:port?cacert=...&cert=...&key=...", s.Addr, s.URL)
	}
	ruok := func(cfg *tls.Config) (string, error) {
		d := tls.Dialer{Config: cfg}
		c, err := d.DialContext(ctx, "tcp", s.Addr)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("ruok")); err != nil {
			return "", err
		}
		b, err := io.ReadAll(c)
		return string(b), err
	}
	cfg, err := certs.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if reply, err := ruok(cfg); reply != "imok" {
		t.Errorf("ruok over TLS = %q, %v; want imok", reply, err)
	}
	if reply, err := ruok(&tls.Config{RootCAs: cfg.RootCAs}); err == nil && reply == "imok" {
		t.Error("ruok over TLS without a client certificate answered imok")
	}
	if reply, err := zkCommand(ctx, s.Addr, "ruok"); err == nil && reply == "imok" {
		t.Error("ruok in clear text on the TLS port answered imok")
	}
}
