package fill_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/fill"
)

// A report that is expensive to build, cached for every process: on a miss,
// one process builds it and the others read it from the cache.
func ExampleOnce() {
	ctx := context.Background()
	client, err := dlock.Open(ctx, "mem://example-fill") // redis://, postgres://, etcd:// ... in a fleet
	if err != nil {
		panic(err)
	}
	defer client.Close()

	var (
		mu    sync.Mutex
		cache = map[string]string{} // stands for Redis, memcached, a table
	)
	report := fill.Cache[string]{
		Load: func(context.Context) (string, bool, error) {
			mu.Lock()
			defer mu.Unlock()
			v, ok := cache["report:2026-11"]
			return v, ok, nil
		},
		Compute: func(ctx context.Context) (string, error) {
			fmt.Println("building the report")
			return "42 invoices", nil
		},
		Store: func(_ context.Context, v string) error {
			mu.Lock()
			defer mu.Unlock()
			cache["report:2026-11"] = v
			return nil
		},
	}
	for range 3 {
		v, err := fill.Once(ctx, client, "fill:report:2026-11", report, dlock.WithTTL(30*time.Second))
		if err != nil {
			panic(err)
		}
		fmt.Println(v)
	}
	// Output:
	// building the report
	// 42 invoices
	// 42 invoices
	// 42 invoices
}
