// Package testsrv starts real, throwaway database servers (PostgreSQL,
// MariaDB, Redis — standalone, Cluster, Sentinel and a set of independent
// servers for quorum locks —, memcached, etcd — a single member or a
// cluster —, ZooKeeper — standalone or an ensemble — and nats-server with
// JetStream, a single server or a cluster) for tests.
//
// Every server runs from its own temporary directory (data, unix socket, pid
// file and log), listens on a free port on 127.0.0.1 only, and is tuned for
// speed rather than durability (Redis runs without persistence). Servers
// are tied to the test process: they get SIGKILL from the kernel if the
// process dies (Linux parent-death signal), and Stop shuts them down and
// removes their directory.
//
// The usual way to use the package is from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testsrv.Run(m, "postgres", "mariadb")) }
//
//	func TestSomething(t *testing.T) {
//		srv := testsrv.Get(t, "postgres")
//		url, dsn, err := srv.NewDatabase(ctx, t.Name())
//		...
//	}
//
// Redis, memcached, etcd and ZooKeeper servers have no databases to create:
// tests use Server.URL (or Addr/Addrs) directly and keep apart by key names.
//
// The package imports no client library of the stores: it checks that a
// server is ready and sets it up with the server's own command-line client
// (psql, mariadb) or a few lines of its protocol (RESP, memcached's text
// protocol, ZooKeeper's four-letter words, etcd's JSON gateway). Every
// backend's tests import it, and `go mod tidy` in a program that imports
// one backend loads that backend's tests: the program must not download the
// other stores' clients through them.
package testsrv

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ErrMissing reports that a server binary is not installed. Errors returned
// by the Start functions wrap it when the server cannot be found;
// Run uses it to tell the user to run scripts/install-servers.sh.
var ErrMissing = errors.New("testsrv: database server binary not found")

// Server names accepted by Run and Get.
const (
	// Postgres is the name of the PostgreSQL server.
	Postgres = "postgres"
	// MariaDB is the name of the MariaDB server.
	MariaDB = "mariadb"
	// Redis is the name of a standalone Redis server (StartRedis).
	Redis = "redis"
	// RedisCluster is the name of a Redis Cluster of three masters with
	// a replica each (StartRedisCluster).
	RedisCluster = "redis-cluster"
	// RedisSentinel is the name of a Redis master with a replica and
	// three sentinels (StartRedisSentinel).
	RedisSentinel = "redis-sentinel"
	// RedisQuorum is the name of five independent standalone Redis servers,
	// for Redlock-style quorum locks (StartRedisQuorum with n = 5).
	RedisQuorum = "redis-quorum"
	// Memcached is the name of a memcached server (StartMemcached).
	Memcached = "memcached"
	// Etcd is the name of a single-member etcd cluster (StartEtcd).
	Etcd = "etcd"
	// EtcdCluster is the name of a three-member etcd cluster
	// (StartEtcdCluster with n = 3).
	EtcdCluster = "etcd-cluster"
	// ZooKeeper is the name of a standalone ZooKeeper server
	// (StartZooKeeper).
	ZooKeeper = "zookeeper"
	// ZooKeeperEnsemble is the name of a ZooKeeper ensemble of three
	// servers (StartZooKeeperEnsemble with n = 3).
	ZooKeeperEnsemble = "zookeeper-ensemble"
	// NATS is the name of a nats-server with JetStream (StartNATS).
	NATS = "nats"
	// NATSCluster is the name of a JetStream cluster of three nats-server
	// processes (StartNATSCluster with n = 3).
	NATSCluster = "nats-cluster"
)

// DefaultDatabase is the name of the database created on every server.
const DefaultDatabase = "dlock"

const (
	readyTimeout  = 60 * time.Second // how long a server gets to accept connections
	stopTimeout   = 30 * time.Second // how long a server gets to shut down before SIGKILL
	startAttempts = 5                // port/bind retries
	dirPrefix     = "dlock-testsrv-"
	ownerFile     = "owner.pid"
	logFile       = "server.log"
)

