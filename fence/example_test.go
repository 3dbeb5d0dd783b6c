package fence_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/fence"
	"github.com/dlockhq/dlock/memdlock"
)

// A value in Redis that only the newest holder of a lock writes.
func ExampleRedis() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	f := fence.NewRedis(rdb)
	client, err := dlock.New(memdlock.New()) // in production, a store with durable tokens
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	err = client.Do(ctx, "config", func(ctx context.Context, l *dlock.Lock) error {
		return f.Set(ctx, "config", `{"mode":"fast"}`, l.Token(), 0)
	})
	if errors.Is(err, fence.ErrStaleToken) {
		log.Print("a newer holder of the lock wrote the config")
	} else if err != nil {
		log.Fatal(err)
	}
	value, token, err := f.Get(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("config %s, written with token %d\n", value, token)
}
