package testsrv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Raft timing of the members of StartEtcdCluster: a member that hears
// nothing from the leader for etcdElectionTimeout starts an election.
const (
	etcdHeartbeatInterval = 100  // ms
	etcdElectionTimeout   = 1000 // ms
)

// errPortTaken reports that a port chosen in advance for a member of a
// multi-process server was taken before the member could bind it.
var errPortTaken = errors.New("port chosen in advance was taken")

// StartEtcdCluster starts an etcd cluster of n members (members "member0",
// "member1", ...) on free ports on 127.0.0.1 — a client port and a peer
// port each — with fast elections (heartbeat 100 ms, election timeout
// 1 s), and waits until GET /health reports {"health":"true"} on every
// member. Each member keeps its data in its own subdirectory, so Restart
// brings a killed member back with its data, and it rejoins the cluster
// (--initial-cluster-state existing). Stop kills the members (SIGKILL):
// their data goes with the directory. Run starts it with n = 3.
//
// The Server's Name is "etcd-cluster"; Addrs lists the members' client
// addresses in member order (Members returns them in that order), Addr is
// the first, and URL is "etcd://a,b,c". Leader returns the current leader.
// The error wraps ErrMissing if etcd cannot be found.
func StartEtcdCluster(ctx context.Context, n int) (*Server, error) {
	if n < 1 {
		return nil, fmt.Errorf("testsrv: StartEtcdCluster: n = %d, want at least 1", n)
	}
	bin := lookPath([]string{"etcd"}, etcdDirs...)
	if bin == "" {
		return nil, fmt.Errorf("%w: etcd (etcd not found in PATH or %s)", ErrMissing, strings.Join(etcdDirs, ", "))
	}
	noFsync := etcdSupports(ctx, bin, "--unsafe-no-fsync")
	var err error
	for range startAttempts {
		var s *Server
		s, err = startEtcdCluster(ctx, bin, n, noFsync)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, fmt.Errorf("testsrv: starting %s: %w", EtcdCluster, err)
}

// startEtcdCluster makes one attempt at starting the cluster, on ports
// chosen in advance (every member must know every peer URL).
func startEtcdCluster(ctx context.Context, bin string, n int, noFsync bool) (_ *Server, err error) {
	s, err := newGroup(EtcdCluster)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var peers []string
	for i := range n {
		peers = append(peers, "member"+strconv.Itoa(i)+"=http://"+loopbackAddr(ports[n+i]))
	}
	cluster := strings.Join(peers, ",")
	if err := s.startMembersTogether(ctx, n, func(ctx context.Context, i int) (*Server, error) {
		return s.startEtcdMember(ctx, bin, "member"+strconv.Itoa(i), ports[i], ports[n+i], cluster, noFsync)
	}); err != nil {
		return nil, err
	}
	s.URL = "etcd://" + strings.Join(s.Addrs, ",")
	return s, nil
}

// startEtcdMember starts one member of an etcd cluster on the given client
// and peer ports. The first start bootstraps the member; a later one
// (Restart) finds its data directory and rejoins.
func (s *Server) startEtcdMember(ctx context.Context, bin, name string, clientPort, peerPort int, cluster string, noFsync bool) (*Server, error) {
	dir := filepath.Join(s.Dir, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	// Stop kills the member: the data goes with the directory, and a
	// leader stopped gracefully while its followers stop too would wait
	// seconds for one to take over.
	m := &Server{Name: s.Name + "/" + name, logPath: filepath.Join(dir, logFile), stopSig: syscall.SIGKILL, portFn: portOnce(clientPort)}
	start := func(port int, log *os.File) (*exec.Cmd, error) {
		state := "new"
		if _, err := os.Stat(filepath.Join(data, "member")); err == nil {
			state = "existing"
		}
		client := "http://" + loopbackAddr(port)
		peer := "http://" + loopbackAddr(peerPort)
		args := []string{
			"--name", name,
			"--data-dir", data,
			"--listen-client-urls", client,
			"--advertise-client-urls", client,
			"--listen-peer-urls", peer,
			"--initial-advertise-peer-urls", peer,
			"--initial-cluster", cluster,
			"--initial-cluster-state", state,
			"--initial-cluster-token", filepath.Base(s.Dir),
			"--heartbeat-interval", strconv.Itoa(etcdHeartbeatInterval),
			"--election-timeout", strconv.Itoa(etcdElectionTimeout),
			"--logger", "zap",
			"--log-level", "error",
			"--log-outputs", "stderr", // the server log
		}
		if noFsync {
			args = append(args, "--unsafe-no-fsync")
		}
		return startProcess(bin, args, dir, nil, log)
	}
	if err := m.launch(ctx, start, etcdHealthy); err != nil {
		_ = m.Stop()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	m.Dir = dir
	m.Addr = loopbackAddr(m.port)
	m.Addrs = []string{m.Addr}
	return m, nil
}

// startMembersTogether is startMembers for members that only become ready
// together (a quorum must be up): the first failure cancels the others'
// wait.
func (s *Server) startMembersTogether(ctx context.Context, n int, start func(ctx context.Context, i int) (*Server, error)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var first error
	err := s.startMembers(ctx, n, func(ctx context.Context, i int) (*Server, error) {
		m, err := start(ctx, i)
		if err != nil {
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
			cancel()
		}
		return m, err
	})
	if err != nil {
		return first // the others failed because of it
	}
	return nil
}

// portOnce returns a port picker (Server.portFn) that hands out port once
// and fails with errPortTaken when asked again, that is, when the port
// turned out to be taken.
func portOnce(port int) func() (int, error) {
	used := false
	return func() (int, error) {
		if used {
			return 0, fmt.Errorf("%w: %d", errPortTaken, port)
		}
		used = true
		return port, nil
	}
}

// freePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testsrv: finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
