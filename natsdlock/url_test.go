package natsdlock

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testing/dlocktest"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
)

func TestURL(t *testing.T) {
	srv := testsrv.Get(t, testsrv.NATS)
	for _, tc := range []struct{ url, arg, names string }{
		{"nats://", "url", "no server"},
		{"nats://" + srv.Addr + "?nope=1", "url", "nope"},
		{"nats://" + srv.Addr + "?replicas=x", "url", "x"},
		{"nats://" + srv.Addr + "?replicas=7", "replicas", "7"},
		{"nats://" + srv.Addr + "/a.b", "bucket", "a.b"},
		{"nats://" + srv.Addr + "?connect_timeout=soon", "url", "soon"},
		{"nats://" + srv.Addr + "?nkey=/nonexistent/seed", "url", "/nonexistent/seed"},
		{"nats://u:hunter2@" + srv.Addr, "url", "clear text"},
		{"nats://" + srv.Addr + "?token=hunter2", "url", "clear text"},
	} {
		dlocktest.RejectURL(t, tc.url, tc.arg, tc.names)
		if _, err := dlock.Open(ctx(t), tc.url); err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q) shows the secret: %v", tc.url, err)
		}
	}
	c, err := dlock.Open(ctx(t), "nats://"+srv.Addr+","+srv.Addr+"/app1?replicas=1&connect_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d := c.Driver().(*Driver)
	if d.subj != "$KV.app1." || !d.owns {
		t.Errorf("driver = subject prefix %q, owns %v", d.subj, d.owns)
	}
	l, err := c.TryLock(ctx(t), key(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestJetStreamDisabled checks that a server without JetStream fails the
// Open with an error that says so and is permanent.
func TestJetStreamDisabled(t *testing.T) {
	srv, err := testsrv.StartNATSWith(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	c, err := dlock.Open(ctx(t), srv.URL)
	if err == nil {
		c.Close()
		t.Fatal("Open of a server without JetStream succeeded")
	}
	if !errors.Is(err, jetstream.ErrJetStreamNotEnabled) || !errors.Is(err, dlock.ErrPermanent) {
		t.Errorf("Open of a server without JetStream = %v; want an error wrapping jetstream.ErrJetStreamNotEnabled and dlock.ErrPermanent", err)
	}
}

// TestPassword checks that user:password in the URL authenticates, and
// that a wrong password fails the Open with a permanent error that does
// not show it.
func TestPassword(t *testing.T) {
	srv, err := testsrv.StartNATSWith(ctx(t), "-js", "--user", "app", "--pass", "right-pw")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	c, err := dlock.Open(ctx(t), "nats://app:right-pw@"+srv.Addr+"?insecure_auth=true")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	c, err = dlock.Open(ctx(t), "nats://app:wrong-pw@"+srv.Addr+"?insecure_auth=true")
	if err == nil {
		c.Close()
		t.Fatal("Open with a wrong password succeeded")
	}
	if strings.Contains(err.Error(), "wrong-pw") || !errors.Is(err, dlock.ErrPermanent) {
		t.Errorf("Open with a wrong password = %v; want a permanent error that hides the password", err)
	}
}

// TestSubscribeWithoutDeadline checks that a subscription made with a
// context that has no deadline (a Lock that waits as long as it takes)
// works: the NATS client refuses to flush on such a context.
func TestSubscribeWithoutDeadline(t *testing.T) {
	d := newTestDriver(t, testsrv.Get(t, testsrv.NATS).Addr)
	sub, err := d.Subscribe(context.Background(), req(key(t)))
	if err != nil {
		t.Fatalf("Subscribe without a deadline: %v", err)
	}
	sub.Close()
}

// TestDiscoveryOff checks that discovery=false keeps the client to the
// servers of the URL, where by default it adds the ones the cluster
// advertises.
func TestDiscoveryOff(t *testing.T) {
	srv := testsrv.Get(t, testsrv.NATSCluster)
	for _, tc := range []struct {
		query string
		want  bool // servers discovered
	}{{"", true}, {"?discovery=false", false}} {
		c, err := dlock.Open(ctx(t), "nats://"+srv.Addrs[0]+tc.query)
		if err != nil {
			t.Fatal(err)
		}
		got := c.Driver().(*Driver).Conn().DiscoveredServers()
		c.Close()
		if (len(got) > 0) != tc.want {
			t.Errorf("%q: discovered servers %q; want some: %v", tc.query, got, tc.want)
		}
	}
	dlocktest.RejectURL(t, "nats://"+srv.Addrs[0]+"?discovery=maybe", "url", "maybe")
}
