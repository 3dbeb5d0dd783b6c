package testsrv

import (
	"context"
	"testing"
	"time"
)

// stepper returns a function that logs what was done and how long it took
// since the previous call.
func stepper(t *testing.T) func(what string) {
	last := time.Now()
	return func(what string) {
		t.Helper()
		t.Logf("%s in %v", what, time.Since(last).Round(time.Millisecond))
		last = time.Now()
	}
}

// replicated writes and reads a key of a replicated deployment (etcd,
// ZooKeeper) through a client of the member at addr, or of every member
// if addr is empty.
type replicated struct {
	write func(addr, key, value string) func(ctx context.Context) error
	has   func(addr, key, value string) func(ctx context.Context) error
}

// checkTakeovers kills the leader of s and checks that another member
// takes over and serves writes, restarts it and checks that it catches up;
// then it pauses the new leader, checks the same, and resumes it.
func checkTakeovers(ctx context.Context, t *testing.T, s *Server, leader *Server, r replicated, key string, step func(string)) {
	t.Helper()
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	next, err := s.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	step("new leader after Kill")
	if next == leader {
		t.Fatalf("Leader() after killing the leader %s is still it", leader.Addr)
	}
	eventually(ctx, t, "write without the killed leader", r.write("", key, "while down"))
	step("write after Kill")
	// Restarted, the member rejoins and catches up from the others.
	if err := leader.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "restarted member catches up", r.has(leader.Addr, key, "while down"))
	step("Restart and catch-up")

	// A paused leader is replaced too, and catches up once resumed.
	if err := next.Pause(); err != nil {
		t.Fatal(err)
	}
	third, err := s.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	step("new leader after Pause")
	if third == next {
		t.Fatalf("Leader() after pausing the leader %s is still it", next.Addr)
	}
	eventually(ctx, t, "write without the paused leader", r.write(third.Addr, key, "while paused"))
	step("write after Pause")
	if err := next.Resume(); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "resumed member catches up", r.has(next.Addr, key, "while paused"))
	step("Resume and catch-up")
	if _, err := s.Leader(ctx); err != nil {
		t.Fatal(err)
	}
}
