package natsdlock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/testcert"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// TestNKey checks that nkey=FILE authenticates with the seed in the file,
// and that a server that does not know the key refuses it with a
// permanent error.
func TestNKey(t *testing.T) {
	dir := t.TempDir()
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	seedFile := filepath.Join(dir, "user.nk")
	conf := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte("authorization { users = [ { nkey: "+pub+" } ] }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := testsrv.StartNATSWith(ctx(t), "-js", "-c", conf)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	c, err := dlock.Open(ctx(t), srv.URL+"?nkey="+seedFile)
	if err != nil {
		t.Fatalf("Open with the user's seed: %v", err)
	}
	l, err := c.TryLock(ctx(t), key(t))
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx(t))
	c.Close()

	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	if err := os.WriteFile(seedFile, otherSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = dlock.Open(ctx(t), srv.URL+"?nkey="+seedFile)
	if err == nil {
		c.Close()
		t.Fatal("Open with an unknown key succeeded")
	}
	if !errors.Is(err, dlock.ErrPermanent) || strings.Contains(err.Error(), string(otherSeed)) {
		t.Errorf("Open with an unknown key = %v; want a permanent error that does not show the seed", err)
	}
}

// TestTLS checks that cacert= connects over TLS to a server whose
// certificate the file's authority signed, and that a server signed by
// another authority is refused with a permanent error.
func TestTLS(t *testing.T) {
	certs, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := testsrv.StartNATSWith(ctx(t), "-js", "--tls", "--tlscert", certs.ServerCert, "--tlskey", certs.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	c, err := dlock.Open(ctx(t), srv.URL+"?cacert="+certs.CA+"&token=over-tls")
	if err != nil {
		t.Fatalf("Open over TLS: %v", err)
	}
	l, err := c.TryLock(ctx(t), key(t))
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx(t))
	c.Close()

	wrong, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err = dlock.Open(ctx(t), srv.URL+"?cacert="+wrong.CA)
	if err == nil {
		c.Close()
		t.Fatal("Open trusting another authority succeeded")
	}
	if !errors.Is(err, dlock.ErrPermanent) {
		t.Errorf("Open trusting another authority = %v; want a permanent error", err)
	}
}
