package testsrv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// zkQuiet drops go-zookeeper's log lines.
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// newZKClient returns a ZooKeeper client of the servers, closed when the
// test ends.
func newZKClient(t *testing.T, servers ...string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogger(zkQuiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// zkSet returns a function that sets the data of path (creating it if
// needed) through c.
func zkSet(c *zk.Conn, path, val string) func(ctx context.Context) error {
	return func(context.Context) error {
		_, err := c.Set(path, []byte(val), -1)
		if err == zk.ErrNoNode {
			_, err = c.Create(path, []byte(val), 0, zk.WorldACL(zk.PermAll))
		}
		return err
	}
}

// zkHas returns a function that checks that c's server has path = val in
// its own copy of the data (ZooKeeper serves reads from the server a client
// is connected to).
func zkHas(c *zk.Conn, path, val string) func(ctx context.Context) error {
	return func(context.Context) error {
		b, _, err := c.Get(path)
		if err != nil {
			return err
		}
		if string(b) != val {
			return fmt.Errorf("%s = %q, want %q", path, b, val)
		}
		return nil
	}
}

// checkZooKeeperEnsemble checks a running zookeeper-ensemble: its addresses
// and URL, that each server is leader or follower, and that every server
// serves what was written through another.
func checkZooKeeperEnsemble(t *testing.T, s *Server) {
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
	if want := "zk://" + strings.Join(s.Addrs, ","); s.URL != want {
		t.Errorf("URL = %q, want %q", s.URL, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := "/testsrv-" + DatabaseName(t.Name())
	val := time.Now().String()
	eventually(ctx, t, "write", zkSet(newZKClient(t, s.Addrs[0]), path, val))
	for _, m := range ms[1:] {
		eventually(ctx, t, "read from "+m.Addr, zkHas(newZKClient(t, m.Addr), path, val))
	}
}

// TestZooKeeperEnsemble kills and pauses the leader of a ZooKeeper ensemble
// and checks that the others elect a new one and keep serving, and that the
// old leader, restarted or resumed, catches up with what it missed.
func TestZooKeeperEnsemble(t *testing.T) {
	if testing.Short() {
		t.Skip("starts database servers")
	}
	t.Parallel() // mostly waiting for elections
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t0 := time.Now()
	s, err := StartZooKeeperEnsemble(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("started in %v", time.Since(t0).Round(time.Millisecond))
	defer func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	}()
	checkZooKeeperEnsemble(t, s)
	c := newZKClient(t, s.Addrs...)
	step := stepper(t)

	leader, err := s.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if reply, err := zkCommand(ctx, leader.Addr, "mntr"); err != nil || !strings.Contains(reply, "zk_server_state\tleader") {
		t.Fatalf("mntr on Leader() %s = %q, %v; want zk_server_state leader", leader.Addr, reply, err)
	}

	// A killed or paused leader is replaced; the ensemble keeps serving,
	// and the server catches up when back.
	checkTakeovers(ctx, t, s, leader, replicated{
		write: func(addr, key, value string) func(ctx context.Context) error {
			if addr == "" {
				return zkSet(c, key, value)
			}
			return zkSet(newZKClient(t, addr), key, value)
		},
		has: func(addr, key, value string) func(ctx context.Context) error {
			return zkHas(newZKClient(t, addr), key, value)
		},
	}, "/testsrv-missed", step)
}
