package testsrv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Settings of the ensemble started by StartZooKeeperEnsemble: a follower
// that hears nothing from its leader for zkEnsembleSyncLimit ticks (1 s)
// looks for a new one, and a server that cannot reach a peer gives up
// connecting after zkEnsembleCnxTimeout.
const (
	zkEnsembleTickTime   = 200 * time.Millisecond
	zkEnsembleInitLimit  = 20
	zkEnsembleSyncLimit  = 5
	zkEnsembleCnxTimeout = time.Second
)

// StartZooKeeperEnsemble starts a ZooKeeper ensemble of n servers (ids 1 to
// n, QuorumPeerMain run directly with java) on free ports on 127.0.0.1 — a
// client, a quorum and an election port each — and waits until every
// server answers "ruok" and reports itself leader or follower ("srvr").
// The servers are set up as StartZooKeeper's (no fsync, the four-letter
// words ruok, srvr and mntr, session timeouts between
// ZooKeeperMinSessionTimeout and ZooKeeperMaxSessionTimeout) except for
// quicker elections: tickTime 200 ms, syncLimit 5 ticks, initLimit 20. Each
// keeps its data in its own subdirectory, so Restart brings a killed
// server back with its data and it rejoins the ensemble. Stop kills the
// servers (SIGKILL). Run starts it with n = 3.
//
// The Server's Name is "zookeeper-ensemble"; Addrs lists the client
// addresses in server order (Members returns the servers in that order),
// Addr is the first, and URL is "zk://a,b,c". Leader returns the current
// leader. The error wraps ErrMissing if java or Debian's zookeeper.jar
// cannot be found.
func StartZooKeeperEnsemble(ctx context.Context, n int) (*Server, error) {
	if n < 1 {
		return nil, fmt.Errorf("testsrv: StartZooKeeperEnsemble: n = %d, want at least 1", n)
	}
	java, classpath, err := findZooKeeper()
	if err != nil {
		return nil, err
	}
	for range startAttempts {
		var s *Server
		s, err = startZooKeeperEnsemble(ctx, java, classpath, n)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, fmt.Errorf("testsrv: starting %s: %w", ZooKeeperEnsemble, err)
}

// startZooKeeperEnsemble makes one attempt at starting the ensemble, on
// ports chosen in advance (every server must know every peer's ports).
func startZooKeeperEnsemble(ctx context.Context, java, classpath string, n int) (_ *Server, err error) {
	s, err := newGroup(ZooKeeperEnsemble)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	ports, err := freePorts(3 * n)
	if err != nil {
		return nil, err
	}
	var peers strings.Builder
	for i := range n {
		fmt.Fprintf(&peers, "server.%d=127.0.0.1:%d:%d\n", i+1, ports[n+i], ports[2*n+i])
	}
	if err := s.startMembersTogether(ctx, n, func(ctx context.Context, i int) (*Server, error) {
		return s.startZooKeeperMember(ctx, java, classpath, i+1, ports[i], peers.String())
	}); err != nil {
		return nil, err
	}
	s.URL = "zk://" + strings.Join(s.Addrs, ",")
	return s, nil
}

// startZooKeeperMember starts the server with the given id of an ensemble
// on the given client port; peers lists the server.N lines of every
// server.
func (s *Server) startZooKeeperMember(ctx context.Context, java, classpath string, id, clientPort int, peers string) (*Server, error) {
	name := "server" + strconv.Itoa(id)
	dir := filepath.Join(s.Dir, name)
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(id)+"\n"), 0o644); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "zoo.cfg")
	m := &Server{Name: s.Name + "/" + name, logPath: filepath.Join(dir, logFile), stopSig: syscall.SIGKILL, portFn: portOnce(clientPort)}
	start := func(port int, log *os.File) (*exec.Cmd, error) {
		config := zkConfig(zkEnsembleTickTime, data, port) +
			fmt.Sprintf("initLimit=%d\nsyncLimit=%d\n", zkEnsembleInitLimit, zkEnsembleSyncLimit) +
			peers
		if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
			return nil, err
		}
		args := zkJavaArgs(dir, classpath, "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg,
			"-Dzookeeper.cnxTimeout="+strconv.FormatInt(zkEnsembleCnxTimeout.Milliseconds(), 10))
		return startProcess(java, args, dir, nil, log)
	}
	if err := m.launch(ctx, start, zkMemberReady); err != nil {
		_ = m.Stop()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	m.Dir = dir
	m.Addr = loopbackAddr(m.port)
	m.Addrs = []string{m.Addr}
	return m, nil
}

// zkMemberReady is the readiness check of a server of an ensemble: "ruok"
// must be answered "imok", and "srvr" must report the server leader or
// follower (it serves requests).
func zkMemberReady(ctx context.Context, port int) error {
	return zkServing(ctx, port, "leader", "follower")
}
