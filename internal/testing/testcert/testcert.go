// Package testcert makes the certificates that tests start TLS servers with:
// a throw-away certificate authority, a server certificate for the loopback
// addresses and a client certificate, all signed by it, written as PEM files.
// Nothing here is fit for anything but a test.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Set is a certificate authority and the server and client certificates it
// signed, as PEM files in one directory.
type Set struct {
	// Dir is the directory holding the files.
	Dir string
	// CA is the authority's certificate (ca.pem).
	CA string
	// ServerCert and ServerKey are the server's certificate and key
	// (server.pem, server-key.pem), valid for localhost, 127.0.0.1 and ::1.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are a client certificate and key
	// (client.pem, client-key.pem) with common name "dlock-test".
	ClientCert, ClientKey string

	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

// New writes a fresh set into dir (created if missing), with keys readable by
// their owner only. Two calls give two unrelated authorities: a client that
// trusts one rejects the other's server, which is how a test gets a wrong CA.
func New(dir string) (*Set, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s := &Set{
		Dir:        dir,
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"),
		ServerKey:  filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"),
		ClientKey:  filepath.Join(dir, "client-key.pem"),
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "dlock test CA " + now.Format(time.RFC3339Nano)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	if s.caCert, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	s.caKey = key
	if err := writePEM(s.CA, "CERTIFICATE", der, 0o644); err != nil {
		return nil, err
	}
	if err := s.issue(s.ServerCert, s.ServerKey, "localhost", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	if err := s.issue(s.ClientCert, s.ClientKey, "dlock-test", x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	return s, nil
}

// Issue writes another certificate signed by the set's authority, for the
// loopback addresses and the common name cn, into certFile and keyFile.
func (s *Set) Issue(certFile, keyFile, cn string) error {
	return s.issue(certFile, keyFile, cn, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

func (s *Set) issue(certFile, keyFile, cn string, usage ...x509.ExtKeyUsage) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usage,
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.caCert, &key.PublicKey, s.caKey)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(certFile, "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writePEM(keyFile, "PRIVATE KEY", kder, 0o600)
}

// ClientConfig returns a TLS configuration that trusts the set's authority
// and presents its client certificate.
func (s *Set) ClientConfig() (*tls.Config, error) {
	pool := x509.NewCertPool()
	pool.AddCert(s.caCert)
	cert, err := tls.LoadX509KeyPair(s.ClientCert, s.ClientKey)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(fmt.Sprintf("testcert: %v", err))
	}
	return n
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}
