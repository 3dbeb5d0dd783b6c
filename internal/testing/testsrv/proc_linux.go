//go:build linux

package testsrv

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr returns the process attributes for server processes: run as
// cred's user if set, and die with the test process (parent-death signal).
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
}

// processExited reports whether the (unreaped) child process has exited,
// without reaping it.
func processExited(p *os.Process) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, p.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if err != nil {
		return errors.Is(err, unix.ECHILD) // already reaped
	}
	return info.Signo != 0
}
