package cli

import "syscall"

// sysProcAttr starts the command in a process group of its own, so that
// signals reach its children too, and kills it if dlock itself dies without
// a chance to clean up (SIGKILL, OOM killer): its lock is no longer renewed
// then, and the command must not outlive it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
