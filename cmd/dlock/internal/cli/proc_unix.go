//go:build unix

package cli

import (
	"errors"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
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

var sigCont os.Signal = syscall.SIGCONT

// childSignals are the signals that tell of a change in the command's state
// (stopped, continued): `dlock run` checks on it when one arrives.
var childSignals = []os.Signal{syscall.SIGCHLD}

// terminal is dlock's controlling terminal when dlock runs in its
// foreground (from an interactive shell): `dlock run` hands the foreground
// to the command's process group, so that the command can read from the
// terminal and gets ^C and ^Z as it would without dlock, and takes it back
// when the command exits or stops.
type terminal struct {
	fd   int
	pgrp int // dlock's process group
}

// foregroundTerminal returns stdin's terminal if it is dlock's controlling
// terminal and dlock's process group is in its foreground, else nil (not a
// terminal, or dlock runs in the background: the command gets no terminal
// either).
func foregroundTerminal(stdin any) *terminal {
	f, ok := stdin.(*os.File)
	if !ok {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var t *terminal
	rc.Control(func(fd uintptr) {
		fg, err := unix.IoctlGetInt(int(fd), unix.TIOCGPGRP) // ENOTTY unless our controlling terminal
		if err == nil && fg == unix.Getpgrp() {
			t = &terminal{fd: int(fd), pgrp: fg}
		}
	})
	return t
}

// attach makes the command started with attr take the terminal's
// foreground (in its child, before it runs the command).
func (t *terminal) attach(attr *syscall.SysProcAttr) {
	attr.Setpgid, attr.Foreground, attr.Ctty = true, true, t.fd
}

// give puts process group pgid in the terminal's foreground.
func (t *terminal) give(pgid int) error { return t.setForeground(pgid) }

// reclaim puts dlock's own process group back in the terminal's foreground.
func (t *terminal) reclaim() error { return t.setForeground(t.pgrp) }

// ours reports whether the terminal's foreground is dlock's process group.
func (t *terminal) ours() bool {
	fg, err := unix.IoctlGetInt(t.fd, unix.TIOCGPGRP)
	return err == nil && fg == t.pgrp
}

// setForeground is tcsetpgrp. dlock is not in the foreground when it takes
// the terminal back, and the kernel stops a background process that does
// this unless it ignores SIGTTOU: dlock ignores it meanwhile, as shells do.
func (t *terminal) setForeground(pgid int) error {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	if err := unix.IoctlSetPointerInt(t.fd, unix.TIOCSPGRP, pgid); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}
