package errclass_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/errclass"
	"github.com/dlockhq/dlock/internal/testing/testcert"
	"github.com/dlockhq/dlock/memdlock"
)

func TestGeneric(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("somedriver: acquire %q: %w", "k", err) }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"unsupported", wrap(driver.ErrUnsupported), true},
		{"unknown authority", wrap(x509.UnknownAuthorityError{}), true},
		{"hostname", wrap(x509.HostnameError{Host: "db.example"}), true},
		{"expired", wrap(x509.CertificateInvalidError{Reason: x509.Expired}), true},
		{"no system roots", wrap(x509.SystemRootsError{}), true},
		{"verification", wrap(&tls.CertificateVerificationError{Err: errors.New("x")}), true},
		{"alert bad certificate", wrap(tls.AlertError(42)), true},
		{"alert certificate required", wrap(tls.AlertError(116)), true},
		{"alert internal error", wrap(tls.AlertError(80)), false},
		{"alert close notify", wrap(tls.AlertError(0)), false},
		{"refused", wrap(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), false},
		{"eof", wrap(io.EOF), false},
		{"deadline over a certificate error", fmt.Errorf("%w: %w", context.DeadlineExceeded, x509.UnknownAuthorityError{}), false},
		{"cancelled", wrap(context.Canceled), false},
		{"nil", nil, false},
	} {
		if got := errclass.Generic(tc.err); got != tc.want {
			t.Errorf("%s: Generic(%v) = %v; want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// classifying is a real store whose driver calls errRefused permanent.
type classifying struct{ *memdlock.Driver }

var errRefused = errors.New("WRONGPASS")

func (classifying) Permanent(err error) bool { return errors.Is(err, errRefused) }

func TestPermanentAsksTheDriver(t *testing.T) {
	plain := memdlock.New()
	defer plain.Close()
	d := classifying{memdlock.New()}
	defer d.Close()
	refused := fmt.Errorf("x: %w", errRefused)
	switch {
	case !errclass.Permanent(d, refused):
		t.Error("a driver's permanent error is not permanent")
	case errclass.Permanent(plain, refused):
		t.Error("an error is permanent for a driver without a classifier")
	case !errclass.Permanent(plain, x509.UnknownAuthorityError{}):
		t.Error("a generic permanent error is not permanent for a driver without a classifier")
	case errclass.Permanent(d, fmt.Errorf("%w: %w", context.Canceled, errRefused)):
		t.Error("an error caused by a context that ended is permanent")
	case errclass.Permanent(d, nil):
		t.Error("nil is permanent")
	}
}

// TestHandshakes checks real TLS handshakes that fail for good on either
// side, and that a handshake that succeeds and a server that is gone are
// not taken for them.
func TestHandshakes(t *testing.T) {
	set, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(set.ServerCert, set.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	good, err := set.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	serve := func(cfg *tls.Config) string {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		t.Cleanup(func() { ln.Close(); <-done })
		go func() {
			defer close(done)
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				// The handshake, then an echo of one byte.
				b := make([]byte, 1)
				if _, err := c.Read(b); err == nil {
					c.Write(b)
				}
				c.Close()
			}
		}()
		return ln.Addr().String()
	}
	// exchange dials addr and sends and reads one byte: a server's refusal
	// of the client's certificate comes on the first read under TLS 1.3.
	exchange := func(addr string, cfg *tls.Config) error {
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write([]byte{1}); err != nil {
			return err
		}
		_, err = c.Read(make([]byte, 1))
		return err
	}
	plain := serve(&tls.Config{Certificates: []tls.Certificate{cert}})
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(set.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(ca)
	mutual := serve(&tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool})

	if err := exchange(plain, good); err != nil {
		t.Fatalf("a good handshake failed: %v", err)
	}
	if err := exchange(mutual, good); err != nil {
		t.Fatalf("a good mutual handshake failed: %v", err)
	}
	wrongCA, err := other.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	wrongName := good.Clone()
	wrongName.ServerName = "db.example"
	noCert := good.Clone()
	noCert.Certificates = nil
	for name, tc := range map[string]struct {
		addr string
		cfg  *tls.Config
	}{
		"untrusted authority":       {plain, wrongCA},
		"wrong name":                {plain, wrongName},
		"no client certificate":     {mutual, noCert},
		"untrusted client (mutual)": {mutual, wrongCA},
	} {
		err := exchange(tc.addr, tc.cfg)
		if err == nil {
			t.Errorf("%s: the exchange succeeded", name)
			continue
		}
		if !errclass.Generic(fmt.Errorf("driver: %w", err)) || !errclass.TLSRefused(err) {
			t.Errorf("%s: %v (%T) is not permanent", name, err, err)
		}
	}

	// A server that is gone is not a refusal.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close()
	if err := exchange(gone, good); err == nil || errclass.Generic(err) {
		t.Errorf("dialling a closed port = %v; want a transient error", err)
	}
}
