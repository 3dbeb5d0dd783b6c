package natsdlock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
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

// TestCreds checks that creds=FILE authenticates with the user JWT and
// NKEY seed of a credentials file, as nsc writes it, on a server that
// trusts an operator and knows the user's account (JetStream enabled by
// the account's JWT); and that a user of an account the server does not
// know is refused with a permanent error that does not show the seed.
func TestCreds(t *testing.T) {
	dir := t.TempDir()
	op, _ := nkeys.CreateOperator()
	opPub, _ := op.PublicKey()
	opJWT, err := jwt.NewOperatorClaims(opPub).Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	// account returns a new account, and its line of resolver_preload.
	account := func(js bool) (nkeys.KeyPair, string) {
		kp, _ := nkeys.CreateAccount()
		pub, _ := kp.PublicKey()
		ac := jwt.NewAccountClaims(pub)
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		enc, err := ac.Encode(op)
		if err != nil {
			t.Fatal(err)
		}
		return kp, pub + ": " + enc
	}
	sys, sysLine := account(false)
	sysPub, _ := sys.PublicKey()
	acc, accLine := account(true)
	conf := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(conf, []byte("operator: "+opJWT+"\nsystem_account: "+sysPub+
		"\nresolver: MEMORY\nresolver_preload: {\n"+sysLine+"\n"+accLine+"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// creds writes a credentials file for a new user of the account acc.
	creds := func(acc nkeys.KeyPair) (string, []byte) {
		user, _ := nkeys.CreateUser()
		pub, _ := user.PublicKey()
		seed, _ := user.Seed()
		ujwt, err := jwt.NewUserClaims(pub).Encode(acc)
		if err != nil {
			t.Fatal(err)
		}
		b, err := jwt.FormatUserConfig(ujwt, seed)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, pub+".creds")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return f, seed
	}
	srv, err := testsrv.StartNATSWith(ctx(t), "-js", "-c", conf)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	file, _ := creds(acc)
	c, err := dlock.Open(ctx(t), srv.URL+"?creds="+file)
	if err != nil {
		t.Fatalf("Open with the user's credentials: %v", err)
	}
	l, err := c.TryLock(ctx(t), key(t))
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx(t))
	c.Close()

	stranger, _ := account(true) // signed by the operator, but not preloaded
	file, seed := creds(stranger)
	c, err = dlock.Open(ctx(t), srv.URL+"?creds="+file)
	if err == nil {
		c.Close()
		t.Fatal("Open as a user of an unknown account succeeded")
	}
	if !errors.Is(err, dlock.ErrPermanent) || strings.Contains(err.Error(), string(seed)) {
		t.Errorf("Open as a user of an unknown account = %v; want a permanent error that does not show the seed", err)
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
