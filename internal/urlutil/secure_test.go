package urlutil

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/testcert"
)

func TestPassword(t *testing.T) {
	for _, tc := range []struct {
		raw        string
		tls        bool
		user, pass string
		bad        string // in the error, if one is wanted
	}{
		{raw: "etcd://h:1"},
		{raw: "etcd://h:1?insecure_auth=true"},
		{raw: "etcd://u:s3cret@h:1", tls: true, user: "u", pass: "s3cret"},
		{raw: "etcd://u:s3cret@h:1?insecure_auth=true", user: "u", pass: "s3cret"},
		{raw: "etcd://u:s3cret@h:1", bad: `password of user "u" in clear text: connect over TLS (tls=true, or cacert=) or allow it with insecure_auth=true`},
		{raw: "etcd://u:s3cret@h:1?insecure_auth=false", bad: "insecure_auth=true"},
		{raw: "etcd://u:s3cret@h:1?insecure_auth=maybe", bad: `insecure_auth="maybe"`},
		{raw: "etcd://u@h:1", tls: true, bad: "without a user name and a password"},
		{raw: "etcd://u:@h:1", tls: true, bad: "without a user name and a password"},
		{raw: "etcd://:s3cret@h:1", tls: true, bad: "without a user name and a password"},
	} {
		u, err := url.Parse(tc.raw)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		user, pass, err := Password(u, q, tc.tls)
		if tc.bad != "" {
			var ae *dlock.ArgError
			if !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.bad) || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("Password(%q) = %v; want an ArgError saying %q, without the password", tc.raw, err, tc.bad)
			}
			continue
		}
		if err != nil || user != tc.user || pass != tc.pass || q.Has(ParamInsecureAuth) {
			t.Errorf("Password(%q) = %q, %q, %v, query %v; want %q, %q without insecure_auth", tc.raw, user, pass, err, q, tc.user, tc.pass)
		}
	}
}

// serve accepts connections on ln until it is closed, completing a TLS
// handshake on each if cfg is not nil, or else answering in clear text.
func serve(t *testing.T, ln net.Listener, cfg *tls.Config) {
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if cfg == nil {
					c.Write([]byte("HTTP/1.0 400 Bad Request\r\n\r\n"))
					return
				}
				tc := tls.Server(c, cfg)
				if tc.Handshake() == nil {
					tc.Read(make([]byte, 1)) // until the client closes
				}
			}()
		}
	}()
}

func TestCheckTLS(t *testing.T) {
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
	server := &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: good.RootCAs}
	secure, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, secure, server)
	// A server that turns every client certificate down (with a "bad
	// certificate" alert).
	picky, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, picky, &tls.Config{
		Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert,
		VerifyPeerCertificate: func([][]byte, [][]*x509.Certificate) error { return errors.New("not this one") },
	})
	clear, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, clear, nil)
	refused := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		return ln.Addr().String()
	}()
	wrongCA, err := other.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	wrongCA.Certificates = good.Certificates
	noCert := &tls.Config{RootCAs: good.RootCAs}
	otherCert, err := other.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	otherCert.RootCAs = good.RootCAs
	system := &tls.Config{RootCAs: x509.NewCertPool()} // trusts nothing
	s := secure.Addr().String()
	for _, tc := range []struct {
		name  string
		addrs []string
		cfg   *tls.Config
		want  []string // in the error; none: no error
	}{
		{"good", []string{s}, good, nil},
		{"one of two good", []string{refused, s}, good, nil},
		{"refused", []string{refused}, good, nil},
		{"wrong CA", []string{s}, wrongCA, []string{"server's certificate is not trusted (see cacert and servername)", "x509: certificate signed by unknown authority", s}},
		{"no root", []string{refused, s}, system, []string{"not trusted", "x509"}},
		{"client certificate turned down", []string{picky.Addr().String()}, good, []string{"server rejected the client certificate (see cert and key)", "bad certificate"}},
		// Go's client sends no certificate that the server's authorities
		// did not sign, and Go's server answers a missing certificate
		// with a handshake failure, which has other causes too: no
		// definite answer.
		{"no client certificate", []string{s}, noCert, nil},
		{"other client certificate", []string{s}, otherCert, nil},
		{"clear text", []string{clear.Addr().String()}, good, []string{"does not speak TLS"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := CheckTLS(ctx, tc.addrs, tc.cfg)
		cancel()
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%s: CheckTLS = %v; want nil", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: CheckTLS = nil; want an error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: CheckTLS = %v; want %q in it", tc.name, err, w)
			}
		}
	}
}