// Server is a database server started for tests. For the multi-process
// kinds (redis-cluster, redis-sentinel, redis-quorum, etcd-cluster, nats-cluster,
// zookeeper-ensemble) it stands for all the processes together.
type Server struct {
	// Name is the server's name as given to Run and Get: "postgres",
	// "mariadb", "redis", "redis-cluster", "redis-sentinel", "redis-quorum",
	// "memcached", "etcd", "etcd-cluster", "zookeeper",
	// "zookeeper-ensemble", "nats" or "nats-cluster".
	Name string
	// Addr is the TCP address the server listens on, 127.0.0.1:port; for
	// the multi-process kinds, the first of Addrs.
	Addr string
	// Addrs lists the addresses of all the server's processes: the nodes
	// of a Redis Cluster, masters first, then their replicas; master,
	// replica and the three sentinels of redis-sentinel;
	// the independent servers of redis-quorum; the members of
	// etcd-cluster and the servers of zookeeper-ensemble (client
	// addresses). For the single-process kinds it holds Addr alone.
	Addrs []string
	// URL is a dlock-style URL of the server: for PostgreSQL and MariaDB,
	// of the default database "dlock":
	// postgres://postgres@127.0.0.1:port/dlock?sslmode=disable or
	// mysql://root@127.0.0.1:port/dlock. The Start functions document the
	// others (redis://, redis+cluster://, redis+sentinel://, redlock://,
	// memcached://, etcd://, zk://, nats://).
	URL string
	// DSN is the driver-native DSN of the default database: for postgres the
	// same URL (pgx accepts it); for mariadb the go-sql-driver/mysql DSN
	// "root@tcp(127.0.0.1:port)/dlock?parseTime=true". Empty for the
	// others.
	DSN string
	// Dir is the temporary directory holding the server's data, socket and
	// log (for the multi-process kinds, one subdirectory per process). Stop
	// removes it.
	Dir string

	port     int
	portFn   func() (int, error) // picks the port to try; freePort if nil
	members  []*Server           // the processes of a multi-process server
	logPath  string
	cmd      *exec.Cmd
	stopSig  syscall.Signal
	stopOnce sync.Once
	stopErr  error
	// start and ready relaunch the process on its port (Restart).
	start   func(port int, log *os.File) (*exec.Cmd, error)
	ready   func(ctx context.Context, port int) error
	faultMu sync.Mutex // guards cmd against Kill, Restart and Stop
	// launched is set once the process has been ready: a start function
	// called again after that is a Restart, which keeps the data.
	launched bool
	paused   bool // stopped by Pause, not yet resumed
	// monitorPort is the HTTP monitoring port of a nats-server member.
	monitorPort int
	newDB       func(ctx context.Context, db string) error
	dbURL       func(db string) (url, dsn string)
}

// Stop shuts the server down (SIGTERM for MariaDB, Redis and etcd, SIGINT —
// PostgreSQL's "fast" shutdown, which does not wait for clients — for
// PostgreSQL, SIGKILL for memcached, ZooKeeper and the members of
// etcd-cluster, which have nothing to save), waits for
// it to exit (killing it after 30 s), and removes its temporary directory.
// A multi-process server stops all its processes in parallel. It is
// idempotent: later calls return the result of the first.
// It returns an error if the server had died before Stop was called or did
// not stop in time.
func (s *Server) Stop() error {
	if s == nil {
		return nil
	}
	s.stopOnce.Do(func() { s.stopErr = s.stop() })
	return s.stopErr
}

