package redisdlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testing/testsrv"
	"github.com/dlockhq/dlock/redisdlock"
)

// TestRueidisArgs checks the options and URLs that a driver over rueidis
// refuses, each with an ArgError naming what is wrong.
func TestRueidisArgs(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		name   string
		client rueidis.Client
		opts   []redisdlock.Option
		want   string
	}{
		{"nil client", nil, nil, "client"},
		{"transaction", c, []redisdlock.Option{redisdlock.WithProtocol(redisdlock.Transaction)}, "mode"},
		{"legacy", c, []redisdlock.Option{redisdlock.WithProtocol(redisdlock.Legacy)}, "mode"},
		{"replica ack", c, []redisdlock.Option{redisdlock.WithReplicaAck(1, time.Second)}, "WithReplicaAck"},
		{"prefix", c, []redisdlock.Option{redisdlock.WithPrefix("a{b")}, "prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := redisdlock.NewRueidis(tc.client, tc.opts...)
			var ae *dlock.ArgError
			if !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.want) {
				if d != nil {
					d.Close()
				}
				t.Fatalf("NewRueidis = %v; want an ArgError naming %s", err, tc.want)
			}
		})
	}
	// The client stays open: the driver does not own it.
	if err := c.Do(context.Background(), c.B().Ping().Build()).Error(); err != nil {
		t.Errorf("PING after the refusals: %v", err)
	}

	// The options are refused before anything is dialled: a usage error
	// whether the server answers or not (port 1 is closed).
	for _, base := range []string{srv.URL, "redis://127.0.0.1:1", "redis+sentinel://127.0.0.1:1/mymaster", "redis+cluster://127.0.0.1:1"} {
		for _, tc := range []struct{ params, want []string }{
			{[]string{"client", "hiredis"}, []string{`client="hiredis"`, "rueidis"}},
			{[]string{"client", "rueidis", "mode", "tx"}, []string{"mode", "go-redis"}},
			{[]string{"client", "rueidis", "mode", "legacy"}, []string{"mode", "go-redis"}},
			{[]string{"client", "rueidis", "wait_replicas", "1"}, []string{"WithReplicaAck"}},
		} {
			raw := withParams(base, tc.params...)
			d, err := dlock.Open(context.Background(), raw)
			if err == nil {
				d.Close()
				t.Errorf("Open(%s) succeeded", raw)
				continue
			}
			var ae *dlock.ArgError
			if !errors.As(err, &ae) {
				t.Errorf("Open(%s) = %v; want an ArgError", raw, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open(%s) = %v; want it to name %s", raw, err, w)
				}
			}
		}
	}
}

// TestRueidisPubSubReconnect kills the pub/sub connection of a driver over
// rueidis: the driver must open a new one, subscribe again, signal the
// waiter (a release may have gone unheard) and deliver later releases.
func TestRueidisPubSubReconnect(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "ru-pubsub-" + time.Now().Format("150405.000000")
	d, sub, ch := rueidisWaiter(ctx, t, srv, "client_name", name)
	admin := newClient(srv.Addr)
	defer admin.Close()
	pubsubID := func() string {
		t.Helper()
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(list, "\n") {
			if strings.Contains(line, " name="+name+" ") && strings.Contains(line, " sub=1 ") {
				id, _, _ := strings.Cut(line, " ")
				return strings.TrimPrefix(id, "id=")
			}
		}
		return ""
	}
	if n, err := admin.PubSubNumSub(ctx, ch).Result(); err != nil || n[ch] != 1 {
		t.Fatalf("subscribers of %s: %v, %v; want 1", ch, n, err)
	}
	before := pubsubID()
	if before == "" {
		t.Fatal("no pub/sub connection subscribed to one channel")
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "ID", before).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.C():
	case <-ctx.Done():
		t.Fatal("no signal after the pub/sub connection was killed")
	}
	after := pubsubID()
	if after == "" || after == before {
		t.Fatalf("pub/sub connection after the kill: %q (before %q); want a new one", after, before)
	}

	// A release after the reconnection is signalled as before.
	releaseSignalled(ctx, t, d, sub)
	sub.Close()
	// The last subscription's Close unsubscribes.
	waitFor(t, 10*time.Second, "the channel to be unsubscribed", func() bool {
		n, err := admin.PubSubNumSub(ctx, ch).Result()
		return err == nil && n[ch] == 0
	})
}

// TestRueidisSilentConnectionReplaced stalls the server (CLIENT PAUSE) so
// that the pub/sub connection of a driver over rueidis neither fails nor
// answers: rueidis closes it once a PING stays unanswered for the URL's
// read_timeout, and the driver must open a new one, signal the waiter and
// deliver later releases.
func TestRueidisSilentConnectionReplaced(t *testing.T) {
	srv := testsrv.Get(t, testsrv.Redis)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, sub, _ := rueidisWaiter(ctx, t, srv, "read_timeout", "500ms")
	admin := newClient(srv.Addr)
	defer admin.Close()
	if err := admin.Do(ctx, "CLIENT", "PAUSE", 3000, "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	select {
	case <-sub.C():
	case <-ctx.Done():
		t.Fatal("no signal after the pub/sub connection went silent")
	}
	releaseSignalled(ctx, t, d, sub)
}

// rueidisWaiter opens a driver over rueidis on srv, with a prefix of the
// test's own and params, and subscribes the waiter "waiter" of key "k". It
// returns the driver, the subscription and the lock's channel; both are
// closed when the test ends.
func rueidisWaiter(ctx context.Context, t *testing.T, srv *testsrv.Server, params ...string) (*redisdlock.Driver, driver.Subscription, string) {
	t.Helper()
	prefix := testPrefix(t)
	d := openURL(t, withParams(srv.URL, append([]string{"prefix", prefix, "client", "rueidis"}, params...)...))
	t.Cleanup(func() { d.Close() })
	sub, err := d.Subscribe(ctx, driver.Request{Key: "k", Owner: "waiter", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	return d, sub, "{" + prefix + "k}:released"
}

// releaseSignalled checks that sub, the subscription of the waiter
// "waiter" to key "k", is signalled when a holder releases k after the
// waiter found it held.
func releaseSignalled(ctx context.Context, t *testing.T, d *redisdlock.Driver, sub driver.Subscription) {
	t.Helper()
	holder := driver.Request{Key: "k", Owner: "holder", TTL: time.Minute}
	if res, err := d.Acquire(ctx, holder); err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	if res, err := d.Acquire(ctx, driver.Request{Key: "k", Owner: "waiter", TTL: time.Minute}); err != nil || res.Acquired {
		t.Fatalf("the waiter's Acquire = %+v, %v; want held", res, err)
	}
	if err := d.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.C():
	case <-ctx.Done():
		t.Fatal("no signal for a release after the pub/sub connection was replaced")
	}
}
