package testsrv

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/dlockhq/dlock/internal/testing/testcert"
)

// PostgresTLSName is the Name of a server started by StartPostgresTLS.
const PostgresTLSName = "postgres-tls"

// PostgresTLS describes the TLS of the PostgreSQL server that
// StartPostgresTLS starts.
type PostgresTLS struct {
	// Certs holds the server's certificate and key, and the authority
	// that client certificates must chain to. Required.
	Certs *testcert.Set
	// ClientCerts makes the server demand a client certificate signed by
	// Certs.CA (clientcert=verify-ca in pg_hba.conf).
	ClientCerts bool
}

// StartPostgresTLS starts a PostgreSQL server as StartPostgres does, with
// ssl=on and the certificate, key and authority of cfg.Certs, whose
// pg_hba.conf accepts TCP connections over TLS only (hostssl lines; a
// connection without TLS finds no entry and is refused), and with a client
// certificate if cfg.ClientCerts is set. The unix socket needs no TLS.
//
// Server.URL, Server.DSN and the URLs of NewDatabase are
// "postgres://postgres@127.0.0.1:port/db?sslmode=verify-full&sslrootcert=CA",
// with sslcert and sslkey (the client certificate of cfg.Certs) when
// cfg.ClientCerts is set.
func StartPostgresTLS(ctx context.Context, cfg PostgresTLS) (*Server, error) {
	if cfg.Certs == nil {
		return nil, errors.New("testsrv: StartPostgresTLS: PostgresTLS.Certs is nil")
	}
	q := url.Values{"sslmode": {"verify-full"}, "sslrootcert": {cfg.Certs.CA}}
	hostssl := "trust"
	if cfg.ClientCerts {
		q.Set("sslcert", cfg.Certs.ClientCert)
		q.Set("sslkey", cfg.Certs.ClientKey)
		hostssl = "trust clientcert=verify-ca"
	}
	const cert, key, ca = "tls-server.crt", "tls-server.key", "tls-ca.crt"
	setup := func(data string, cred *syscall.Credential) error {
		// The server's user must own its key, readable by it alone.
		for _, f := range []struct {
			from, to string
			mode     os.FileMode
		}{{cfg.Certs.ServerCert, cert, 0o644}, {cfg.Certs.ServerKey, key, 0o600}, {cfg.Certs.CA, ca, 0o644}} {
			if err := copyOwned(f.from, filepath.Join(data, f.to), f.mode, cred); err != nil {
				return err
			}
		}
		hba := strings.Join([]string{
			"local all all trust",
			"hostssl all all 127.0.0.1/32 " + hostssl,
			"hostssl all all ::1/128 " + hostssl,
			"",
		}, "\n")
		return os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(hba), 0o600)
	}
	return startPostgres(ctx, postgresOptions{
		name:   PostgresTLSName,
		params: q.Encode(),
		setup:  setup,
		args: []string{
			"-c", "ssl=on",
			"-c", "ssl_cert_file=" + cert,
			"-c", "ssl_key_file=" + key,
			"-c", "ssl_ca_file=" + ca,
		},
	})
}

// copyOwned copies the file from to the new file to with mode, owned by
// cred's user if cred is not nil.
func copyOwned(from, to string, mode os.FileMode, cred *syscall.Credential) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		return err
	}
	if cred != nil {
		return os.Chown(to, int(cred.Uid), int(cred.Gid))
	}
	return nil
}
