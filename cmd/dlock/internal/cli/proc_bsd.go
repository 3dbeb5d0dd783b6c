//go:build unix && !linux

package cli

import "syscall"

// sysProcAttr starts the command in a process group of its own, so that
// signals reach its children too.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// nextChildEvent reports nothing here: dlock does not learn that its command
// stopped, and waits for it as flock(1) does.
func nextChildEvent(pid int) childEvent { return childNone }
