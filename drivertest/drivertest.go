// Package drivertest is the conformance suite every dlock driver must pass,
// and the benchmarks every driver runs.
//
// A driver's test calls Run with a Config that opens new drivers over the
// store under test (a real server started by the test, never a mock):
//
//	func TestConformance(t *testing.T) {
//		drivertest.Run(t, drivertest.Config{
//			NewDriver: func(t testing.TB) driver.Driver { return mydriver.New(...) },
//		})
//	}
//
// The suite exercises the driver through the portable API in package dlock
// (which is what users see) and, for the parts of the contract the API hides
// (foreign owners, repeated acquires), through the driver interface directly.
// Every subtest uses keys of its own, so subtests run in parallel and the
// suite can share a store with other tests.
package drivertest

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// Config describes the driver under test.
type Config struct {
	// NewDriver returns a new, independent driver (with connections of its
	// own) over the one store under test. The suite calls it several times
	// per test to act as separate clients, and closes every driver it gets.
	NewDriver func(t testing.TB) driver.Driver

	// Residue, if set, counts the records the store keeps for keys that
	// start with prefix, live or expired. The suite uses it to prove that
	// nothing is left behind after release, expiry and abandoned waits.
	Residue func(ctx context.Context, prefix string) (int, error)

	// NewHungDriver, if set, returns a new driver over the store under test
	// and a function that makes the store hang for that driver: every byte
	// stops in both directions while connections stay open, as with a
	// SIGSTOPped server or a blackholed network (testsrv.Proxy's Block).
	// The suite calls hang at most once per driver and never undoes it; the
	// Config tears the hung path down when t ends. The suite uses it to check
	// that every call returns promptly once its context is cancelled. Leave
	// it nil only for an in-process store, which cannot hang.
	NewHungDriver func(t testing.TB) (d driver.Driver, hang func())

	// ShortTTL is the lease used by tests that wait for a lease to expire.
	// Zero means the larger of 300ms and the driver's MinTTL.
	ShortTTL time.Duration
}

// Run runs the conformance suite as subtests of t.
func Run(t *testing.T, cfg Config) {
	if cfg.NewDriver == nil {
		t.Fatal("drivertest: Config.NewDriver is nil")
	}
	d := cfg.NewDriver(t)
	s := &suite{cfg: cfg, caps: d.Capabilities()}
	d.Close()
	tests := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"MutualExclusion", s.testMutualExclusion},
		{"TryLockHeld", s.testTryLockHeld},
		{"ExpiryAndTakeover", s.testExpiryAndTakeover},
		{"RefreshExtends", s.testRefreshExtends},
		{"AfterLoss", s.testAfterLoss},
		{"ForeignOwner", s.testForeignOwner},
		{"SameOwnerAcquire", s.testSameOwnerAcquire},
		{"FencingTokens", s.testFencingTokens},
		{"LostSignal", s.testLostSignal},
		{"CancelledWait", s.testCancelledWait},
		{"Notification", s.testNotification},
		{"FIFO", s.testFIFO},
		{"MultiLock", s.testMultiLock},
		{"AcquireAll", s.testAcquireAll},
		{"SharedReaders", s.testSharedReaders},
		{"WriterExcludesReaders", s.testWriterExcludesReaders},
		{"NoWriterStarvation", s.testNoWriterStarvation},
		{"Downgrade", s.testDowngrade},
		{"UpgradeRefused", s.testUpgradeRefused},
		{"SemaphoreLimit", s.testSemaphoreLimit},
		{"SemaphorePermitExpires", s.testSemaphorePermitExpires},
		{"ModeMismatch", s.testModeMismatch},
		{"ReleaseAndClose", s.testReleaseAndClose},
		{"PortableHolds", s.testPortableHolds},
		{"ResumeEditedHoldID", s.testResumeEditedHoldID},
		{"ResumeConcurrently", s.testResumeConcurrently},
		{"ResumeShortestLease", s.testResumeShortestLease},
		{"LockDelay", s.testLockDelay},
		{"ListAndForceRelease", s.testListAndForceRelease},
		{"UnsupportedModes", s.testUnsupportedModes},
		{"BadInput", s.testBadInput},
		{"HungStore", s.testHungStore},
	}
	// These run one after another, before the parallel ones: each is
	// quick, but together they would crowd a store with one writer at a
	// time (SQLite) while the timing-sensitive cases run.
	serial := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"CloseEndsWaits", s.testCloseEndsWaits},
		{"ReleaseEndedContext", s.testReleaseEndedContext},
		{"RacingReleases", s.testRacingReleases},
	}
	for _, tc := range serial {
		t.Run(tc.name, tc.fn)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type suite struct {
	cfg  Config
	caps driver.Capabilities
}

// client returns a dlock Client over a new driver, closed when t ends. The
// driver is watched for calls that break the contract's rule on in-flight
// Acquires.
func (s *suite) client(t testing.TB, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(newContract(t, s.cfg.NewDriver(t)), opts...)
	if err != nil {
		t.Fatalf("dlock.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// driver returns a bare driver, closed when t ends.
func (s *suite) driver(t testing.TB) driver.Driver {
	t.Helper()
	d := s.cfg.NewDriver(t)
	t.Cleanup(func() { d.Close() })
	return d
}

func (s *suite) shortTTL() time.Duration {
	if s.cfg.ShortTTL > 0 {
		return s.cfg.ShortTTL
	}
	return max(300*time.Millisecond, s.caps.MinTTL)
}

// prefix returns a key prefix unique to this test run.
func prefix(t testing.TB) string {
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	return "dt:" + name + ":" + rand.Text()[:8] + ":"
}

// assertNoResidue checks, where the Config allows it, that the store keeps
// nothing for keys under prefix.
func (s *suite) assertNoResidue(t *testing.T, prefix string) {
	t.Helper()
	if s.cfg.Residue != nil {
		n, err := s.cfg.Residue(ctx(t), prefix)
		if err != nil {
			t.Fatalf("Residue(%q): %v", prefix, err)
		}
		if n != 0 {
			t.Errorf("store keeps %d records under %q; want none", n, prefix)
		}
	}
	d := s.driver(t)
	if l, ok := d.(driver.Lister); ok {
		hs, err := l.List(ctx(t), prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		if len(hs) != 0 {
			t.Errorf("List(%q) = %v; want no holders", prefix, hs)
		}
	}
}

// waitTimeout bounds every wait in the suite. A wait that reaches it is a
// failure, not a timing measurement.
const waitTimeout = 60 * time.Second

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return c
}

// waitDone waits for a lock's context to end and returns its cause.
func waitDone(t *testing.T, l *dlock.Lock, what string) error {
	t.Helper()
	select {
	case <-l.Done():
		return context.Cause(l.Context())
	case <-time.After(waitTimeout):
		t.Fatalf("%s: lock context still not done after %v", what, waitTimeout)
		return nil
	}
}
