//go:build unix && !linux

package cli

import "syscall"

// sysProcAttr starts the command in a process group of its own, so that
// signals reach its children too.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
