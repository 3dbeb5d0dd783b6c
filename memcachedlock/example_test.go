package memcachedlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memcachedlock"
)

// A lock over a memcached server the program already has a client for. The
// driver does not own the client; dlock.Open("memcached://...") makes one
// that it owns.
func ExampleNew() {
	mc := memcache.New("127.0.0.1:11211")
	mc.MaxIdleConns = 32 // about the number of goroutines taking locks
	d, err := memcachedlock.New(mc, memcachedlock.WithPrefix("myapp:"))
	if err != nil {
		log.Fatal(err)
	}
	c, err := dlock.New(d)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	// Leases are whole seconds and may end up to a second early: an 11s TTL
	// gives 10s of validity.
	err = c.Do(ctx, "cache:rebuild:home", func(ctx context.Context, l *dlock.Lock) error {
		fmt.Println("rebuilding; valid for", time.Until(l.ValidUntil()).Round(time.Second))
		return nil
	}, dlock.WithTTL(11*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}
