package testsrv

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// natsDirs are searched for nats-server after PATH (scripts/install-servers.sh
// builds it into /usr/local/bin).
var natsDirs = []string{"/usr/local/bin", "/usr/bin", "/root/go/bin", "/opt/homebrew/bin"}

// StartNATS starts nats-server with JetStream enabled (file storage in a new
// temporary directory, which also holds its log) on a free port on
// 127.0.0.1, and waits until it greets a client with an INFO that reports
// JetStream. Stop sends SIGTERM (lame-duck-free shutdown).
//
// Server.Addr is "127.0.0.1:port", Addrs holds Addr alone, and URL is
// "nats://127.0.0.1:port". The error wraps ErrMissing if nats-server cannot
// be found.
func StartNATS(ctx context.Context) (*Server, error) { return StartNATSWith(ctx, "-js") }

// StartNATSWith starts nats-server as StartNATS does, with the command-line
// options given instead of "-js": with none, JetStream is disabled.
func StartNATSWith(ctx context.Context, extra ...string) (_ *Server, err error) {
	bin := lookPath([]string{"nats-server"}, natsDirs...)
	if bin == "" {
		return nil, fmt.Errorf("%w: nats-server (nats-server not found in PATH or %s)", ErrMissing, strings.Join(natsDirs, ", "))
	}
	s, err := newServer(NATS, nil, syscall.SIGTERM)
	if err != nil {
		return nil, err
	}
	defer s.abandonOnError(&err)
	dir := s.Dir
	js := false
	for _, a := range extra {
		js = js || a == "-js" || a == "--jetstream"
	}
	start := func(port int, log *os.File) (*exec.Cmd, error) {
		args := append([]string{
			"-a", "127.0.0.1",
			"-p", strconv.Itoa(port),
			"-sd", filepath.Join(dir, "js"),
			"-n", "dlock-test",
		}, extra...)
		return startProcess(bin, args, dir, nil, log)
	}
	ready := func(ctx context.Context, port int) error { return natsReady(ctx, port, js) }
	if err := s.launch(ctx, start, ready); err != nil {
		return nil, err
	}
	s.Addr = loopbackAddr(s.port)
	s.Addrs = []string{s.Addr}
	s.URL = "nats://" + s.Addr
	return s, nil
}

// natsReady is the readiness check of nats-server: the INFO line it sends
// every new connection, which must report JetStream when js is set.
func natsReady(ctx context.Context, port int, js bool) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", loopbackAddr(port))
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("INFO: %w", err)
	}
	payload, ok := strings.CutPrefix(strings.TrimSpace(line), "INFO ")
	var info struct {
		JetStream bool `json:"jetstream"`
	}
	if !ok || json.Unmarshal([]byte(payload), &info) != nil {
		return fmt.Errorf("INFO: reply %q", strings.TrimSpace(line))
	}
	if js && !info.JetStream {
		return fmt.Errorf("INFO: JetStream not ready yet")
	}
	return nil
}
