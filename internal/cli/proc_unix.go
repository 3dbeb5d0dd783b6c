//go:build unix

package cli

import (
	"errors"
	"os"
	"syscall"
)

// forwardedSignals are the signals `dlock run` catches and forwards to the
// command's process group. While dlock waits for the lock, they end the wait.
var forwardedSignals = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
}

var (
	sigTerm os.Signal = syscall.SIGTERM
	sigKill os.Signal = syscall.SIGKILL
)

// signalGroup sends sig to the process group led by pid (the command runs in
// a group of its own). A group that no longer exists is not an error.
func signalGroup(pid int, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return errors.New("not a unix signal")
	}
	if err := syscall.Kill(-pid, s); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// exitStatus returns the status a shell would report for a finished process:
// its exit code, or 128+N if signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ExitSignalBase + int(ws.Signal())
	}
	return ps.ExitCode()
}

// signalStatus returns 128+N for signal N.
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return ExitSignalBase + int(s)
	}
	return ExitSignalBase + 2
}

// signalName names sig as kill(1) does: SIGTERM, SIGINT.
func signalName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		if name := unixSignalNames[s]; name != "" {
			return name
		}
	}
	return sig.String()
}

var unixSignalNames = map[syscall.Signal]string{
	syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM", syscall.SIGHUP: "SIGHUP", syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2", syscall.SIGKILL: "SIGKILL",
}
