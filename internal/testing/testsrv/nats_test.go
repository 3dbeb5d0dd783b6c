package testsrv

import (
	"context"
	"strings"
	"testing"
	"time"
)

// checkNATS checks a running nats-server: its address and URL, and that it
// greets a client with JetStream enabled.
func checkNATS(t *testing.T, s *Server) {
	t.Helper()
	if len(s.Addrs) != 1 || s.Addr != s.Addrs[0] || s.URL != "nats://"+s.Addr {
		t.Errorf("Addr = %q, Addrs = %q, URL = %q: want one address and nats://ADDR", s.Addr, s.Addrs, s.URL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := natsReady(ctx, s.port, true); err != nil {
		t.Error(err)
	}
}

// TestNATSWithoutJetStream checks that StartNATSWith without -js starts a
// server whose INFO does not report JetStream.
func TestNATSWithoutJetStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := StartNATSWith(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if err := natsReady(ctx, s.port, false); err != nil {
		t.Fatal(err)
	}
	if err := natsReady(ctx, s.port, true); err == nil {
		t.Error("a server without -js reports JetStream")
	}
}

// checkNATSCluster checks a running JetStream cluster: three members, each
// its own server with JetStream, all named in the URL.
func checkNATSCluster(t *testing.T, s *Server) {
	t.Helper()
	ms := s.Members()
	if len(ms) != 3 || len(s.Addrs) != 3 || s.Addr != s.Addrs[0] {
		t.Fatalf("Addr = %q, Addrs = %q, %d members; want 3 members, Addr first", s.Addr, s.Addrs, len(ms))
	}
	if want := "nats://" + strings.Join(s.Addrs, ","); s.URL != want {
		t.Errorf("URL = %q, want %q", s.URL, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, m := range ms {
		if m.Addr != s.Addrs[i] {
			t.Errorf("member %d at %q, Addrs %q", i, m.Addr, s.Addrs)
		}
		if err := natsReady(ctx, m.port, true); err != nil {
			t.Errorf("member %d: %v", i, err)
		}
	}
}