func (s *Server) stop() error {
	errs := make([]error, len(s.members))
	var wg sync.WaitGroup
	for i, m := range s.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.Stop()
		}()
	}
	wg.Wait()
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot stop
		if err := stopProcess(s.cmd, s.stopSig, stopTimeout); err != nil {
			errs = append(errs, fmt.Errorf("testsrv: stopping %s: %w%s", s.Name, err, s.logTail()))
		}
	}
	if s.Dir != "" {
		if err := os.RemoveAll(s.Dir); err != nil {
			errs = append(errs, fmt.Errorf("testsrv: removing %s: %w", s.Dir, err))
		}
	}
	return errors.Join(errs...)
}

// NewDatabase creates a fresh, empty database on the server and returns its
// dlock-style URL and driver-native DSN (for isolation between tests). If a
// database with that name already exists it is dropped first.
//
// Any name is accepted, t.Name() included: a name that is not already a
// plain lower-case identifier ([a-z_][a-z0-9_]*, at most 63 bytes) is
// lower-cased, every other character replaced by '_', and a short hash of
// the original appended, so distinct names map to distinct databases. The
// returned URL and DSN carry the actual name.
//
// Redis, memcached, etcd and ZooKeeper servers have no databases:
// NewDatabase returns an error for them.
func (s *Server) NewDatabase(ctx context.Context, name string) (url, dsn string, err error) {
	if s.newDB == nil {
		return "", "", fmt.Errorf("testsrv: %s has no databases to create", s.Name)
	}
	db := DatabaseName(name)
	if err := s.newDB(ctx, db); err != nil {
		return "", "", fmt.Errorf("testsrv: %s: creating database %q: %w", s.Name, db, err)
	}
	url, dsn = s.dbURL(db)
	return url, dsn, nil
}

var plainIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// DatabaseName returns the database name NewDatabase uses for name.
func DatabaseName(name string) string {
	if plainIdent.MatchString(name) {
		return name
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	suffix := fmt.Sprintf("_%08x", h.Sum32())
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	base := b.String()
	if base == "" || (base[0] >= '0' && base[0] <= '9') {
		base = "db_" + base
	}
	if max := 63 - len(suffix); len(base) > max {
		base = base[:max]
	}
	return base + suffix
}

func (s *Server) logTail() string {
	if s.logPath == "" {
		return ""
	}
	return logTailOf(s.logPath, 0)
}

// logTailOf returns the last lines of the log file, starting at byte offset
// from, formatted for appending to an error message.
func logTailOf(path string, from int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if from > 0 && from <= int64(len(b)) {
		b = b[from:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	const n = 30
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	text := strings.Join(lines, "\n")
	if strings.TrimSpace(text) == "" {
		return ""
	}
	return fmt.Sprintf("\n--- %s (last %d lines) ---\n%s\n---", path, len(lines), text)
}

// stopProcess signals the process, waits up to timeout for it to exit, then
// kills it. The process is always reaped before stopProcess returns.
func stopProcess(cmd *exec.Cmd, sig syscall.Signal, timeout time.Duration) error {
	var died error
	if processExited(cmd.Process) {
		died = errors.New("server had exited before Stop")
	} else if err := cmd.Process.Signal(sig); err != nil {
		died = fmt.Errorf("server had exited before Stop (%v)", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		if died != nil {
			return fmt.Errorf("%v: %v", died, err)
		}
		return nil // a clean shutdown; the exit status does not matter
	case <-timer.C:
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("server did not stop within %v after %v; killed", timeout, sig)
	}
}

// startProcess starts a server process with its output appended to the
// server log. The process gets SIGKILL when the test process dies.
func startProcess(path string, args []string, dir string, cred *syscall.Credential, log *os.File) (*exec.Cmd, error) {
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = sysProcAttr(cred)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd, nil
}

// runTool runs a short-lived setup program (initdb, mariadb-install-db),
// logging its output to the server log.
func runTool(ctx context.Context, path string, args []string, dir string, cred *syscall.Credential, logPath string) error {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	start, _ := log.Seek(0, io.SeekEnd)
	fmt.Fprintf(log, "$ %s %s\n", path, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = sysProcAttr(cred)
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w%s", filepath.Base(path), err, logTailOf(logPath, start))
	}
	return nil
}

// runClient runs a server's own command-line client (psql, mariadb) with
// input on its standard input and returns its standard output; its error
// carries the client's standard error.
func runClient(ctx context.Context, path string, args []string, input string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = cleanEnv()
	cmd.Stdin = strings.NewReader(input)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w: %s", filepath.Base(path), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// cleanEnv returns the environment for server processes, without the
// client variables (PGHOST, MYSQL_HOST, ...) that could redirect them, and
// etcd's ETCD_* configuration variables, which etcd reads as flags.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "MYSQL") || strings.HasPrefix(k, "MARIADB") || strings.HasPrefix(k, "ETCD") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// launch starts a server on a free port, retrying with another port when the
// port turns out to be taken. start starts the process for a port; ready
// polls it (connecting for real) and returns nil once it accepts
// connections. On success s.cmd and s.port are set.
func (s *Server) launch(ctx context.Context, start func(port int, log *os.File) (*exec.Cmd, error), ready func(ctx context.Context, port int) error) error {
	log, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close() // the child has its own copy of the descriptor
	var lastErr error
	pick := s.portFn
	if pick == nil {
		pick = freePort
	}
	for attempt := 0; attempt < startAttempts; attempt++ {
		port, err := pick()
		if err != nil {
			return err
		}
		offset, _ := log.Seek(0, io.SeekEnd)
		cmd, err := start(port, log)
		if err != nil {
			return err
		}
		s.cmd, s.port, s.start, s.ready = cmd, port, start, ready
		err = waitReady(ctx, cmd, func(ctx context.Context) error { return ready(ctx, port) })
		if err == nil {
			s.launched = true
			return nil
		}
		if !processExited(cmd.Process) {
			// Still running but not answering: give up, Stop will kill it.
			return fmt.Errorf("%w%s", err, logTailOf(s.logPath, offset))
		}
		waitErr := cmd.Wait()
		s.cmd = nil
		lastErr = fmt.Errorf("%w (%v)%s", err, waitErr, logTailOf(s.logPath, offset))
		if !portInUse(s.logPath, offset) {
			return lastErr
		}
	}
	return lastErr
}

// portInUse reports whether the server log, from offset on, says the port
// was taken.
func portInUse(logPath string, offset int64) bool {
	b, err := os.ReadFile(logPath)
	if err != nil || offset > int64(len(b)) {
		return false
	}
	b = bytes.ToLower(b[offset:])
	return bytes.Contains(b, []byte("address already in use")) || bytes.Contains(b, []byte("could not bind"))
}

// waitReady polls ready until it succeeds, the process exits, or the
// deadline (readyTimeout, or ctx's if earlier) passes.
func waitReady(ctx context.Context, cmd *exec.Cmd, ready func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var err error
	for {
		attemptCtx, cancelAttempt := context.WithTimeout(ctx, 3*time.Second)
		err = ready(attemptCtx)
		cancelAttempt()
		if err == nil {
			return nil
		}
		if processExited(cmd.Process) {
			return fmt.Errorf("server exited during startup; last connection error: %v", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("server not ready: %w; last connection error: %v", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) { return freePortBelow(0) }

// lowestPort is the lowest port freePortBelow picks.
const lowestPort = 10000

// freePortBelow returns a port on 127.0.0.1 that was free a moment ago,
// together with port+offset if offset is not 0 (a Redis Cluster node's bus
// port). The ports are below the kernel's ephemeral range where it leaves
// room: a server restarted on its port (Restart) must not find it taken by
// the local end of some client's connection, which the kernel picks from
// that range. Otherwise it lets the kernel pick.
func freePortBelow(offset int) (int, error) {
	top := ephemeralLow() - 1 - offset
	var lastErr error
	for range 100 {
		port := 0
		if top > lowestPort+1000 {
			port = lowestPort + rand.IntN(top-lowestPort)
		}
		l, err := net.Listen("tcp", loopbackAddr(port))
		if err != nil {
			lastErr = err
			continue
		}
		port = l.Addr().(*net.TCPAddr).Port
		if offset == 0 {
			l.Close()
			return port, nil
		}
		if port+offset > 65535 {
			l.Close()
			continue
		}
		other, err := net.Listen("tcp", loopbackAddr(port+offset))
		l.Close()
		if err != nil {
			lastErr = err
			continue
		}
		other.Close()
		return port, nil
	}
	return 0, fmt.Errorf("testsrv: finding a free port: %v", lastErr)
}

// ephemeralLow returns the lowest port of the kernel's ephemeral range
// (Linux), or 0 if it is not known.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

// makeTempDir creates the server's temporary directory (owned by cred's
// user if cred is set) and records the owning process in it, so that a

// newServer makes the temporary directory of a server of kind name (owned by
// cred's user if cred is not nil) and the Server that owns it, whose Stop
// sends its process stopSig.
func newServer(name string, cred *syscall.Credential, stopSig syscall.Signal) (*Server, error) {
	dir, err := makeTempDir(name, cred)
	if err != nil {
		return nil, err
	}
	return &Server{Name: name, Dir: dir, logPath: filepath.Join(dir, logFile), stopSig: stopSig}, nil
}

// abandonOnError, deferred by a Start function that returns its error in
// *errp, stops what was started and names the server in the error if the
// start failed.
func (s *Server) abandonOnError(errp *error) {
	if *errp != nil {
		_ = s.Stop()
		*errp = fmt.Errorf("testsrv: starting %s: %w", s.Name, *errp)
	}
}

// later run can remove directories left behind by killed test processes.
func makeTempDir(name string, cred *syscall.Credential) (string, error) {
	base := tempBase(cred != nil)
	removeStaleDirs(base)
	dir, err := os.MkdirTemp(base, dirPrefix+name+"-")
	if err != nil {
		return "", fmt.Errorf("testsrv: creating temp dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("testsrv: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("testsrv: chown %s: %w", dir, err)
		}
	}
	return dir, nil
}

// tempBase returns the directory to create temp dirs in. Unix socket paths
// are limited to ~107 bytes, and a server running as another user must be
// able to reach its directory, so a long or private TMPDIR is replaced by
// /tmp.
func tempBase(otherUser bool) string {
	base := os.TempDir()
	if len(base) > 60 || (otherUser && !worldSearchable(base)) {
		return "/tmp"
	}
	return base
}

// worldSearchable reports whether every component of dir is searchable by
// other users.
func worldSearchable(dir string) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

// removeStaleDirs removes temp dirs of test processes that no longer exist.
func removeStaleDirs(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // not ours, or still being set up
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(dir)
		}
	}
}

// firstExisting returns the first of paths that is an executable file.
func firstExisting(paths ...string) string {
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// lookPath finds the first of names in PATH or, failing that, in dirs.
func lookPath(names []string, dirs ...string) string {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	for _, d := range dirs {
		for _, n := range names {
			if p := firstExisting(filepath.Join(d, n)); p != "" {
				return p
			}
		}
	}
	return ""
}

// ---- TestMain support ----

var (
	regMu      sync.Mutex
	registry   = map[string]*Server{}
	regSkipped bool // Run did not start servers because of -short
)

// starters maps server names to their start functions.
var starters = map[string]func(context.Context) (*Server, error){
	Postgres:      StartPostgres,
	MariaDB:       StartMariaDB,
	Redis:         StartRedis,
	RedisCluster:  StartRedisCluster,
	RedisSentinel: StartRedisSentinel,
	RedisQuorum:   func(ctx context.Context) (*Server, error) { return StartRedisQuorum(ctx, 5) },
	Memcached:     StartMemcached,
	Etcd:          StartEtcd,
	EtcdCluster:   func(ctx context.Context) (*Server, error) { return StartEtcdCluster(ctx, 3) },
	ZooKeeper:     StartZooKeeper,
	NATS:          StartNATS,
	NATSCluster:   func(ctx context.Context) (*Server, error) { return StartNATSCluster(ctx, 3) },
	ZooKeeperEnsemble: func(ctx context.Context) (*Server, error) {
		return StartZooKeeperEnsemble(ctx, 3)
	},
}

// Run is for TestMain: it starts the named servers (Postgres, MariaDB,
// Redis, RedisCluster, RedisSentinel, RedisQuorum, Memcached, Etcd,
// EtcdCluster, ZooKeeper, ZooKeeperEnsemble, NATS, NATSCluster) in parallel, runs m.Run(),
// stops them, and returns the exit code:
//
//	func TestMain(m *testing.M) { os.Exit(testsrv.Run(m, "postgres", "mariadb")) }
//
// With -short the servers are not started and tests calling Get are
// skipped. Otherwise a server that cannot be started — a missing binary
// included — makes Run print the reason and return 1 without running the
// tests: missing servers are never skipped silently, neither in CI (the CI
// environment variable is non-empty) nor locally. The message says to run
// scripts/install-servers.sh.
func Run(m *testing.M, names ...string) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	if testing.Short() {
		regMu.Lock()
		regSkipped = true
		regMu.Unlock()
		if os.Getenv("CI") != "" {
			fmt.Fprintf(os.Stderr, "testsrv: -short: not starting %s; tests that need them are skipped\n", strings.Join(names, ", "))
		}
		return m.Run()
	}

	started, err := startAll(names)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		if errors.Is(err, ErrMissing) {
			fmt.Fprintln(os.Stderr, "testsrv: install the database servers with scripts/install-servers.sh (as root or with sudo)")
			if os.Getenv("CI") != "" {
				fmt.Fprintln(os.Stderr, "testsrv: CI is set: database tests are required and are not skipped")
			} else {
				fmt.Fprintln(os.Stderr, "testsrv: or run with -short to skip the tests that need database servers")
			}
		}
		return 1
	}

	code := m.Run()

	regMu.Lock()
	for _, s := range started {
		delete(registry, s.Name)
	}
	regMu.Unlock()
	for _, s := range started {
		if err := s.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "%v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// startAll starts the named servers in parallel and registers them. On
// failure it stops the ones that did start.
func startAll(names []string) ([]*Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*readyTimeout)
	defer cancel()
	servers := make([]*Server, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		start, ok := starters[name]
		if !ok {
			errs[i] = fmt.Errorf("testsrv: unknown server %q (known: %s)", name, strings.Join(knownNames(), ", "))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			servers[i], errs[i] = start(ctx)
		}()
	}
	wg.Wait()
	var started []*Server
	for _, s := range servers {
		if s != nil {
			started = append(started, s)
		}
	}
	if err := errors.Join(errs...); err != nil {
		for _, s := range started {
			_ = s.Stop()
		}
		return nil, err
	}
	regMu.Lock()
	defer regMu.Unlock()
	for _, s := range started {
		registry[s.Name] = s
	}
	return started, nil
}

// knownNames returns the names Run accepts, sorted.
func knownNames() []string {
	names := make([]string, 0, len(starters))
	for name := range starters {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Get returns the running server named name (one of the names Run accepts)
// started by Run. It calls tb.Skip when Run did not start servers because
// of -short, and tb.Fatal when Run was not asked to start that server.
func Get(tb testing.TB, name string) *Server {
	tb.Helper()
	regMu.Lock()
	s, skipped := registry[name], regSkipped
	regMu.Unlock()
	if s != nil {
		return s
	}
	if skipped {
		tb.Skipf("testsrv: %s not started (-short)", name)
	}
	tb.Fatalf("testsrv: %s is not running; start it from TestMain with os.Exit(testsrv.Run(m, %q))", name, name)
	return nil
}
