package testsrv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Fault injection. A test makes a server (or one member of a multi-process
// server, see Members) crash, hang or come back, and checks what its
// clients do meanwhile:
//
//	m := srv.Members()[0]
//	m.Pause()         // SIGSTOP: the port accepts connections, nothing answers
//	defer m.Resume()  // SIGCONT
//	m.Kill()          // SIGKILL, reaped: connections are refused
//	m.Restart(ctx)    // the same command on the same port and data directory
//
// Stop resumes a paused server before stopping it, and stops a killed one
// without error.

// Members returns the processes of a multi-process server (the nodes of a
// Redis Cluster, the servers of redis-quorum, the master, replica and
// sentinels of redis-sentinel, the members of etcd-cluster, the servers of
// zookeeper-ensemble), in the order of Addrs; for a single-process server
// it returns s alone.
func (s *Server) Members() []*Server {
	if len(s.members) == 0 {
		return []*Server{s}
	}
	return append([]*Server(nil), s.members...)
}

// Pid returns the process ID of a single-process server (or member), or 0
// if it is not running.
func (s *Server) Pid() int {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// running reports whether the process runs: started, not killed, not
// paused.
func (s *Server) running() bool {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	return s.cmd != nil && !s.paused
}

// Pause stops every process of the server with SIGSTOP: its ports still
// accept connections (the kernel completes the handshake) but nothing is
// answered until Resume.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues the processes that Pause stopped (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	var errs []error
	for _, m := range s.Members() {
		m.faultMu.Lock()
		if m.cmd == nil || m.cmd.Process == nil {
			errs = append(errs, fmt.Errorf("testsrv: %s is not running", m.Name))
		} else if err := m.cmd.Process.Signal(sig); err != nil {
			errs = append(errs, fmt.Errorf("testsrv: %s: %v: %w", m.Name, sig, err))
		} else {
			m.paused = sig == syscall.SIGSTOP
		}
		m.faultMu.Unlock()
	}
	return errors.Join(errs...)
}

// Kill kills every process of the server with SIGKILL and waits for it to
// exit: its data directory stays, so Restart brings it back with whatever
// it had persisted (Redis runs without persistence: nothing).
func (s *Server) Kill() error {
	var errs []error
	for _, m := range s.Members() {
		m.faultMu.Lock()
		if m.cmd == nil || m.cmd.Process == nil {
			errs = append(errs, fmt.Errorf("testsrv: %s is not running", m.Name))
		} else {
			_ = m.cmd.Process.Kill()
			_ = m.cmd.Wait()
			m.cmd, m.paused = nil, false
		}
		m.faultMu.Unlock()
	}
	return errors.Join(errs...)
}

// Restart starts every killed process of the server again, with the same
// command line on the same port, and waits until it accepts requests as
// at start. Processes still running are left alone.
func (s *Server) Restart(ctx context.Context) error {
	var errs []error
	for _, m := range s.Members() {
		if err := m.restart(ctx); err != nil {
			errs = append(errs, fmt.Errorf("testsrv: restarting %s: %w", m.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (m *Server) restart(ctx context.Context) error {
	m.faultMu.Lock()
	defer m.faultMu.Unlock()
	if m.cmd != nil {
		return nil
	}
	if m.start == nil {
		return errors.New("not restartable")
	}
	log, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd, err := m.start(m.port, log)
	if err != nil {
		return err
	}
	m.cmd = cmd
	port := m.port
	if err := waitReady(ctx, cmd, func(ctx context.Context) error { return m.ready(ctx, port) }); err != nil {
		return fmt.Errorf("%w%s", err, m.logTail())
	}
	return nil
}
