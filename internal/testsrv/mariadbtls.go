package testsrv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"

	"github.com/go-sql-driver/mysql"

	"github.com/dlockhq/dlock/internal/testcert"
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
// same account with tls= a configuration registered with
// mysql.RegisterTLSConfig that trusts Certs.CA (and presents the client
// certificate).
func StartMariaDBTLS(ctx context.Context, cfg MariaDBTLS) (_ *Server, err error) {
	if cfg.Certs == nil {
		return nil, errors.New("testsrv: StartMariaDBTLS: MariaDBTLS.Certs is nil")
	}
	client, err := cfg.Certs.ClientConfig()
	if err != nil {
		return nil, err
	}
	q := url.Values{"cacert": {cfg.Certs.CA}}
	require := "SSL"
	if cfg.ClientCerts {
		q.Set("cert", cfg.Certs.ClientCert)
		q.Set("key", cfg.Certs.ClientKey)
		require = "X509"
	} else {
		client.Certificates = nil
	}
	s, err := startMariaDB(ctx, MariaDBTLSName, []string{
		"--ssl-cert=" + cfg.Certs.ServerCert,
		"--ssl-key=" + cfg.Certs.ServerKey,
		"--ssl-ca=" + cfg.Certs.CA,
	})
	if err != nil {
		return nil, err
	}
	defer s.abandonOnError(&err)
	port := s.port
	tlsName := fmt.Sprintf("testsrv-%s-%d", MariaDBTLSName, port)
	if err := mysql.RegisterTLSConfig(tlsName, client); err != nil {
		return nil, err
	}
	if err := createTLSUser(ctx, mysqlDSN(port, "", "timeout=5s"), require); err != nil {
		return nil, fmt.Errorf("creating the account %s: %w%s", MariaDBTLSUser, err, s.logTail())
	}
	s.dbURL = func(db string) (string, string) {
		u := url.URL{
			Scheme:   "mysql",
			User:     url.UserPassword(MariaDBTLSUser, MariaDBTLSPassword),
			Host:     s.Addr,
			Path:     "/" + db,
			RawQuery: q.Encode(),
		}
		dsn := fmt.Sprintf("%s:%s@tcp(%s)/%s?parseTime=true&tls=%s", MariaDBTLSUser, MariaDBTLSPassword, s.Addr, db, tlsName)
		return u.String(), dsn
	}
	s.URL, s.DSN = s.dbURL(DefaultDatabase)
	return s, nil
}

// createTLSUser creates the account MariaDBTLSUser, which must connect with
// REQUIRE require (SSL or X509), through the root account at dsn.
func createTLSUser(ctx context.Context, dsn, require string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range []string{
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s' REQUIRE %s", MariaDBTLSUser, MariaDBTLSPassword, require),
		fmt.Sprintf("GRANT ALL PRIVILEGES ON *.* TO '%s'@'%%'", MariaDBTLSUser),
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}
