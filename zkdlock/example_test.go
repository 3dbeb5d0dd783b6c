package zkdlock_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
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
