package testsrv

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/dlockhq/dlock/internal/testing/testcert"
)

// MariaDBTLSName is the Name of a server started by StartMariaDBTLS.
const MariaDBTLSName = "mariadb-tls"

// The account of StartMariaDBTLS that must use TLS.
const (
	// MariaDBTLSUser is the account's name.
	MariaDBTLSUser = "dlock_tls"
	// MariaDBTLSPassword is its password.
	MariaDBTLSPassword = "tls-Pa55word"
)

// MariaDBTLS describes the TLS of the MariaDB server that StartMariaDBTLS
// starts.
type MariaDBTLS struct {
	// Certs holds the server's certificate and key, and the authority
	// that client certificates must chain to. Required.
	Certs *testcert.Set
	// ClientCerts makes the account demand a client certificate signed
	// by Certs.CA (REQUIRE X509 instead of REQUIRE SSL).
	ClientCerts bool
}

// StartMariaDBTLS starts a MariaDB server as StartMariaDB does, with
// --ssl-cert, --ssl-key and --ssl-ca from cfg.Certs, and creates the
// account MariaDBTLSUser (password MariaDBTLSPassword, every privilege),
// which may connect over TLS only (REQUIRE SSL), with a client certificate
// when cfg.ClientCerts is set (REQUIRE X509). The harness's own account,
// root, still connects without TLS.
//
// Server.URL and the URLs of NewDatabase are
// "mysql://dlock_tls:password@127.0.0.1:port/db?cacert=CA", with cert and
// key (the client certificate of cfg.Certs) when cfg.ClientCerts is set.
// Server.DSN and the DSNs of NewDatabase are go-sql-driver/mysql DSNs of the
// same account with tls=mariadb-tls (MariaDBTLSName): the caller registers
// under that name, with mysql.RegisterTLSConfig, a configuration that
// trusts Certs.CA (and presents the client certificate); testsrv imports
// no MySQL client library to do it.
func StartMariaDBTLS(ctx context.Context, cfg MariaDBTLS) (_ *Server, err error) {
	if cfg.Certs == nil {
		return nil, errors.New("testsrv: StartMariaDBTLS: MariaDBTLS.Certs is nil")
	}
	q := url.Values{"cacert": {cfg.Certs.CA}}
	require := "SSL"
	if cfg.ClientCerts {
		q.Set("cert", cfg.Certs.ClientCert)
		q.Set("key", cfg.Certs.ClientKey)
		require = "X509"
	}
	// The account that must use TLS.
	account := fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s' REQUIRE %s;\nGRANT ALL PRIVILEGES ON *.* TO '%s'@'%%';\n",
		MariaDBTLSUser, MariaDBTLSPassword, require, MariaDBTLSUser)
	s, err := startMariaDB(ctx, MariaDBTLSName, []string{
		"--ssl-cert=" + cfg.Certs.ServerCert,
		"--ssl-key=" + cfg.Certs.ServerKey,
		"--ssl-ca=" + cfg.Certs.CA,
	}, account)
	if err != nil {
		return nil, err
	}
	s.dbURL = func(db string) (string, string) {
		u := url.URL{
			Scheme:   "mysql",
			User:     url.UserPassword(MariaDBTLSUser, MariaDBTLSPassword),
			Host:     s.Addr,
			Path:     "/" + db,
			RawQuery: q.Encode(),
		}
		dsn := fmt.Sprintf("%s:%s@tcp(%s)/%s?parseTime=true&tls=%s", MariaDBTLSUser, MariaDBTLSPassword, s.Addr, db, MariaDBTLSName)
		return u.String(), dsn
	}
	s.URL, s.DSN = s.dbURL(DefaultDatabase)
	return s, nil
}
