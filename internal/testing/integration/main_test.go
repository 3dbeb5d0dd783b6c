package integration_test

import (
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// TestMain starts memcached, for its lease clock of whole seconds (see
// hostile_test.go), and fails the run if goroutines are left over.
func TestMain(m *testing.M) { testsrv.Main(m, testsrv.Memcached) }

func newClient(t *testing.T, d driver.Driver, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
