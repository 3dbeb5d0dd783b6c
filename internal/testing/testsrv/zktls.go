package testsrv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dlockhq/dlock/internal/testing/testcert"
)

// zkNettyJars are the Netty libraries that ZooKeeper's Netty connection
// factory, which serves TLS, needs besides those zookeeper.jar's manifest
// names (Debian's names them only in part).
var zkNettyJars = []string{"netty-codec.jar", "netty-resolver.jar", "netty-buffer.jar", "netty-common.jar", "netty-handler.jar", "netty-transport.jar"}

// StartZooKeeperTLS starts a standalone ZooKeeper server as StartZooKeeper
// does, which also serves TLS on a second port (secureClientPort, with the
// Netty connection factory) with the server certificate of certs, and asks
// TLS clients for a certificate signed by certs' authority
// (ssl.clientAuth=need). The key store and trust store are certs' PEM
// files. The plain client port stays open for the readiness check's
// four-letter words.
//
// Server.Addr is the TLS address "127.0.0.1:port", Addrs holds Addr alone,
// and URL is "zk://127.0.0.1:port?cacert=...&cert=...&key=..." with the
// files of certs' authority and client certificate. The error wraps
// ErrMissing if java, Debian's zookeeper.jar or Netty cannot be found.
func StartZooKeeperTLS(ctx context.Context, certs *testcert.Set) (*Server, error) {
	return startZooKeeper(ctx, certs)
}

// zkTLS returns the classpath of a ZooKeeper server serving TLS with certs
// (classpath and Netty), and the lines of its configuration but the secure
// port. It writes the key store, the server's key and
// certificate in one PEM file, into certs' directory.
func zkTLS(classpath string, certs *testcert.Set) (string, string, error) {
	cp := []string{classpath}
	for _, jar := range zkNettyJars {
		p := filepath.Join(filepath.Dir(strings.Split(classpath, string(os.PathListSeparator))[0]), jar)
		if !isFile(p) {
			return "", "", fmt.Errorf("%w: zookeeper with TLS (%s not found)", ErrMissing, p)
		}
		cp = append(cp, p)
	}
	key, err := os.ReadFile(certs.ServerKey)
	if err != nil {
		return "", "", err
	}
	cert, err := os.ReadFile(certs.ServerCert)
	if err != nil {
		return "", "", err
	}
	store := filepath.Join(certs.Dir, "zookeeper-keystore.pem")
	if err := os.WriteFile(store, append(key, cert...), 0o600); err != nil {
		return "", "", err
	}
	config := "secureClientPortAddress=127.0.0.1\n" +
		"serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n" +
		"ssl.keyStore.location=" + store + "\n" +
		"ssl.keyStore.type=PEM\n" +
		"ssl.trustStore.location=" + certs.CA + "\n" +
		"ssl.trustStore.type=PEM\n" +
		"ssl.clientAuth=need\n"
	return strings.Join(cp, string(os.PathListSeparator)), config, nil
}
