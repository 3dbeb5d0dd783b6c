package urlutil

import (
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"os"
	"strconv"
)

// TLS parameters of dlock's own store URLs (etcd, ZooKeeper, Redis and
// Redlock), named as etcdctl names its flags.
const (
	// ParamTLS turns TLS on with the system's roots ("true") or off
	// ("false"); any of the others turns it on.
	ParamTLS = "tls"
	// ParamCACert is a PEM file of the certificate authorities that the
	// server's certificate must chain to, instead of the system's roots.
	ParamCACert = "cacert"
	// ParamCert and ParamKey are PEM files of the client certificate and
	// its private key, for servers that ask for one.
	ParamCert = "cert"
	ParamKey  = "key"
	// ParamServerName is the name the server's certificate must carry when
	// it is not the host of the URL.
	ParamServerName = "servername"
)

// TLS reads and removes the TLS parameters from q, the query of u, and
// returns the client configuration they ask for, or nil if they ask for none
// and on is false. on turns TLS on regardless (a scheme such as rediss://
// implies it). A file that cannot be read or parsed, a certificate without
// its key, or a malformed "tls" value is an Error naming the parameter. The
// configuration verifies the server's certificate and asks for TLS 1.2 at
// least; its ServerName is left for the caller's client library to fill in
// from the address it dials, unless servername is given.
func TLS(u *url.URL, q url.Values, on bool) (*tls.Config, error) {
	on, err := tlsOn(u, q, on)
	if err != nil {
		return nil, err
	}
	ca, cert, key, name := q.Get(ParamCACert), q.Get(ParamCert), q.Get(ParamKey), q.Get(ParamServerName)
	for _, p := range []string{ParamTLS, ParamCACert, ParamCert, ParamKey, ParamServerName} {
		q.Del(p)
	}
	if !on && ca+cert+key+name == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: name}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, Error(u, "%s: %v", ParamCACert, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, Error(u, "%s=%s: no PEM certificate in the file", ParamCACert, ca)
		}
	}
	switch {
	case cert != "" && key != "":
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, Error(u, "%s=%s with %s: %v", ParamCert, cert, ParamKey, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case cert != "":
		return nil, Error(u, "%s=%s without %s: a client certificate needs its private key", ParamCert, cert, ParamKey)
	case key != "":
		return nil, Error(u, "%s without %s: a private key needs its client certificate", ParamKey, ParamCert)
	}
	return cfg, nil
}

// tlsOn returns whether q's "tls" parameter, or on, turns TLS on; "false"
// with other TLS parameters is an Error.
func tlsOn(u *url.URL, q url.Values, on bool) (bool, error) {
	if !q.Has(ParamTLS) {
		return on, nil
	}
	b, err := strconv.ParseBool(q.Get(ParamTLS))
	if err != nil {
		return false, Error(u, "%s=%q: want true or false", ParamTLS, q.Get(ParamTLS))
	}
	if !b && (q.Has(ParamCACert) || q.Has(ParamCert) || q.Has(ParamKey) || q.Has(ParamServerName)) {
		return false, Error(u, "%s=false with TLS parameters (%s, %s, %s, %s)", ParamTLS, ParamCACert, ParamCert, ParamKey, ParamServerName)
	}
	return on || b, nil
}
