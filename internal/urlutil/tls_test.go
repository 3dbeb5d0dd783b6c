package urlutil

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/testcert"
)

func TestTLS(t *testing.T) {
	set, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(t.TempDir(), "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	parse := func(raw string, on bool) (*url.URL, url.Values, error) {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		_, err = TLS(u, q, on)
		return u, q, err
	}
	good := []struct {
		raw    string
		on     bool
		wantOn bool
	}{
		{"etcd://h:1?session=5s", false, false},
		{"etcd://h:1?tls=false", false, false},
		{"rediss://h:1", true, true},
		{"etcd://h:1?tls=true", false, true},
		{"etcd://h:1?cacert=" + set.CA, false, true},
		{"etcd://h:1?cacert=" + set.CA + "&cert=" + set.ClientCert + "&key=" + set.ClientKey + "&servername=localhost", false, true},
	}
	for _, c := range good {
		u, err := url.Parse(c.raw)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		cfg, err := TLS(u, q, c.on)
		if err != nil {
			t.Errorf("TLS(%s) = %v", c.raw, err)
			continue
		}
		if (cfg != nil) != c.wantOn {
			t.Errorf("TLS(%s) = %v; want TLS on: %v", c.raw, cfg, c.wantOn)
		}
		for _, p := range []string{ParamTLS, ParamCACert, ParamCert, ParamKey, ParamServerName} {
			if q.Has(p) {
				t.Errorf("TLS(%s) left %s in the query", c.raw, p)
			}
		}
		if strings.Contains(c.raw, "session=") && q.Get("session") != "5s" {
			t.Errorf("TLS(%s) removed another parameter", c.raw)
		}
		if strings.Contains(c.raw, "&cert=") && (cfg.RootCAs == nil || len(cfg.Certificates) != 1 || cfg.ServerName != "localhost") {
			t.Errorf("TLS(%s) = %+v; want the CA, the client certificate and the server name", c.raw, cfg)
		}
	}
	bad := []struct{ raw, want string }{
		{"etcd://h:1?tls=maybe", `tls="maybe"`},
		{"etcd://h:1?tls=false&cacert=" + set.CA, "tls=false with TLS parameters"},
		{"etcd://h:1?cacert=/nonexistent/ca.pem", "cacert: open /nonexistent/ca.pem"},
		{"etcd://h:1?cacert=" + junk, "no PEM certificate"},
		{"etcd://h:1?cert=" + set.ClientCert, "without key"},
		{"etcd://h:1?key=" + set.ClientKey, "without cert"},
		{"etcd://h:1?cert=" + set.ClientCert + "&key=" + junk, "cert=" + set.ClientCert + " with key"},
	}
	for _, c := range bad {
		_, _, err := parse(c.raw, false)
		var ae *dlock.ArgError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("TLS(%s) = %v; want an ArgError containing %q", c.raw, err, c.want)
		}
	}
}
