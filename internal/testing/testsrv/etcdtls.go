package testsrv

import (
	"context"
	"net/url"

	"github.com/dlockhq/dlock/internal/testing/testcert"
)

// StartEtcdTLS starts a single-member etcd cluster as StartEtcd does, whose
// client port serves TLS only (https) with the server certificate of certs
// and asks every client for a certificate signed by certs' authority
// (--client-cert-auth). The readiness check asks GET /health over TLS with
// certs' client certificate. The peer port stays plain: the member has no
// peers.
//
// Server.Addr is the client address "127.0.0.1:port", and URL is
// "etcd://127.0.0.1:port?cacert=...&cert=...&key=..." with the files of
// certs' authority and client certificate. Auth is not enabled: a test
// enables it through the clientv3 Auth API if it needs it.
func StartEtcdTLS(ctx context.Context, certs *testcert.Set) (*Server, error) {
	return startEtcd(ctx, certs)
}

// etcdTLSArgs returns the options of a member serving TLS on its client
// port with certs.
func etcdTLSArgs(certs *testcert.Set) []string {
	return []string{
		"--cert-file", certs.ServerCert,
		"--key-file", certs.ServerKey,
		"--trusted-ca-file", certs.CA,
		"--client-cert-auth",
	}
}

// tlsQuery returns the query of a URL of a server started with certs: the
// files of certs' authority and client certificate.
func tlsQuery(certs *testcert.Set) string {
	q := url.Values{}
	q.Set("cacert", certs.CA)
	q.Set("cert", certs.ClientCert)
	q.Set("key", certs.ClientKey)
	return "?" + q.Encode()
}

// etcdHealthyTLS returns the readiness check of a member started with
// certs: GET /health over TLS with certs' client certificate.
func etcdHealthyTLS(certs *testcert.Set) (func(ctx context.Context, port int) error, error) {
	cfg, err := certs.ClientConfig()
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, port int) error {
		return etcdHealth(ctx, "https://"+loopbackAddr(port), cfg.Clone())
	}, nil
}
