package testsrv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
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
func StartMemcached(ctx context.Context) (_ *Server, err error) {
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
		return startProcess(bin, args, dir, nil, log)
	}
	ready := func(ctx context.Context, port int) error {
		c := memcache.New(loopbackAddr(port))
		c.Timeout = 2 * time.Second
		defer c.Close()
		return c.Ping()
	}
	if err := s.launch(ctx, start, ready); err != nil {
		return nil, err
	}
	s.Addr = loopbackAddr(s.port)
	s.Addrs = []string{s.Addr}
	s.URL = "memcached://" + s.Addr
	return s, nil
}
