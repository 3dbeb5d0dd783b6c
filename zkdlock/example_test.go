package zkdlock_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/zkdlock"
)

// A lock over a ZooKeeper ensemble. The driver keeps one session; a process
// that dies or is cut off loses its locks when the session expires, 10s
// after its last contact here.
func ExampleNew() {
	d, err := zkdlock.New([]string{"zk1:2181", "zk2:2181", "zk3:2181"},
		zkdlock.WithPrefix("/myapp/locks"),
		zkdlock.WithSessionTTL(10*time.Second),
		zkdlock.WithLogger(slog.Default()),
		zkdlock.WithConnectOptions(zk.WithMaxBufferSize(1<<20)))
	if err != nil {
		log.Fatal(err)
	}
	c, err := dlock.New(d)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	err = c.Do(context.Background(), "report:nightly", func(ctx context.Context, l *dlock.Lock) error {
		// Pass the fencing token to the store the job writes to.
		fmt.Println("running with token", l.Token())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// The same from a URL.
func ExampleNew_url() {
	c, err := dlock.Open(context.Background(), "zk://zk1:2181,zk2:2181,zk3:2181/myapp?session=10s&prefix=/locks")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

// A driver that connects over TLS with a client certificate, authenticates
// as a digest user and keeps its znodes to that user. The URL form of the
// same is
// zk://locker:password@zk1:2281,zk2:2281?prefix=/myapp/locks&cacert=/etc/zk/ca.pem&cert=/etc/dlock/client.pem&key=/etc/dlock/client-key.pem.
func ExampleNew_tls() {
	ca, err := os.ReadFile("/etc/zk/ca.pem")
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		log.Fatal("no certificate in /etc/zk/ca.pem")
	}
	cert, err := tls.LoadX509KeyPair("/etc/dlock/client.pem", "/etc/dlock/client-key.pem")
	if err != nil {
		log.Fatal(err)
	}
	cfg := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	dialTLS := func(network, address string, timeout time.Duration) (net.Conn, error) {
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: cfg}
		return d.Dial(network, address)
	}
	d, err := zkdlock.New([]string{"zk1:2281", "zk2:2281"},
		zkdlock.WithPrefix("/myapp/locks"),
		zkdlock.WithDialer(dialTLS),
		zkdlock.WithAuth("digest", []byte("locker:"+os.Getenv("ZK_PASSWORD"))),
		zkdlock.WithACL(zk.AuthACL(zk.PermAll)))
	if err != nil {
		log.Fatal(err)
	}
	c, err := dlock.New(d)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	// c.Lock(...) as with any client.
}
