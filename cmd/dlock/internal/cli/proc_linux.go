package cli

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr starts the command in a process group of its own, so that
// signals reach its children too, and kills it if dlock itself dies without
// a chance to clean up (SIGKILL, OOM killer): its lock is no longer renewed
// then, and the command must not outlive it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// The codes of waitid's siginfo for a stopped and a continued child, from
// <signal.h> (x/sys/unix does not name them).
const (
	cldStopped   = 5
	cldContinued = 6
)

// nextChildEvent returns the next stop or continuation of the process pid
// not reported yet, without waiting and without reaping it (os/exec does).
func nextChildEvent(pid int) childEvent {
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WCONTINUED|unix.WNOHANG, nil); err != nil || info.Signo == 0 {
		return childNone
	}
	switch info.Code {
	case cldStopped:
		return childStopped
	case cldContinued:
		return childContinued
	}
	return childNone
}
