package mysqlsupport

import (
	"net/url"
	"testing"

	"github.com/dlockhq/dlock/internal/testing/testcert"
)

// TestMySQLURLTLS checks the TLS configuration of mysql:// URLs: the TLS
// parameters make a verifying configuration, and that of tls= alone is
// left for the connector to make for the URL's host (go-sql-driver's
// ParseDSN makes it for 127.0.0.1).
func TestMySQLURLTLS(t *testing.T) {
	certs, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mysqlConfig(parse(t, "mysql://u@db.example/x?cacert="+url.QueryEscape(certs.CA)))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLS == nil || cfg.TLS.RootCAs == nil || cfg.TLS.InsecureSkipVerify || cfg.TLS.ServerName != "" {
		t.Errorf("cacert: TLS = %+v; want a verifying configuration with the authority, for the host", cfg.TLS)
	}
	for _, v := range []string{"true", "skip-verify", "preferred"} {
		cfg, err := mysqlConfig(parse(t, "mysql://u@db.example/x?tls="+v))
		if err != nil || cfg.TLSConfig != v || cfg.TLS != nil {
			t.Errorf("tls=%s: TLSConfig %q, TLS %+v, %v; want the configuration left to the connector", v, cfg.TLSConfig, cfg.TLS, err)
		}
	}
}
