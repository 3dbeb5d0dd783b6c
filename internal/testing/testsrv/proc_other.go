//go:build unix && !linux

package testsrv

import (
	"errors"
	"os"
	"syscall"
)

// sysProcAttr returns the process attributes for server processes: run as
// cred's user if set. There is no parent-death signal outside Linux.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred}
}

// processExited reports whether the child process has exited. Zombies are
// not detected; startup then fails at the readiness deadline instead.
func processExited(p *os.Process) bool {
	return errors.Is(syscall.Kill(p.Pid, 0), syscall.ESRCH)
}
