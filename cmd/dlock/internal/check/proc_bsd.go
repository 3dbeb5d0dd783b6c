//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package check

import (
	"syscall"

	"golang.org/x/sys/unix"
)

const ioctlGetTermios = unix.TIOCGETA

// deathSignal does nothing: a worker notices its parent's death when its
// standard input ends.
func deathSignal(*syscall.SysProcAttr) {}
