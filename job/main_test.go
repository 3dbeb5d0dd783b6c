package job_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if goroutines are left over. (The tests that run
// on real stores are in internal/testing/integration/job.)
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
