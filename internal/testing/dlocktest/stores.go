package dlocktest

import (
	"context"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
)

// Store is a store that package tests run on: URL returns a URL private to
// the test (a database, key prefix or name of its own).
type Store struct {
	Name string
	URL  func(t *testing.T) string
}

// EachStore runs test on every store, as a subtest named after it.
func EachStore(t *testing.T, stores []Store, test func(t *testing.T, url string)) {
	for _, s := range stores {
		t.Run(s.Name, func(t *testing.T) { test(t, s.URL(t)) })
	}
}

// Open returns a Client of its own on url, as another process would have,
// closed when the test ends.
func Open(t *testing.T, url string) *dlock.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dlock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
