package memdlock_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/drivertest"
	"github.com/dlockhq/dlock/memdlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func config() drivertest.Config {
	d := memdlock.New()
	return drivertest.Config{
		NewDriver: func(testing.TB) driver.Driver { return d.Share() },
		Residue: func(_ context.Context, prefix string) (int, error) {
			return d.Count(prefix), nil
		},
	}
}

func TestConformance(t *testing.T) { drivertest.Run(t, config()) }

func BenchmarkDriver(b *testing.B) { drivertest.RunBenchmarks(b, config()) }
