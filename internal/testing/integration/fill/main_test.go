package fill_test

import (
	"testing"

	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// TestMain starts memcached, for its lease clock of whole seconds (see
// hostile_test.go), and fails the run if goroutines are left over.
func TestMain(m *testing.M) { testsrv.Main(m, testsrv.Memcached) }
