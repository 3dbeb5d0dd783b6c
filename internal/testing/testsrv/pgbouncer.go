package testsrv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// PgBouncer is the name of a PgBouncer pooler (StartPgBouncer).
const PgBouncer = "pgbouncer"

// pgbouncerDirs are searched for pgbouncer after PATH.
var pgbouncerDirs = []string{"/usr/sbin", "/usr/bin", "/usr/local/bin", "/opt/homebrew/bin"}

// StartPgBouncer starts PgBouncer on a free port on 127.0.0.1 in front of
// the PostgreSQL server pg, pooling in mode (session, transaction or
// statement), with no authentication of its own (it connects as postgres),
// and waits until it accepts connections. Its configuration and log are in
// a new temporary directory. It runs as the postgres system user when the
// test process runs as root (PgBouncer refuses root). Stop kills it.
//
// Server.Addr is "127.0.0.1:port", Addrs holds Addr alone, and URL and DSN
// are those of pg's default database through the pooler. The error wraps
// ErrMissing if pgbouncer cannot be found.
func StartPgBouncer(ctx context.Context, pg *Server, mode string) (_ *Server, err error) {
	bin := lookPath([]string{"pgbouncer"}, pgbouncerDirs...)
	if bin == "" {
		return nil, fmt.Errorf("%w: pgbouncer (pgbouncer not found in PATH or %s)", ErrMissing, strings.Join(pgbouncerDirs, ", "))
	}
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	s, err := newServer(PgBouncer, cred, syscall.SIGKILL)
	if err != nil {
		return nil, err
	}
	defer s.abandonOnError(&err)
	_, pgPort, err := net.SplitHostPort(pg.Addr)
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(s.Dir, "pgbouncer.ini")
	start := func(port int, log *os.File) (*exec.Cmd, error) {
		ini := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%s user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = %s
ignore_startup_parameters = extra_float_digits
`, pgPort, port, mode)
		if err := os.WriteFile(cfg, []byte(ini), 0o644); err != nil {
			return nil, err
		}
		return startProcess(bin, []string{cfg}, s.Dir, cred, log)
	}
	ready := func(ctx context.Context, port int) error {
		c, err := new(net.Dialer).DialContext(ctx, "tcp", loopbackAddr(port))
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := s.launch(ctx, start, ready); err != nil {
		return nil, err
	}
	s.Addr = loopbackAddr(s.port)
	s.Addrs = []string{s.Addr}
	s.URL = pgURLParams(s.port, "dlock", "sslmode=disable")
	s.DSN = s.URL
	return s, nil
}
