package testcert

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
)

// TestHandshake checks that a server with the set's certificate accepts a
// client that trusts the set's authority, and that a client trusting another
// set's authority is refused with an unknown-authority error.
func TestHandshake(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(s.ServerCert, s.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	dial := func(set *Set) error {
		cfg, err := set.ClientConfig()
		if err != nil {
			return err
		}
		c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err != nil {
			return err
		}
		return c.Close()
	}
	if err := dial(s); err != nil {
		t.Errorf("dial with the set's CA: %v", err)
	}
	var unknown x509.UnknownAuthorityError
	if err := dial(other); !errors.As(err, &unknown) {
		t.Errorf("dial with another CA = %v; want x509.UnknownAuthorityError", err)
	}
}
