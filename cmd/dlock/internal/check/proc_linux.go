package check

import (
	"syscall"

	"golang.org/x/sys/unix"
)

const ioctlGetTermios = unix.TCGETS

// deathSignal has the kernel kill a worker whose parent died.
func deathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
