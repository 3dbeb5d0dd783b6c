package natsdlock

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/drivertest"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

func TestMain(m *testing.M) { testsrv.Main(m, testsrv.NATS, testsrv.NATSCluster) }

// Helpers shared with the other backends' tests.
var ctx, req = dlocktest.Ctx, dlocktest.Request

func key(t testing.TB) string { return dlocktest.Key(t, "nats") }

// newTestDriver returns a driver with a connection of its own to addr (a
// comma-separated list for a cluster), closed when t ends.
func newTestDriver(t testing.TB, addr string, opts ...Option) *Driver {
	t.Helper()
	nc, err := nats.Connect("nats://" + strings.ReplaceAll(addr, ",", ",nats://"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := newDriver(ctx(t), nc, true, opts)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// newHungDriver returns a driver connected through a proxy to addr (the
// first of a list), and the proxy's Block, which hangs the server for it.
func newHungDriver(t testing.TB, addr string, opts ...Option) (*Driver, func()) {
	t.Helper()
	first, _, _ := strings.Cut(addr, ",")
	p, err := testsrv.StartProxy(first)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return newTestDriver(t, p.Addr(), opts...), p.Block
}

func suiteConfig(t testing.TB, addr string, opts ...Option) drivertest.Config {
	return drivertest.Config{
		NewDriver:     func(t testing.TB) driver.Driver { return newTestDriver(t, addr, opts...) },
		NewHungDriver: func(t testing.TB) (driver.Driver, func()) { return newHungDriver(t, addr, opts...) },
		Residue: func(ctx context.Context, prefix string) (int, error) {
			return residue(ctx, addr, DefaultBucket, prefix)
		},
		ShortTTL: minTTL,
	}
}

// residue counts the records of the bucket's keys that start with prefix,
// leaving out the markers of ended holds, which expire after markerTTL
// (TestTokensSurviveRestart waits until they have).
func residue(ctx context.Context, addr, bucket, prefix string) (int, error) {
	nc, err := nats.Connect("nats://" + addr)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("$KV."+bucket+".>"))
	if err != nil {
		return 0, err
	}
	n := 0
	for subj := range info.State.Subjects {
		k, ok := dlockKey(strings.TrimPrefix(subj, "$KV."+bucket+"."))
		if !ok || !strings.HasPrefix(k, prefix) {
			continue
		}
		m, err := s.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if m.Header.Get("KV-Operation") == "" && m.Header.Get(jetstream.MarkerReasonHeader) == "" {
			n++
		}
	}
	return n, nil
}

func TestConformance(t *testing.T) {
	drivertest.Run(t, suiteConfig(t, testsrv.Get(t, testsrv.NATS).Addr))
}

// TestConformanceCluster runs the suite on a 3-node JetStream cluster, with
// a bucket of three replicas.
func TestConformanceCluster(t *testing.T) {
	srv := testsrv.Get(t, testsrv.NATSCluster)
	drivertest.Run(t, suiteConfig(t, strings.Join(srv.Addrs, ","), WithReplicas(3)))
}

func BenchmarkDriver(b *testing.B) {
	drivertest.RunBenchmarks(b, suiteConfig(b, testsrv.Get(b, testsrv.NATS).Addr))
}

// TestOpenURL checks that a nats:// URL opens a driver on the bucket its
// path names.
func TestOpenURL(t *testing.T) {
	srv := testsrv.Get(t, testsrv.NATS)
	c, err := dlock.Open(ctx(t), srv.URL+"/urltest")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryLock(ctx(t), key(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestForeignRecords checks that records of other programs in the bucket
// (a key with a dot, which no dlock key encodes to, and a key that decodes
// like a dlock key but holds something else) are left out of List, and that
// an Acquire on the dlock key of the latter fails with a permanent error
// rather than taking it.
func TestForeignRecords(t *testing.T) {
	d := newTestDriver(t, testsrv.Get(t, testsrv.NATS).Addr, WithBucket("foreign"))
	k := key(t)
	foreign := entryKey(k + "-foreign")
	for _, fk := range []string{"app.config", foreign} {
		if _, err := d.KeyValue().PutString(ctx(t), fk, "not a lock"); err != nil {
			t.Fatal(err)
		}
		defer d.KeyValue().Purge(ctx(t), fk, jetstream.PurgeTTL(markerTTL))
	}
	r := req(k)
	if res, err := d.Acquire(ctx(t), r); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	defer d.Release(ctx(t), r)
	hs, err := d.List(ctx(t), "")
	if err != nil {
		t.Fatalf("List with foreign records in the bucket: %v", err)
	}
	if len(hs) != 1 || hs[0].Key != k {
		t.Errorf("List = %+v; want the one hold on %q", hs, k)
	}
	res, err := d.Acquire(ctx(t), req(k+"-foreign"))
	if err == nil || !d.Permanent(err) || res.Acquired {
		t.Errorf("Acquire of a key holding a foreign record = %+v, %v; want a permanent error", res, err)
	}
}
