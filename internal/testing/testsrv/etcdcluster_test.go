package testsrv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// newEtcdClient returns an etcd client of the endpoints, closed when the
// test ends.
func newEtcdClient(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// eventually polls f until it returns nil, failing the test with f's last
// error when ctx ends.
func eventually(ctx context.Context, t *testing.T, what string, f func(ctx context.Context) error) {
	t.Helper()
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := f(attempt)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v (%v)", what, err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// etcdHas checks that the member at addr has key = val in its own copy of
// the data (a serializable read, answered by that member alone).
func etcdHas(c *clientv3.Client, key, val string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		resp, err := c.Get(ctx, key, clientv3.WithSerializable())
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != val {
			return fmt.Errorf("%s = %v, want %q", key, resp.Kvs, val)
		}
		return nil
	}
}

// etcdPut returns a function that writes key = val through c.
func etcdPut(c *clientv3.Client, key, val string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.Put(ctx, key, val)
		return err
	}
}

// checkEtcdCluster checks a running etcd-cluster: its addresses and URL,
// and that every member serves reads of what was written through another.
func checkEtcdCluster(t *testing.T, s *Server) {
	t.Helper()
	ms := s.Members()
	if len(ms) != 3 || len(s.Addrs) != 3 || s.Addr != s.Addrs[0] {
		t.Fatalf("Addr = %q, Addrs = %q, %d members; want 3 members, Addr first", s.Addr, s.Addrs, len(ms))
	}
	seen := map[string]bool{}
	for i, m := range ms {
		if m.Addr != s.Addrs[i] || !strings.HasPrefix(m.Addr, "127.0.0.1:") || seen[m.Addr] {
			t.Errorf("member %d at %q, Addrs %q", i, m.Addr, s.Addrs)
		}
		seen[m.Addr] = true
	}
	if want := "etcd://" + strings.Join(s.Addrs, ","); s.URL != want {
		t.Errorf("URL = %q, want %q", s.URL, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key, val := "testsrv/"+t.Name(), time.Now().String()
	if err := etcdPut(newEtcdClient(t, s.Addrs[0]), key, val)(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[1:] {
		// A linearizable read from another member sees the write at once.
		resp, err := newEtcdClient(t, m.Addr).Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != val {
			t.Errorf("%s on %s = %v, want %q", key, m.Addr, resp.Kvs, val)
		}
	}
}

// TestEtcdCluster kills and pauses the leader of an etcd cluster and
// checks that the others elect a new one and keep serving, and that the
// old leader, restarted or resumed, catches up with what it missed.
func TestEtcdCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts database servers")
	}
	t.Parallel() // mostly waiting for elections
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t0 := time.Now()
	s, err := StartEtcdCluster(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("started in %v", time.Since(t0).Round(time.Millisecond))
	defer func() {
		t0 := time.Now()
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
		t.Logf("stopped in %v", time.Since(t0).Round(time.Millisecond))
	}()
	t1 := time.Now()
	checkEtcdCluster(t, s)
	t.Logf("checked in %v", time.Since(t1).Round(time.Millisecond))
	c := newEtcdClient(t, s.Addrs...)
	step := stepper(t)

	leader, err := s.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The client library agrees on who leads.
	st, err := c.Status(ctx, leader.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if st.Header.MemberId != st.Leader {
		t.Fatalf("Leader() = %s, which names %x its leader, not itself (%x)", leader.Addr, st.Leader, st.Header.MemberId)
	}

	// A killed or paused leader is replaced; the cluster keeps serving,
	// and the member catches up when back.
	checkTakeovers(ctx, t, s, leader, replicated{
		write: func(addr, key, value string) func(ctx context.Context) error {
			if addr == "" {
				return etcdPut(c, key, value)
			}
			return etcdPut(newEtcdClient(t, addr), key, value)
		},
		has: func(addr, key, value string) func(ctx context.Context) error {
			return etcdHas(newEtcdClient(t, addr), key, value)
		},
	}, "testsrv/missed", step)
}
