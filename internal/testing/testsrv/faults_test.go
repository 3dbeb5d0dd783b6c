package testsrv

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestFaults pauses, resumes, kills and restarts one member of a
// redis-quorum and checks what a client sees each time.
func TestFaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := StartRedisQuorum(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	}()
	ms := s.Members()
	if len(ms) != 2 || ms[0].Addr != s.Addrs[0] || ms[1].Addr != s.Addrs[1] {
		t.Fatalf("Members() = %v, want the two servers in the order of Addrs %q", ms, s.Addrs)
	}
	m := ms[0]
	c := redis.NewClient(&redis.Options{Addr: m.Addr, MaxRetries: -1})
	defer c.Close()
	ping := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return c.Ping(ctx).Err()
	}
	if err := ping(5 * time.Second); err != nil {
		t.Fatalf("before any fault: %v", err)
	}
	pid := m.Pid()
	if pid == 0 {
		t.Fatal("Pid() = 0 for a running server")
	}

	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := ping(200 * time.Millisecond); err == nil {
		t.Error("a paused server answered")
	}
	if err := m.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := ping(5 * time.Second); err != nil {
		t.Errorf("after Resume: %v", err)
	}

	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	if m.Pid() != 0 {
		t.Error("Pid() of a killed server is not 0")
	}
	if err := ping(5 * time.Second); err == nil {
		t.Error("a killed server answered")
	}
	if err := m.Pause(); err == nil {
		t.Error("Pause of a killed server succeeded")
	}
	if err := m.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if got := m.Pid(); got == 0 || got == pid {
		t.Errorf("Pid() after Restart = %d, want a new process (was %d)", got, pid)
	}
	if err := ping(5 * time.Second); err != nil {
		t.Errorf("after Restart: %v", err)
	}
	// The other member never noticed; a paused server still stops.
	if err := ms[1].Pause(); err != nil {
		t.Fatal(err)
	}
}
