package etcddlock_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/etcddlock"
)

// A driver over an existing etcd client.
func ExampleNew() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close() // the driver leaves the client open

	d, err := etcddlock.New(cli, etcddlock.WithSessionTTL(10*time.Second), etcddlock.WithPrefix("/myapp/locks/"))
	if err != nil {
		log.Fatal(err)
	}
	c, err := dlock.New(d)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	l, err := c.Lock(context.Background(), "report:nightly")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(context.Background())
	fmt.Println("holding with token", l.Token())
}

// A driver over an etcd client that connects over TLS with a client
// certificate and authenticates as a user: the TLS configuration goes into
// clientv3.Config.TLS. The URL form of the same is
// etcd://locker:password@etcd1:2379?cacert=/etc/etcd/ca.pem&cert=/etc/dlock/client.pem&key=/etc/dlock/client-key.pem.
func ExampleNew_tls() {
	ca, err := os.ReadFile("/etc/etcd/ca.pem")
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		log.Fatal("no certificate in /etc/etcd/ca.pem")
	}
	cert, err := tls.LoadX509KeyPair("/etc/dlock/client.pem", "/etc/dlock/client-key.pem")
	if err != nil {
		log.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"etcd1:2379", "etcd2:2379", "etcd3:2379"},
		DialTimeout: 5 * time.Second,
		TLS:         &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Username:    "locker",
		Password:    os.Getenv("ETCD_PASSWORD"),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	d, err := etcddlock.New(cli)
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

// Writes to etcd guarded by the lock: the write happens only if the lock is
// still held, in the same transaction.
func ExampleDriver_IsOwner() {
	ctx := context.Background()
	c, err := dlock.Open(ctx, "etcd://127.0.0.1:2379")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	d := c.Driver().(*etcddlock.Driver)

	l, err := c.Lock(ctx, "account:42")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)

	resp, err := d.Client().Txn(ctx).
		If(d.IsOwner(l)).
		Then(clientv3.OpPut("/accounts/42/balance", "100")).
		Commit()
	if err != nil {
		log.Fatal(err)
	}
	if !resp.Succeeded {
		log.Fatal("the lock was lost; nothing was written")
	}
}
