//go:build unix

package check

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

// TestAuditClockSkew audits Redis, ZooKeeper and NATS servers from a host whose
// clock is 3s behind: a risk where leases expire on the server's clock, a
// broken promise in Redis's legacy protocol, whose leases expire on client
// clocks.
func TestAuditClockSkew(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var urls []string
	for _, start := range []func(context.Context) (*testsrv.Server, error){testsrv.StartRedis, testsrv.StartZooKeeper, testsrv.StartNATS} {
		srv, err := start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Stop()
		urls = append(urls, srv.URL)
	}
	redis, zk, nats := urls[0], urls[1], urls[2]
	for _, tc := range []struct {
		url      string
		behind   time.Duration
		severity string // "" for no finding
	}{
		{redis, 0, ""},
		{redis, 3 * time.Second, SeverityRisk},
		{redis + "?mode=legacy", 3 * time.Second, SeverityBreaks},
		{zk, 0, ""},
		{zk, 3 * time.Second, SeverityRisk},
		{nats, 0, ""},
		{nats, 3 * time.Second, SeverityRisk},
	} {
		clientClock = func() time.Time { return time.Now().Add(-tc.behind) }
		rep, err := Audit(ctx, tc.url)
		clientClock = time.Now
		if err != nil {
			t.Fatal(err)
		}
		c := rep.Servers[0].Clock
		if c == nil || (c.Offset-tc.behind).Abs() > c.Bound {
			t.Errorf("%s, client %v behind: clock read %+v", tc.url, tc.behind, c)
		}
		var got string
		for _, f := range rep.Findings {
			if strings.HasPrefix(f.Setting, "clock +") {
				got = f.Severity
			}
		}
		if got != tc.severity {
			t.Errorf("%s, client %v behind: clock finding %q, want %q (findings %+v)", tc.url, tc.behind, got, tc.severity, rep.Findings)
		}
	}
}

// TestEtcdFixed checks the releases the audit takes for free of etcd's
// known lease bugs: the installed etcd shows only one of them.
func TestEtcdFixed(t *testing.T) {
	for v, want := range map[string]bool{
		"3.3.25": false, "3.4.29": false, "3.4.30": true, "3.5.12": false, "3.5.13": true,
		"3.5.21": true, "3.6.0": true, "4.0.0": true, "garbage": false,
	} {
		if got := etcdFixed(v); got != want {
			t.Errorf("etcdFixed(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestNATSTTLs checks the nats-server releases the audit takes for having
// per-message TTLs: the driver refuses older servers when it opens the
// bucket, and only a newer one is installed.
func TestNATSTTLs(t *testing.T) {
	for v, want := range map[string]bool{
		"2.10.29": false, "2.11.0": true, "2.15.2": true, "3.0.0": true, "1.4.1": false, "garbage": false,
	} {
		if got := natsTTLs(v); got != want {
			t.Errorf("natsTTLs(%q) = %v, want %v", v, got, want)
		}
	}
}
