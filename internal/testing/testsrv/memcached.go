package testsrv

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// memcachedDirs are searched for memcached after PATH.
var memcachedDirs = []string{"/usr/bin", "/usr/local/bin", "/usr/sbin", "/opt/homebrew/bin"}

// StartMemcached starts memcached on a free TCP port on 127.0.0.1 (no UDP,
// 64 MB of memory, two threads) in a new temporary directory, which holds
// its log, and waits until it answers a "version" request. When the test
// process runs as root, memcached runs as root too (-u root). Stop kills
// it (SIGKILL) rather than waiting for a clean shutdown.
//
// Server.Addr is "127.0.0.1:port", Addrs holds Addr alone, and URL is
// "memcached://127.0.0.1:port". The error wraps ErrMissing if memcached
// cannot be found.
func StartMemcached(ctx context.Context) (*Server, error) { return StartMemcachedWith(ctx) }

// StartMemcachedWith starts memcached as StartMemcached does, with the
// extra command-line options given (such as -M, no evictions).
func StartMemcachedWith(ctx context.Context, extra ...string) (_ *Server, err error) {
	bin := lookPath([]string{"memcached"}, memcachedDirs...)
	if bin == "" {
		return nil, fmt.Errorf("%w: memcached (memcached not found in PATH or %s)", ErrMissing, strings.Join(memcachedDirs, ", "))
	}
	// Stop kills memcached: it holds nothing worth a clean shutdown, and a
	// clean one (SIGTERM) waits up to a second for its clock tick.
	s, err := newServer(Memcached, nil, syscall.SIGKILL)
	if err != nil {
		return nil, err
	}
	defer s.abandonOnError(&err)
	dir := s.Dir
	start := func(port int, log *os.File) (*exec.Cmd, error) {
		args := []string{
			"-l", "127.0.0.1",
			"-p", strconv.Itoa(port),
			"-U", "0", // no UDP
			"-m", "64",
			"-t", "2",
			"-c", "1024",
		}
		if os.Geteuid() == 0 {
			args = append(args, "-u", "root") // memcached refuses to run as root otherwise
		}
		args = append(args, extra...)
		return startProcess(bin, args, dir, nil, log)
	}
	if err := s.launch(ctx, start, pingMemcached); err != nil {
		return nil, err
	}
	s.Addr = loopbackAddr(s.port)
	s.Addrs = []string{s.Addr}
	s.URL = "memcached://" + s.Addr
	return s, nil
}

// pingMemcached is the readiness check of memcached: a "version" request
// over a new connection, in the text protocol.
func pingMemcached(ctx context.Context, port int) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", loopbackAddr(port))
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	if _, err := conn.Write([]byte("version\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("version: %w", err)
	}
	if !strings.HasPrefix(line, "VERSION ") {
		return fmt.Errorf("version: reply %q", strings.TrimSpace(line))
	}
	return nil
}
