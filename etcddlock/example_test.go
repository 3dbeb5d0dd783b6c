package etcddlock_test

import (
	"context"
	"fmt"
	"log"
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
