package testsrv

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Main is the TestMain of a package whose tests need servers: it runs the
// tests with the named servers (see Run), then fails the run if goroutines
// are left over once the servers have stopped, and exits.
//
//	func TestMain(m *testing.M) { testsrv.Main(m, testsrv.Etcd) }
func Main(m *testing.M, names ...string) { os.Exit(NoLeaks(Run(m, names...))) }

// NoLeaks returns code, or 1 if code is 0 and goroutines other than the
// test runner's are still running (go.uber.org/goleak), which it reports on
// standard error.
func NoLeaks(code int) int {
	if code != 0 {
		return code
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintf(os.Stderr, "leaked goroutines: %v\n", err)
		return 1
	}
	return 0
}
