package driver_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/dlockhq/dlock/driver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestModes(t *testing.T) {
	s := driver.Modes(driver.Exclusive, driver.Semaphore)
	if !s.Has(driver.Exclusive) || !s.Has(driver.Semaphore) || s.Has(driver.Shared) {
		t.Errorf("Modes(Exclusive, Semaphore) = %b; membership wrong", s)
	}
	if driver.Modes().Has(driver.Exclusive) {
		t.Error("the empty set has Exclusive")
	}
	for m, want := range map[driver.Mode]string{driver.Exclusive: "exclusive", driver.Shared: "shared", driver.Semaphore: "semaphore", 9: "mode(9)"} {
		if got := m.String(); got != want {
			t.Errorf("Mode(%d).String() = %q; want %q", m, got, want)
		}
	}
}
